package charts

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/mgmtctl/mgmtctl/lab/internal/fixtures"
)

// TestPackage packages both charts from their modules at the pins and
// reads them back as helm does: the version and appVersion of the
// release, the operator's kustomized components and image, cert-manager's
// schema; each renders with its default values.
func TestPackage(t *testing.T) {
	var missing *fixtures.MissingGoError
	if _, err := fixtures.Download([]fixtures.Module{fixtures.CertManager}); errors.As(err, &missing) {
		t.Skipf("no go command: %v", err)
	}
	for _, tc := range []struct {
		name, version, appVersion string
		templates                 []string // templates the package holds
		rendered                  []string // what the default render holds
		values                    string   // a line of values.yaml
	}{
		{"cert-manager", "v1.21.2", "v1.21.2",
			[]string{"templates/webhook-deployment.yaml", "templates/crd-cert-manager.io_certificates.yaml"},
			[]string{"name: cert-manager-webhook", "--secure-port=10250", "quay.io/jetstack/cert-manager-controller:v1.21.2"},
			"installCRDs: false"},
		{"cluster-api-operator", "0.28.0", "v0.28.0",
			[]string{"templates/operator-components.yaml", "templates/deployment.yaml"},
			[]string{"kind: Certificate", "name: capi-operator-serving-cert", "cert-manager.io/inject-ca-from: 'cluster-api-operator-system/capi-operator-serving-cert'",
				`image: "registry.k8s.io/capi-operator/cluster-api-operator:v0.28.0"`, "helm.sh/resource-policy: keep"},
			"tag: v0.28.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgz, err := Package(tc.name, tc.version, tc.appVersion)
			if err != nil {
				t.Fatal(err)
			}
			c, err := loader.LoadArchive(bytes.NewReader(tgz))
			if err != nil {
				t.Fatal(err)
			}
			if c.Metadata.Version != tc.version || c.Metadata.AppVersion != tc.appVersion || c.Name() != tc.name {
				t.Errorf("metadata: %+v", c.Metadata)
			}
			have := map[string]bool{}
			for _, f := range c.Templates {
				have[f.Name] = true
			}
			for _, want := range tc.templates {
				if !have[want] {
					t.Errorf("no %s in the package", want)
				}
			}
			if c.Schema == nil {
				t.Error("no values.schema.json")
			}
			var values string
			for _, f := range c.Raw {
				if f.Name == chartutil.ValuesfileName {
					values = string(f.Data)
				}
			}
			if !strings.Contains(values, tc.values) || !strings.Contains(values, "#") {
				t.Errorf("values.yaml lacks %q or its comments", tc.values)
			}
			vals, err := chartutil.ToRenderValues(c, map[string]any{}, chartutil.ReleaseOptions{Name: tc.name, Namespace: tc.name + "-system", IsInstall: true}, chartutil.DefaultCapabilities)
			if err != nil {
				t.Fatal(err)
			}
			out, err := engine.Render(c, vals)
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			for _, s := range out {
				all.WriteString(s)
			}
			for _, want := range tc.rendered {
				if !strings.Contains(all.String(), want) {
					t.Errorf("the default render has no %q", want)
				}
			}
		})
	}
	if _, err := Package("nope", "1.0.0", "1.0.0"); err == nil {
		t.Error("an unknown chart was packaged")
	}
}
