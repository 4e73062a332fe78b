package klipperhelm

import (
	"context"
	"os"
	"path/filepath"

	"github.com/pkg/errors"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/repo"
)

// HelmVersion is the Helm klipper-helm bundles (its Dockerfile installs
// helm v3.18.6), whose library the lab links.
const HelmVersion = "v3.18.6"

// renderChart does, for release name, with Helm's own library what klipper-helm's helm does
// with the chart before it installs it: the repository added under the
// release's name (helm repo add), the chart located in it at the version
// (helm install <name>/<chart> --version), loaded, the Job's values
// coalesced with the chart's and checked against its values.schema.json,
// and its templates rendered for this cluster's version and APIs. Any of
// Helm's errors is the run's, in Helm's words.
//
// The objects the lab then creates are still its own rendering (helm.go):
// upstream's cert-manager chart registers cert-manager's webhook, which
// the lab does not run yet (issue #31).
func (c *Runner) renderChart(ctx context.Context, name string, s Spec) (*release.Release, error) {
	tmp, err := os.MkdirTemp("", "klipper-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	settings := cli.New()
	settings.RepositoryConfig = filepath.Join(tmp, "repositories.yaml")
	settings.RepositoryCache = filepath.Join(tmp, "cache")

	// helm repo add ${NAME} ${REPO} (cmd/helm/repo_add.go).
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

	inst := action.NewInstall(&action.Configuration{})
	inst.ChartPathOptions.Version = s.Version
	path, err := inst.ChartPathOptions.LocateChart(name+"/"+s.Chart, settings)
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, err
	}
	// helm template's way: no release stored, nothing created; the
	// cluster's version and APIs as its Capabilities.
	inst.DryRun, inst.ClientOnly = true, true
	inst.ReleaseName, inst.Namespace = name, s.TargetNamespace
	if sv, err := c.CS.Discovery().ServerVersion(); err == nil && sv.GitVersion != "" {
		inst.KubeVersion = &chartutil.KubeVersion{Version: sv.GitVersion, Major: sv.Major, Minor: sv.Minor}
	}
	if vs, err := action.GetVersionSet(c.CS.Discovery()); err == nil {
		inst.APIVersions = vs
	}
	rel, err := inst.RunWithContext(ctx, ch, copyValues(s.Values))
	if err != nil {
		return nil, err
	}
	// What helm install stores: the chart, the user's values, the
	// rendered manifest, its hooks and notes.
	rel.Config = s.Values
	return rel, nil
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
