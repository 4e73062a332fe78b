package klipperhelm

import (
	"os"
	"path/filepath"

	"github.com/pkg/errors"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/repo"
)

// HelmVersion is the Helm klipper-helm bundles (its Dockerfile installs
// helm v3.18.6), whose library the lab links.
const HelmVersion = "v3.18.6"

// locateChart does with Helm's own library what klipper-helm's helm does
// to find the chart it installs: the repository added under the release's
// name (helm repo add ${NAME%%/*} ${REPO}, cmd/helm/repo_add.go), the
// chart located in it at the version (helm install <name>/<chart>
// --version) and loaded. Any of Helm's errors is the run's, in Helm's
// words; a repository helm repo add refuses is a *RepoError.
func (c *Runner) locateChart(name string, s Spec) (*chart.Chart, error) {
	tmp, err := os.MkdirTemp("", "klipper-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	settings := cli.New()
	settings.RepositoryConfig = filepath.Join(tmp, "repositories.yaml")
	settings.RepositoryCache = filepath.Join(tmp, "cache")

	ref := s.Chart
	if s.Repo != "" {
		entry := &repo.Entry{Name: name, URL: s.Repo}
		r, err := repo.NewChartRepository(entry, getter.All(settings))
		if err != nil {
			return nil, err
		}
		r.CachePath = settings.RepositoryCache
		if _, err := r.DownloadIndexFile(); err != nil {
			return nil, &RepoError{errors.Wrapf(err, "looks like %q is not a valid chart repository or cannot be reached", s.Repo)}
		}
		f := repo.NewFile()
		f.Update(entry)
		if err := f.WriteFile(settings.RepositoryConfig, 0o600); err != nil {
			return nil, err
		}
		ref = name + "/" + s.Chart
	}
	opts := action.ChartPathOptions{Version: s.Version}
	path, err := opts.LocateChart(ref, settings)
	if err != nil {
		return nil, err
	}
	return loader.Load(path)
}

// RepoError is a repository helm repo add refused: klipper-helm stops
// there, before install or upgrade.
type RepoError struct{ Err error }

func (e *RepoError) Error() string { return e.Err.Error() }
func (e *RepoError) Unwrap() error { return e.Err }

// copyValues is a deep copy: Helm coalesces the chart's defaults into the
// map it is handed.
func copyValues(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, x := range v {
		if m, ok := x.(map[string]any); ok {
			x = copyValues(m)
		}
		out[k] = x
	}
	return out
}
