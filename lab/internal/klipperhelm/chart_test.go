package klipperhelm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// chartRepo serves a Helm repository holding chart demo 1.0.0: a template
// that needs .Values.name, and a schema that allows only name and
// replicas.
func chartRepo(t *testing.T) string {
	t.Helper()
	c := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "demo", Version: "1.0.0", AppVersion: "v1.0.0"},
		Values:   map[string]any{"name": "demo", "replicas": 1},
		Schema:   []byte(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","additionalProperties":false,"properties":{"name":{"type":"string"},"replicas":{"type":"integer"}}}`),
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ required \"name is required\" .Values.name }}\ndata:\n  replicas: {{ .Values.replicas | quote }}\n")}},
	}
	c.Raw = []*chart.File{{Name: chartutil.ValuesfileName, Data: []byte("name: demo\nreplicas: 1\n")}}
	dir := t.TempDir()
	p, err := chartutil.Save(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	var url string
	mux.HandleFunc("/index.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("apiVersion: v1\nentries:\n  demo:\n  - apiVersion: v2\n    appVersion: v1.0.0\n    name: demo\n    urls:\n    - " + url + "/charts/demo-1.0.0.tgz\n    version: 1.0.0\n"))
	})
	mux.HandleFunc("/charts/demo-1.0.0.tgz", func(w http.ResponseWriter, r *http.Request) {
		b, _ := os.ReadFile(p)
		w.Write(b)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url = srv.URL
	return url
}

// TestRenderChart: Helm's library resolves, loads and renders the chart
// from the repository as klipper-helm's helm does, and its errors are
// Helm's: a repository that is not one, a version the index lacks, a
// values key the chart's schema refuses, a template that fails.
func TestRenderChart(t *testing.T) {
	repoURL := chartRepo(t)
	r := &Runner{CS: fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}}), LabDir: t.TempDir()}
	ctx := context.Background()
	for _, tc := range []struct {
		name, repo, version string
		values              map[string]any
		err                 string
	}{
		{"renders", repoURL, "1.0.0", map[string]any{"replicas": 3}, ""},
		{"any version", repoURL, "", nil, ""},
		{"not a repository", repoURL + "/nope", "1.0.0", nil,
			`looks like "` + repoURL + `/nope" is not a valid chart repository or cannot be reached: failed to fetch ` + repoURL + `/nope/index.yaml : 404 Not Found`},
		{"no such version", repoURL, "9.9.9", nil, `chart "demo" matching 9.9.9 not found in rel index. (try 'helm repo update')`},
		{"a key the schema refuses", repoURL, "1.0.0", map[string]any{"replicaz": 3},
			"values don't meet the specifications of the schema(s) in the following chart(s):\ndemo:\n"},
		{"a template that fails", repoURL, "1.0.0", map[string]any{"name": nil}, "name is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := r.renderChart(ctx, "rel", Spec{Chart: "demo", Repo: tc.repo, Version: tc.version, TargetNamespace: "t", Values: tc.values})
			if tc.err == "" {
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				// What helm install stores: upstream's chart, the user's
				// values, Helm's rendering.
				if rel.Chart.Metadata.AppVersion != "v1.0.0" || !strings.Contains(rel.Manifest, "name: demo") || len(rel.Config) != len(tc.values) {
					t.Errorf("release: chart %+v, config %v, manifest:\n%s", rel.Chart.Metadata, rel.Config, rel.Manifest)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v\nwant %q", err, tc.err)
			}
		})
	}
	// Nothing is left behind: the repository's cache is the run's own.
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "klipper-helm-*")); len(m) != 0 {
		t.Errorf("left behind: %v", m)
	}
}

// TestRunSchemaFailure: a Job whose values the chart refuses fails as
// klipper-helm's helm install fails, and no release is recorded.
func TestRunSchemaFailure(t *testing.T) {
	repoURL := chartRepo(t)
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}})
	r := &Runner{CS: cs, LabDir: t.TempDir()}
	out, err := r.Run(context.Background(), Job{Env: map[string]string{"NAME": "rel", "CHART": "rel/demo", "REPO": repoURL},
		Args: []string{"install", "--namespace", "t", "--version", "1.0.0"}, Values: []File{{"values-0.yaml", []byte("replicaz: 3\n")}}})
	if out != "Installing helm chart\n" || err == nil || !strings.HasPrefix(err.Error(), "Error: INSTALLATION FAILED: values don't meet the specifications of the schema(s)") ||
		!strings.Contains(err.Error(), "replicaz") {
		t.Errorf("run: %q, %v", out, err)
	}
	if l, _ := cs.CoreV1().Secrets("t").List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("a release was recorded: %v", l.Items)
	}
}

// TestRunRecordsRelease: a release is stored as Helm stores it, so Helm's
// own storage reads it back (what helm list and helm get read): the
// chart and its version, the values, the rendered manifest, the status,
// and an upgrade's revision superseding the first.
func TestRunRecordsRelease(t *testing.T) {
	repoURL := chartRepo(t)
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}})
	r := &Runner{CS: cs, LabDir: t.TempDir()}
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
