package capi

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/pve"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const secret = "01234567-89ab-4cde-8f01-23456789abcd"

func cluster() *Cluster {
	// Listed out of order on purpose: install order is core first.
	return &Cluster{Name: "lab-mgmt", ProxmoxURL: "https://pve:8006", TokenID: "capmox@pve!capi", TokenSecret: secret, Configured: []config.Provider{
		{Type: config.ProviderIPAM, Name: "in-cluster", Version: "v1.1.1", Namespace: "capi-ipam-in-cluster-system"},
		{Type: config.ProviderInfrastructure, Name: "proxmox", Version: "v0.9.1", Namespace: "capmox-system", Variables: map[string]string{"CAPMOX_LOG_LEVEL": "4"}},
		{Type: config.ProviderCore, Name: "cluster-api", Version: "v1.12.11", Namespace: "capi-system"},
	}}
}

func TestProvidersCoreFirst(t *testing.T) {
	var got []string
	for _, p := range cluster().Providers() {
		got = append(got, p.Kind.Kind)
	}
	if strings.Join(got, ",") != "CoreProvider,InfrastructureProvider,IPAMProvider" {
		t.Errorf("order: %v", got)
	}
}

func TestVariablesAndSecretName(t *testing.T) {
	c := cluster()
	ps := c.Providers()
	core, infra := ps[0], ps[1]
	if c.Variables(core) != nil {
		t.Errorf("core needs no Secret: %v", c.Variables(core))
	}
	vars := c.Variables(infra)
	want := map[string]string{"PROXMOX_URL": "https://pve:8006", "PROXMOX_TOKEN": "capmox@pve!capi", "PROXMOX_SECRET": secret, "CAPMOX_LOG_LEVEL": "4"}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
	name := SecretName(infra, vars)
	if !strings.HasPrefix(name, "proxmox-variables-") || len(name) != len("proxmox-variables-")+10 || SecretName(infra, vars) != name {
		t.Errorf("name %q not stable or not as documented", name)
	}
	c.TokenSecret = "fedcba98-7654-4321-8fed-cba987654321"
	if SecretName(infra, c.Variables(infra)) == name {
		t.Error("a rotated secret must give a new Secret name")
	}
	if strings.Contains(name, secret[:8]) {
		t.Error("the name must not carry the secret")
	}
}

func TestDesired(t *testing.T) {
	c := cluster()
	ps := c.Providers()
	core := c.Desired(ps[0])
	if core.GetKind() != "CoreProvider" || core.GetNamespace() != "capi-system" || core.GetName() != "cluster-api" {
		t.Errorf("core: %v", core.Object)
	}
	if _, ok, _ := unstructured.NestedMap(core.Object, "spec", "configSecret"); ok {
		t.Error("core has no configSecret")
	}
	infra := c.Desired(ps[1])
	name, _, _ := unstructured.NestedString(infra.Object, "spec", "configSecret", "name")
	ns, _, _ := unstructured.NestedString(infra.Object, "spec", "configSecret", "namespace")
	if name != SecretName(ps[1], c.Variables(ps[1])) || ns != "capmox-system" {
		t.Errorf("configSecret %s/%s", ns, name)
	}
	if v, _, _ := unstructured.NestedString(infra.Object, "spec", "version"); v != "v0.9.1" {
		t.Errorf("version %q", v)
	}
}

func TestRedacted(t *testing.T) {
	got := Redacted(map[string]string{"PROXMOX_SECRET": secret, "PROXMOX_TOKEN": "capmox@pve!capi", "PROXMOX_URL": "https://pve:8006", "GITHUB_TOKEN": "ghp_x"})
	want := "GITHUB_TOKEN: (redacted)\nPROXMOX_SECRET: (redacted)\nPROXMOX_TOKEN: capmox@pve!capi\nPROXMOX_URL: https://pve:8006\n"
	if got != want {
		t.Errorf("got:\n%s", got)
	}
}

func TestCheckToken(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api2/json/version" || r.Header.Get("Authorization") != "PVEAPIToken=capmox@pve!capi="+secret {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"data":{"version":"9.2.11","release":"9.2"}}`))
	}))
	defer srv.Close()
	tests := []struct {
		name, secret, want string
		rejected           bool
	}{
		{"accepted", secret, "9.2.11", false},
		{"rejected", "fedcba98-7654-4321-8fed-cba987654321", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := pve.ReadOnly(pve.New(srv.URL+"/", "capmox@pve!capi", tt.secret, srv.Client()))
			v, err := checkToken(context.Background(), api, srv.URL+"/", "capmox@pve!capi", "secrets.yaml", nil)
			var rej *TokenRejectedError
			if errors.As(err, &rej) != tt.rejected || v != tt.want {
				t.Fatalf("got %q, %v", v, err)
			}
			if err != nil && (strings.Contains(err.Error(), tt.secret) || !strings.Contains(err.Error(), "token secret rejected")) {
				t.Errorf("error %q", err)
			}
		})
	}
}

func TestStatusSummary(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"installedVersion": "v1.12.10", "observedGeneration": int64(2),
		"conditions": []any{
			map[string]any{"type": "PreflightCheckPassed", "status": "False", "reason": "WaitingForCoreProviderReady", "message": "Waiting for the CoreProvider to be installed."},
		}}}}
	st := ReadStatus(u)
	if st.Ready() || st.ObservedGeneration != 2 || st.InstalledVersion != "v1.12.10" {
		t.Errorf("%+v", st)
	}
	if got := st.Summary(); got != "PreflightCheckPassed=False (WaitingForCoreProviderReady: Waiting for the CoreProvider to be installed.)" {
		t.Errorf("summary %q", got)
	}
}

// TestConditionOfWhichGeneration: a condition speaks of the generation its
// own observedGeneration names (or, without one, the status's); a refusal
// of an earlier spec, since undone, is not the current spec's, and a
// failure recorded for the current generation is reported while the
// operator retries.
func TestConditionOfWhichGeneration(t *testing.T) {
	st := Status{ObservedGeneration: 3, Conditions: map[string]Condition{
		"PreflightCheckPassed": {Status: "False", Reason: "UnsupportedProviderDowngradeReason", ObservedGeneration: 4},
		"ProviderInstalled":    {Status: "False", Reason: "ComponentsFetchError", Message: "release not found", ObservedGeneration: 5},
	}}
	for _, c := range []struct {
		cond Condition
		gen  int64
		want bool
	}{
		{st.Conditions["PreflightCheckPassed"], 4, true},
		{st.Conditions["PreflightCheckPassed"], 5, false},
		{Condition{Status: "False"}, 3, true},
		{Condition{Status: "False"}, 4, false},
	} {
		if got := st.about(c.cond, c.gen); got != c.want {
			t.Errorf("%+v at generation %d: %v, want %v", c.cond, c.gen, got, c.want)
		}
	}
	if typ, c, ok := st.FailingAt(5); !ok || typ != "ProviderInstalled" || c.Reason != "ComponentsFetchError" {
		t.Errorf("failing at 5: %s %+v %v", typ, c, ok)
	}
	if _, _, ok := st.FailingAt(6); ok {
		t.Error("a condition of generation 5 reported for 6")
	}
}

// TestCAPMOXTLS: the proxmox provider's CR tells CAPMOX to verify the
// API's certificate: against the system's roots (PROXMOX_INSECURE=false
// alone), against a CA (the flag, and the variables Secret's CA key
// mounted beside the release's volumes by an RFC 6902 patch, which
// appends where a merge patch would replace the lists), or, the user's
// explicit choice, not at all. A new CA is a new variables Secret.
func TestCAPMOXTLS(t *testing.T) {
	ca := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	for _, c := range []struct {
		golden string
		ca     []byte
		skip   bool
	}{
		{"capmox-system-roots.yaml", nil, false},
		{"capmox-ca.yaml", []byte(ca), false},
		{"capmox-skip-verify.yaml", []byte(ca), true},
	} {
		cl := cluster()
		cl.ProxmoxCA, cl.SkipTLSVerify = c.ca, c.skip
		infra := cl.Providers()[1]
		b, err := yaml.Marshal(cl.Desired(infra).Object)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join("testdata", c.golden)
		if *update {
			os.MkdirAll("testdata", 0o755)
			os.WriteFile(p, b, 0o644)
		}
		if want, err := os.ReadFile(p); err != nil || string(want) != string(b) {
			t.Errorf("%s: got\n%s", c.golden, b)
		}
		vars := cl.Variables(infra)
		if _, has := vars[RootCAVariable]; has != (c.ca != nil && !c.skip) {
			t.Errorf("%s: the variables hold the CA: %v", c.golden, has)
		}
	}
	a, b := cluster(), cluster()
	a.ProxmoxCA, b.ProxmoxCA = []byte(ca), []byte(ca+ca)
	if in := a.Providers()[1]; SecretName(in, a.Variables(in)) == SecretName(in, b.Variables(in)) {
		t.Error("another CA, the same variables Secret")
	}
}
