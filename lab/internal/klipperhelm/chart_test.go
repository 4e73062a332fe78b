package klipperhelm

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"

	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm/helmtest"
)

// chartRepo serves a Helm repository holding chart demo 1.0.0
// (helmtest.Repo).
func chartRepo(t *testing.T) string { return helmtest.Repo(t) }

// testRunner runs Jobs with Helm's own stand-in kube client (its
// kube/fake PrintingKubeClient) and the release Secrets on a fake
// clientset: Helm's actions, storage and errors are real, the objects are
// not sent anywhere.
func testRunner(t *testing.T) (*Runner, *fake.Clientset) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}})
	return &Runner{CS: cs, KubeClient: &kubefake.PrintingKubeClient{Out: io.Discard}, LabDir: t.TempDir()}, cs
}

// TestRunChart: Helm's library resolves, loads, renders and installs the
// chart from the repository as klipper-helm's helm does, and its errors
// are Helm's, as helm prints them: a repository that is not one, a
// version the index lacks, a values key the chart's schema refuses, a
// template that fails. A failed install records nothing.
func TestRunChart(t *testing.T) {
	repoURL := chartRepo(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, repo, version string
		values              string
		err                 string
	}{
		{"installs", repoURL, "1.0.0", "replicas: 3\n", ""},
		{"any version", repoURL, "", "", ""},
		{"not a repository", repoURL + "/nope", "1.0.0", "",
			`Error: looks like "` + repoURL + `/nope" is not a valid chart repository or cannot be reached: failed to fetch ` + repoURL + `/nope/index.yaml : 404 Not Found`},
		{"no such version", repoURL, "9.9.9", "", `Error: INSTALLATION FAILED: chart "demo" matching 9.9.9 not found in rel index. (try 'helm repo update')`},
		{"a key the schema refuses", repoURL, "1.0.0", "replicaz: 3\n",
			"Error: INSTALLATION FAILED: values don't meet the specifications of the schema(s) in the following chart(s):\ndemo:\n"},
		{"a template that fails", repoURL, "1.0.0", "name: null\n", "name is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, cs := testRunner(t)
			out, err := r.Run(ctx, Job{Env: map[string]string{"NAME": "rel", "CHART": "rel/demo", "REPO": tc.repo},
				Args: []string{"install", "--namespace", "t", "--version", tc.version}, Values: []File{{"values-0.yaml", []byte(tc.values)}}})
			secrets, _ := cs.CoreV1().Secrets("t").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
			if tc.err == "" {
				if err != nil || !strings.Contains(out, "NAME: rel\n") || !strings.Contains(out, "STATUS: deployed\nREVISION: 1\n") || len(secrets.Items) != 1 {
					t.Fatalf("install: %q %v, %d release Secrets", out, err, len(secrets.Items))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v\nwant %q", err, tc.err)
			}
			if len(secrets.Items) != 0 {
				t.Errorf("a release was recorded: %v", secrets.Items)
			}
		})
	}
	// Nothing is left behind: the repository's cache is the run's own.
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "klipper-helm-*")); len(m) != 0 {
		t.Errorf("left behind: %v", m)
	}
}

// TestRunRecordsRelease: a release is stored as Helm stores it, so Helm's
// own storage reads it back (what helm list and helm get read): the
// chart and its version, the values, the rendered manifest, the status,
// and an upgrade's revision superseding the first.
func TestRunRecordsRelease(t *testing.T) {
	repoURL := chartRepo(t)
	r, cs := testRunner(t)
	ctx := context.Background()
	run := func(hash, values string) {
		t.Helper()
		if out, err := r.Run(ctx, Job{Env: map[string]string{"NAME": "rel", "CHART": "rel/demo", "REPO": repoURL, "CONFIG_HASH": hash},
			Args: []string{"install", "--namespace", "t", "--version", "1.0.0"}, Values: []File{{"values-0.yaml", []byte(values)}}}); err != nil {
			t.Fatalf("run: %q %v", out, err)
		}
	}
	run("h1", "replicas: 2\n")
	run("h2", "replicas: 3\n")
	st := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets("t")))
	last, err := st.Last("rel")
	if err != nil {
		t.Fatal(err)
	}
	if last.Version != 2 || last.Info.Status != release.StatusDeployed || last.Info.Description != "Upgrade complete" || last.Chart.Metadata.Version != "1.0.0" ||
		last.Config["replicas"] != float64(3) || !strings.Contains(last.Manifest, `replicas: "3"`) || last.Labels[ConfigHashLabel] != "h2" {
		t.Errorf("last release: %+v %+v %v %q %v", last.Info, last.Chart.Metadata, last.Config, last.Manifest, last.Labels)
	}
	first, err := st.Get("rel", 1)
	if err != nil || first.Info.Status != release.StatusSuperseded {
		t.Errorf("first release: %v %+v", err, first)
	}
	if l, _ := cs.CoreV1().Secrets("t").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"}); len(l.Items) != 2 {
		t.Errorf("owner=helm Secrets: %d, want 2", len(l.Items))
	}
}

// TestHelmVersion: the version stamped into the Helm CLI the tests build
// is the Helm module the lab links (go.mod).
func TestHelmVersion(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "helm.sh/helm/v3").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	if v := strings.TrimSpace(string(out)); v != HelmVersion {
		t.Errorf("go.mod has helm.sh/helm/v3 %s, HelmVersion is %s", v, HelmVersion)
	}
}
