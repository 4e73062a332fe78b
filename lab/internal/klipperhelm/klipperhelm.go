// Package klipperhelm is what the container of a helm-controller Job does
// (rancher/klipper-helm, whose entry script installs, upgrades or deletes
// one release): the lab's kubelet runs it for a Pod of that image. Its
// contract is the Job upstream's helm-controller writes (k3s-io/
// helm-controller pkg/controllers/chart/chart.go, job and args): the
// environment (NAME, VERSION, REPO, CHART, TARGET_NAMESPACE, ...), the
// arguments ("install --namespace ns [--create-namespace] [--version v]",
// or "delete"), and the values files mounted at /config.
//
// Helm's own library does helm's part (chart.go, helm.go): it locates and
// loads upstream's chart from the lab's repository, checks the values
// against its schema, renders it, creates its objects through the API
// server with the container's ServiceAccount, runs its hooks (waiting for
// hook Jobs, as helm does without --wait), and stores the release in
// Secrets. What the chart deploys is then upstream's controllers' and the
// kubelet's business.
package klipperhelm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Image is how the kubelet knows klipper-helm's Pods: helm-controller's
// Jobs run rancher/klipper-helm at some tag.
const Image = "rancher/klipper-helm"

// Runner carries out klipper-helm's work against the cluster.
type Runner struct {
	LabDir string // faults/
	// KubeClient and CS replace, in unit tests, the kube client Helm
	// makes from a Job's credentials (Helm's own kube/fake clients) and
	// the clientset its release storage uses.
	KubeClient kube.Interface
	CS         kubernetes.Interface
}

// Job is one run of the container: its environment, its arguments, the
// values files under /config (values-*.yaml, in name order, as the entry
// script passes them to helm with --values), and the container's
// credentials for the API server (its ServiceAccount's token, which
// helm-controller binds to its job ClusterRole).
type Job struct {
	Env    map[string]string
	Args   []string
	Values []File
	Kube   *rest.Config
}

// File is a file of a mounted volume.
type File struct {
	Name string
	Data []byte
}

// Spec is what a Job asks for.
type Spec struct {
	Chart           string
	Repo            string
	Version         string
	TargetNamespace string
	CreateNamespace bool
	Values          map[string]any
	// ConfigHash is the hash of the HelmChart's config the Job was made
	// for (CONFIG_HASH); a release it deploys carries it as a label.
	ConfigHash string
}

// ConfigHashLabel labels a release with the config it was deployed from.
// helm-controller injects EXPECTED_RELEASE_REVISION and CONFIG_HASH into
// the Job "and the helm job pod is expected to validate the hash, and not
// take action if it does not match. If the job pod does take action, the
// expected hash is added to the helm release resource as a label"
// (chart.go, getJobAndRelatedResources); it skips the Job of a chart
// whose deployed release has its hash.
const ConfigHashLabel = "helmcharts.helm.cattle.io/configHash"

// ArgsError is a Job whose arguments are not ones helm-controller writes.
type ArgsError struct{ Args []string }

func (e *ArgsError) Error() string {
	return fmt.Sprintf("klipper-helm: unexpected arguments %q", e.Args)
}

// spec reads a Job: the chart from CHART and REPO, the version and
// namespace from the arguments (as helm reads them), values merged in
// file order as helm merges --values.
func spec(j Job) (Spec, error) {
	s := Spec{Chart: j.Env["CHART"], Repo: j.Env["REPO"], Version: j.Env["VERSION"], TargetNamespace: j.Env["TARGET_NAMESPACE"],
		Values: map[string]any{}, ConfigHash: j.Env["CONFIG_HASH"]}
	// A chart from a repository is CHART=<name>/<chart>: klipper-helm adds
	// the repository under the HelmChart's name (helm repo add
	// ${NAME%%/*} $REPO) and installs from it (chart.go, job: chartName).
	if s.Repo != "" {
		s.Chart = strings.TrimPrefix(s.Chart, j.Env["NAME"]+"/")
	}
	if len(j.Args) == 0 || (j.Args[0] != "install" && j.Args[0] != "delete") {
		return s, &ArgsError{j.Args}
	}
	for i := 1; i < len(j.Args); i++ {
		switch a := j.Args[i]; a {
		case "--namespace", "--version":
			if i+1 >= len(j.Args) {
				return s, &ArgsError{j.Args}
			}
			if a == "--namespace" {
				s.TargetNamespace = j.Args[i+1]
			} else {
				s.Version = j.Args[i+1]
			}
			i++
		case "--create-namespace":
			s.CreateNamespace = true
		}
	}
	for _, f := range j.Values {
		if !strings.HasSuffix(f.Name, ".yaml") {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(f.Data, &m); err != nil {
			return s, fmt.Errorf("Error: failed to parse /config/%s: %v", f.Name, err)
		}
		merge(s.Values, m)
	}
	return s, nil
}

// merge merges src into dst as helm merges values files: maps key by key,
// anything else replaced.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// Run does what the entry script does for j and returns what it printed;
// a non-nil error is a failed run (the container exits 1), its message
// the last line printed.
func (r *Runner) Run(ctx context.Context, j Job) (string, error) {
	release := j.Env["NAME"]
	s, err := spec(j)
	if err != nil {
		return "", err
	}
	if j.Args[0] == "delete" {
		return r.uninstall(release, s, j)
	}
	res := r.helm(ctx, release, s, j)
	return res.log, res.err
}

// uninstall is the entry's delete: nothing without a release, else helm
// uninstall --wait, its error ignored (|| true).
func (r *Runner) uninstall(release string, s Spec, j Job) (string, error) {
	cfg, err := r.configuration(j, s.TargetNamespace)
	if err != nil {
		return "", fmt.Errorf("Error: %v", err)
	}
	if _, err := cfg.Releases.Last(release); err != nil {
		return "", nil
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, timeout(j)
	res, err := un.Run(release)
	if err != nil {
		return fmt.Sprintf("Error: uninstall: %v\n", err), nil
	}
	out := fmt.Sprintf("release \"%s\" uninstalled\n", release)
	if res != nil && res.Info != "" {
		out = res.Info + "\n" + out
	}
	return out, nil
}

// fault reads the helm-fail switch: on for every chart (empty value) or
// for the chart named in it.
func (r *Runner) fault(chart string) bool {
	b, err := os.ReadFile(filepath.Join(r.LabDir, "faults", "helm-fail"))
	if err != nil {
		return false
	}
	v := strings.TrimSpace(string(b))
	return v == "" || v == chart
}
