// Package klipperhelm is what the container of a helm-controller Job does
// (rancher/klipper-helm, whose entry script installs, upgrades or deletes
// one release): the lab's kubelet runs it for a Pod of that image. Its
// contract is the Job upstream's helm-controller writes (k3s-io/
// helm-controller pkg/controllers/chart/chart.go, job and args): the
// environment (NAME, VERSION, REPO, CHART, TARGET_NAMESPACE, ...), the
// arguments ("install --namespace ns [--create-namespace] [--version v]",
// or "delete"), and the values files mounted at /config.
//
// Helm's library locates, loads and renders upstream's chart as klipper-helm's
// helm does (chart.go), so its schema and templates decide; the objects
// created are still the lab's (helm.go), until cert-manager runs in the lab
// and Helm installs what it renders (#31); the release is stored with
// Helm's own storage, as Helm stores what it rendered.
package klipperhelm

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/lab/internal/pki"
)

// Image is how the kubelet knows klipper-helm's Pods: helm-controller's
// Jobs run rancher/klipper-helm at some tag.
const Image = "rancher/klipper-helm"

// Runner carries out klipper-helm's work against the cluster.
type Runner struct {
	CS     kubernetes.Interface
	DC     dynamic.Interface
	HTTP   *http.Client
	LabDir string // faults/ and crds/
	// WebhookCA signs the operator webhooks' serving certificate, in place
	// of cert-manager's self-signed Issuer.
	WebhookCA *pki.CA
}

// Job is one run of the container: its environment, its arguments and
// the values files under /config (values-*.yaml, in name order, as the
// entry script passes them to helm with --values).
type Job struct {
	Env    map[string]string
	Args   []string
	Values []File
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
		return r.uninstall(ctx, release, s)
	}
	res := r.helm(ctx, release, s)
	return res.log, res.err
}

// uninstall removes the release's Secrets, as helm uninstall does once
// it has deleted the release's objects. The objects the lab rendered
// stay (the lab's charts keep no manifest to delete by).
func (r *Runner) uninstall(ctx context.Context, release string, s Spec) (string, error) {
	rels, err := r.releases(ctx, release, s.TargetNamespace)
	if err != nil {
		return "", err
	}
	if len(rels) == 0 {
		return "", nil
	}
	for _, sec := range rels {
		if err := r.CS.CoreV1().Secrets(sec.Namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{}); err != nil {
			return "", fmt.Errorf("Error: uninstallation completed with 1 error(s): %v", err)
		}
	}
	return fmt.Sprintf("release \"%s\" uninstalled\n", release), nil
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
