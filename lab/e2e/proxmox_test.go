package e2e

import (
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestProxmoxRole: `mgmtctl proxmox role` prints the pveum commands for
// CAPMOX's least privileges on the node's PVE version; run on the node,
// they make a token with privilege separation that apply accepts. With
// one privilege taken from its role, apply names it, the path and the
// command that grants it, exits 1 and changes nothing; that command
// fixes it. The token's secret is printed by no mgmtctl output.
func TestProxmoxRole(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	old := e.secret()
	e.editConfig("tokenID: capmox@pve!capi", "tokenID: least@pve!capi")
	r := e.mgmtctl("proxmox", "role")
	mustSucceed(t, r, "proxmox role")
	if !strings.Contains(r.Stdout, "# CAPMOX's token least@pve!capi on Proxmox VE 9.2.11") {
		t.Errorf("proxmox role:\n%s", r.Stdout)
	}
	var secret, vmRole string
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		res := e.PVE(line)
		if res.Code != 0 {
			t.Fatalf("%s: %+v", line, res)
		}
		if strings.HasPrefix(line, "pveum user token add") {
			secret = uuidRE.FindString(res.Stdout)
		}
		if strings.HasPrefix(line, "pveum role add CAPMOX.VM ") {
			vmRole = line
		}
	}
	if secret == "" || vmRole == "" {
		t.Fatalf("no token secret or VM role in:\n%s", r.Stdout)
	}
	if err := os.WriteFile(e.SecretsPath(), []byte("proxmox:\n  tokenSecret: "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.apply()
	mustSucceed(t, r, "apply with the least-privileged token")
	noSecret(t, r, secret, old)
	if !strings.Contains(r.Stdout, "token least@pve!capi accepted by https://192.0.2.10:8006 (Proxmox VE 9.2.11), with every privilege CAPMOX needs") {
		t.Errorf("apply:\n%s", r.Stdout)
	}

	// VM.Clone taken from the role: named, with its fix, nothing changed.
	privs := strings.Fields(vmRole)[5]
	if r := e.PVE("pveum role modify CAPMOX.VM --privs " + strings.Replace(privs, "VM.Clone,", "", 1)); r.Code != 0 {
		t.Fatalf("role modify: %+v", r)
	}
	before := e.clusterState()
	r = e.apply()
	noSecret(t, r, secret)
	if r.Code != 1 || !strings.Contains(r.Stderr, "Proxmox API token least@pve!capi lacks privileges CAPMOX needs (Proxmox VE 9.2.11); nothing was changed:\n  on /vms: VM.Clone\n    grant: pveum role modify CAPMOX.VM --append 1 --privs VM.Clone") || !strings.Contains(recap(t, r), "changed=0 ") {
		t.Errorf("apply without VM.Clone: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if after := e.clusterState(); after != before {
		t.Error("apply changed the lab with a token lacking a privilege")
	}
	if r := e.PVE("pveum role modify CAPMOX.VM --append 1 --privs VM.Clone"); r.Code != 0 {
		t.Fatalf("grant: %+v", r)
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("apply once granted: %s", got)
	}

	// The API's certificate pinned by its fingerprint, as a node's
	// self-signed one is: another is refused, naming both; the node's
	// passes, with no CA trusted.
	pemCert, err := os.ReadFile(filepath.Join(e.Dir, "pki", "pve.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemCert)
	sum := sha256.Sum256(block.Bytes)
	var parts []string
	for _, b := range sum {
		parts = append(parts, fmt.Sprintf("%02X", b))
	}
	fp := strings.Join(parts, ":")
	wrong := strings.Repeat("00:", 31) + "00"
	e.editConfig("    storage: ", "    fingerprint: "+wrong+"\n    storage: ")
	r = e.apply()
	if r.Code == 0 || !strings.Contains(r.Stderr, "the Proxmox API's certificate has SHA-256 fingerprint "+fp+", not spec.proxmox.fingerprint "+wrong) {
		t.Errorf("apply with another fingerprint pinned: exit %d\n%s", r.Code, r.Stderr)
	}
	e.editConfig(wrong, fp)
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("apply with the node's fingerprint pinned: %s", got)
	}
}
