package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type statusReport struct {
	Healthy bool `json:"healthy"`
	Checks  []struct {
		Phase, Check, Host, State, Detail, Next string
	} `json:"checks"`
}

func (e *env) status(args ...string) (statusReport, int, string) {
	e.t.Helper()
	r := e.mgmtctl(append([]string{"status", "-o", "json"}, args...)...)
	var rep statusReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		e.t.Fatalf("status output: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	return rep, r.Code, r.Stdout + r.Stderr
}

// unhealthy lists phase/check of the report's unhealthy lines.
func (s statusReport) unhealthy() string {
	var out []string
	for _, c := range s.Checks {
		if c.State == "unhealthy" {
			out = append(out, c.Phase+"/"+c.Check)
		}
	}
	return strings.Join(out, ",")
}

// convergedStatus: on a converged lab status says healthy, names the
// server's version as real k3s reports it, and changes nothing (no lock,
// no write, no token minted), printing no secret even with -v.
func (e *env) convergedStatus(t *testing.T) {
	before := e.clusterState()
	rep, code, out := e.status()
	// One line per step of every phase (the backup apply takes before a
	// risky change is no step of a converged run), and the three only
	// status makes.
	if code != 0 || !rep.Healthy || len(rep.Checks) != 41 {
		t.Fatalf("converged: exit %d\n%s", code, out)
	}
	// The server's version is the pinned k3s release, as real k3s reports.
	if r := e.mgmtctl("status"); r.Code != 0 || !strings.Contains(r.Stdout, "healthy: 41 checks ok, and as configured") || !strings.Contains(r.Stdout, "(Kubernetes v1.35.7+k3s1)") {
		t.Errorf("text: %+v", r)
	}
	if after := e.clusterState(); after != before {
		t.Error("status changed the lab's state")
	}
	noSecret(t, e.mgmtctl("status", "-v"), e.secret())
}

// clusterState is every object's resourceVersion, the Proxmox node's disk
// and the laptop's kubeconfigs: what status must leave as it found it.
func (e *env) clusterState() string {
	e.t.Helper()
	r := e.adminKubectl("get", "all,secrets,configmaps,serviceaccounts,helmcharts,"+allProviders, "-A", "-o", "jsonpath={range .items[*]}{.metadata.uid}={.metadata.resourceVersion}{\"\\n\"}{end}")
	var kc []string
	for _, f := range []string{"lab-mgmt.kubeconfig", "lab-mgmt-ro.kubeconfig"} {
		b, _ := os.ReadFile(filepath.Join(e.LaptopHome(), ".kube", f))
		kc = append(kc, string(b))
	}
	return r.Stdout + e.pveState() + strings.Join(kc, "")
}

// TestStatus: after a broken token secret, or a pin bumped without
// applying, status exits 1 and names exactly that; a provider that never
// gets Ready ends the apply's wait with the operator's words, and status
// names it; a stopped VM is named once, what waits on it skipped. (On a
// converged lab status says healthy and changes nothing: TestConverged.)
func TestStatus(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	secret := e.secret()
	var (
		rep  statusReport
		code int
		out  string
	)

	// A broken token secret.
	orig, _ := os.ReadFile(e.SecretsPath())
	os.WriteFile(e.SecretsPath(), []byte("proxmox:\n  tokenSecret: 0badc0de-1111-4222-8333-444455556666\n"), 0o600)
	rep, code, out = e.status()
	if code != 1 || rep.unhealthy() != "capi/proxmox-token" || !strings.Contains(out, "token secret rejected") {
		t.Errorf("broken token: exit %d, unhealthy %q\n%s", code, rep.unhealthy(), out)
	}
	noSecret(t, e.mgmtctl("status"), "0badc0de-1111-4222-8333-444455556666", secret)
	os.WriteFile(e.SecretsPath(), orig, 0o600)

	// A pin bumped without applying.
	e.editConfig("  kubeconfig:", "  providers:\n    - {type: core, name: cluster-api, version: v1.12.11}\n    - {type: infrastructure, name: proxmox, version: v0.9.2}\n  kubeconfig:")
	rep, code, out = e.status("--tags", "capi")
	if code != 1 || rep.unhealthy() != "capi/provider-infrastructure" || !strings.Contains(out, "not as configured: upgrade InfrastructureProvider capmox-system/proxmox from v0.9.1 to v0.9.2") {
		t.Errorf("bumped pin: exit %d, unhealthy %q\n%s", code, rep.unhealthy(), out)
	}
	e.editConfig("  providers:\n    - {type: core, name: cluster-api, version: v1.12.11}\n    - {type: infrastructure, name: proxmox, version: v0.9.2}\n", "")

	// A provider that never gets Ready: the wait ends with what the
	// operator says and how it fares; status then names that provider.
	if err := e.SetFault("provider-never-ready", "proxmox", true); err != nil {
		t.Fatal(err)
	}
	e.editConfig("  kubeconfig:", providersAt("v1.12.11", "v0.9.0")+"  kubeconfig:")
	r := e.apply("--tags", "capi", "--wait-timeout", "15s")
	if r.Code != 1 {
		t.Fatalf("never-ready provider: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// Without a terminal, the 15 s wait says every 10 s that it goes on.
	if !strings.Contains(r.Stdout, "  ... capi/provider-infrastructure: still running (1") {
		t.Errorf("no progress line during the wait:\n%s", r.Stdout)
	}
	// The operator's Ready follows the Deployment's Available by status
	// alone, so its reason may be the first it saw; the provider's
	// Deployment says why.
	for _, want := range []string{"InfrastructureProvider capmox-system/proxmox not Ready at v0.9.0 after 15s", "conditions:",
		"  Ready=False ", "provider Deployment capmox-system/capmox-controller-manager: 0/1 available, Available=False (MinimumReplicasUnavailable: ",
		"\n  pod capmox-controller-manager-",
		"operator Deployment capi-operator-system/cluster-api-operator: 1/1 available"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, r.Stderr)
		}
	}
	// The pod's state as the wait ended: on a busy machine the new pod
	// may not have started yet in 15 s.
	if !regexp.MustCompile(`\n  pod capmox-controller-manager-\S+: (Running, not ready|Pending)`).MatchString(r.Stderr) {
		t.Errorf("diagnosis lacks the pod's state:\n%s", r.Stderr)
	}
	rep, code, out = e.status("--tags", "capi")
	if code != 1 || rep.unhealthy() != "capi/provider-infrastructure" || !strings.Contains(out, "not Ready: Ready=False (") {
		t.Errorf("never-ready status: exit %d, unhealthy %q\n%s", code, rep.unhealthy(), out)
	}

	// The VM stopped: named once (the step that would start it), what
	// waits on it skipped.
	if r := e.PVE("qm stop 110"); r.Code != 0 {
		t.Fatalf("qm stop: %+v", r)
	}
	rep, code, out = e.status()
	if code != 1 || rep.unhealthy() != "vm/start-vm" || !strings.Contains(out, "not as configured: start VM 110 (lab-mgmt)") || !strings.Contains(out, "mgmtctl apply --tags vm") || !strings.Contains(out, `"check":"wait-ssh","state":"skipped","detail":"needs vm/start-vm"`) {
		t.Errorf("stopped VM: exit %d, unhealthy %q\n%s", code, rep.unhealthy(), out)
	}
}
