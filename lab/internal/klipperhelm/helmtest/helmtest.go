// Package helmtest serves, for tests, a Helm chart repository with one
// small chart in it, as a repository serves (index.yaml, the packaged
// chart).
package helmtest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Repo serves a Helm repository holding chart demo 1.0.0: a template
// that needs .Values.name, and a schema that allows only name and
// replicas.
func Repo(t testing.TB) string {
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
