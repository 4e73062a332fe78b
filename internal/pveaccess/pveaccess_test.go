package pveaccess

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestCommandsGolden: the pveum commands for CAPMOX's token, per major
// version (PVE 8 has VM.Monitor, PVE 9 the guest agent's privileges).
func TestCommandsGolden(t *testing.T) {
	for _, tc := range []struct {
		golden    string
		major     int
		tokenID   string
		iso, pool string
	}{
		{"capmox-pve9.txt", 9, "capmox@pve!capi", "local", ""},
		{"capmox-pve8.txt", 8, "capmox@pve!capi", "local", ""},
		{"root-token-pve9.txt", 9, "root@pam!capi", "local", ""},
		// One storage for the disks and the ISOs: one role with both.
		{"capmox-pve9-one-storage.txt", 9, "capmox@pve!capi", "local-lvm", ""},
		// A pool: the VM privileges on it, not on /vms; the pool made.
		{"capmox-pve9-pool.txt", 9, "capmox@pve!capi", "local", "capi"},
	} {
		cmds, err := Commands(CAPMOX(tc.major, "local-lvm", tc.iso, "vmbr0", tc.pool), tc.tokenID)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(cmds, "\n") + "\n"
		p := filepath.Join("testdata", tc.golden)
		if *update {
			os.WriteFile(p, []byte(got), 0o644)
		}
		want, _ := os.ReadFile(p)
		if got != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.golden, got, want)
		}
	}
	if _, err := Commands(nil, "capmox@pve"); err == nil {
		t.Error("a token ID without ! accepted")
	}
	// mgmtctl's own token (api access): its VM, node, storages, bridge,
	// and the run lock's pool, made and granted with propagation (the
	// lock's generations are its children).
	for _, major := range []int{8, 9} {
		cmds, err := Commands(Mgmtctl(major, []int{110}, []string{"pve"}, "local-lvm", "local", "vmbr0", "mgmtctl-lab-mgmt"), "mgmtctl@pve!mgmtctl")
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(cmds, "\n") + "\n"
		p := filepath.Join("testdata", fmt.Sprintf("mgmtctl-pve%d.txt", major))
		if *update {
			os.WriteFile(p, []byte(got), 0o644)
		}
		want, _ := os.ReadFile(p)
		if got != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", p, got, want)
		}
	}
}

// TestLacking: a privilege absent, or present without the propagation the
// grant needs, is missing; more than needed is fine.
func TestLacking(t *testing.T) {
	grants := CAPMOX(9, "local-lvm", "local", "vmbr0", "")
	have := map[string]map[string]bool{}
	for _, g := range grants {
		have[g.Path] = map[string]bool{"Permissions.Modify": true}
		for _, p := range g.Role.Privs {
			have[g.Path][p] = g.Propagate
		}
	}
	if m := Lacking(grants, have); len(m) != 0 {
		t.Fatalf("all granted: %+v", m)
	}
	delete(have["/vms"], "VM.Clone")
	have["/nodes"]["Sys.Audit"] = false
	m := Lacking(grants, have)
	if len(m) != 2 || m[0].Path != "/nodes" || m[1].Path != "/vms" || strings.Join(m[1].Privs, ",") != "VM.Clone" || m[1].Role != "CAPMOX.VM" {
		t.Errorf("Lacking = %+v", m)
	}
	e := (&MissingError{TokenID: "capmox@pve!capi", Version: "9.2.11", For: "CAPMOX", Missing: m[1:]}).Error()
	if !strings.Contains(e, "on /vms: VM.Clone\n    grant: pveum role modify CAPMOX.VM --append 1 --privs VM.Clone") ||
		!strings.Contains(e, "pveum acl modify /vms --roles CAPMOX.VM --users capmox@pve --tokens 'capmox@pve!capi'") {
		t.Errorf("MissingError:\n%s", e)
	}
	if strings.Contains(e, "role does not exist") {
		t.Errorf("one privilege of a role missing, and its role named as maybe missing:\n%s", e)
	}
	// A token made before mgmtctl needed its run lock's pool: the whole
	// role missing there, so the role and the pool may be missing too.
	lock := Mgmtctl(9, []int{110}, []string{"pve"}, "local-lvm", "local", "vmbr0", "mgmtctl-lab-mgmt")
	have = map[string]map[string]bool{}
	for _, g := range lock[:len(lock)-1] {
		have[g.Path] = map[string]bool{}
		for _, p := range g.Role.Privs {
			have[g.Path][p] = g.Propagate
		}
	}
	m = Lacking(lock, have)
	if len(m) != 1 || !m[0].All {
		t.Fatalf("Lacking without the lock's grant = %+v", m)
	}
	e = (&MissingError{TokenID: "mgmtctl@pve!mgmtctl", Version: "9.2.11", For: "mgmtctl's vm phase", Missing: m}).Error()
	if !strings.Contains(e, "on /pool/mgmtctl-lab-mgmt: Pool.Allocate, Pool.Audit") ||
		!strings.Contains(e, "(if the role does not exist yet: pveum role add Mgmtctl.Lock --privs Pool.Allocate,Pool.Audit; if the pool does not exist yet: pveum pool add mgmtctl-lab-mgmt; then pveum acl modify /pool/mgmtctl-lab-mgmt --roles Mgmtctl.Lock --users mgmtctl@pve --tokens 'mgmtctl@pve!mgmtctl')") {
		t.Errorf("MissingError for the lock's pool:\n%s", e)
	}
}

// TestCAPMOXPrivileges: CAPMOX's VM role holds each privilege a call of
// CAPMOX v0.9 is checked for (capmoxVM) and none of PVEVMAdmin's others;
// the guest agent's are PVE 9's names there, VM.Monitor on PVE 8. A
// pool moves the VM role from /vms to /pool/NAME and nothing else.
func TestCAPMOXPrivileges(t *testing.T) {
	role := func(grants []Grant, name string) (Grant, bool) {
		for _, g := range grants {
			if g.Role.Name == name {
				return g, true
			}
		}
		return Grant{}, false
	}
	for _, tc := range []struct {
		major      int
		want, deny []string
	}{
		{9, []string{"VM.Allocate", "VM.Audit", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory",
			"VM.Config.Network", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted", "VM.PowerMgmt"},
			[]string{"VM.Backup", "VM.Console", "VM.Migrate", "VM.Replicate", "VM.Snapshot", "VM.Snapshot.Rollback", "VM.Config.HWType",
				"VM.Config.Cloudinit", "VM.GuestAgent.FileRead", "VM.GuestAgent.FileWrite", "VM.GuestAgent.FileSystemMgmt", "VM.Monitor"}},
		{8, []string{"VM.Allocate", "VM.Audit", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory",
			"VM.Config.Network", "VM.Config.Options", "VM.Monitor", "VM.PowerMgmt"},
			[]string{"VM.Backup", "VM.Console", "VM.Migrate", "VM.Snapshot", "VM.GuestAgent.Unrestricted"}},
	} {
		vm, ok := role(CAPMOX(tc.major, "local-lvm", "local", "vmbr0", ""), "CAPMOX.VM")
		if !ok || vm.Path != "/vms" || strings.Join(vm.Role.Privs, ",") != strings.Join(tc.want, ",") {
			t.Errorf("PVE %d: CAPMOX.VM %+v, want %v on /vms", tc.major, vm, tc.want)
		}
		for _, d := range tc.deny {
			for _, p := range vm.Role.Privs {
				if p == d {
					t.Errorf("PVE %d: CAPMOX.VM grants %s, which no call of CAPMOX needs", tc.major, d)
				}
			}
		}
	}
	plain, pooled := CAPMOX(9, "local-lvm", "local", "vmbr0", ""), CAPMOX(9, "local-lvm", "local", "vmbr0", "capi")
	if len(plain) != len(pooled) {
		t.Fatalf("a pool changed the grants' number: %d, %d", len(plain), len(pooled))
	}
	for i := range plain {
		want := plain[i]
		if want.Path == "/vms" {
			want.Path = "/pool/capi"
		}
		if pooled[i].Path != want.Path || strings.Join(pooled[i].Role.Privs, ",") != strings.Join(want.Role.Privs, ",") {
			t.Errorf("with a pool, grant %d: %+v, want %+v", i, pooled[i], want)
		}
	}
	if sdn, _ := role(plain, "CAPMOX.SDN"); strings.Join(sdn.Role.Privs, ",") != "SDN.Use" || !sdn.Propagate {
		t.Errorf("CAPMOX.SDN: %+v", sdn)
	}
	if disks, _ := role(plain, "CAPMOX.Disks"); disks.Path != "/storage/local-lvm" || strings.Join(disks.Role.Privs, ",") != "Datastore.AllocateSpace" {
		t.Errorf("CAPMOX.Disks: %+v", disks)
	}
	if iso, _ := role(plain, "CAPMOX.ISO"); iso.Path != "/storage/local" || strings.Join(iso.Role.Privs, ",") != "Datastore.Allocate,Datastore.AllocateTemplate,Datastore.Audit" {
		t.Errorf("CAPMOX.ISO: %+v", iso)
	}
}

// TestMissingFrom reads each path the grants name once, and what a read
// fails with is named with its path.
func TestMissingFrom(t *testing.T) {
	grants := []Grant{{Path: "/vms", Role: Role{"R", []string{"VM.Audit"}}, Propagate: true},
		{Path: "/", Role: Role{"S", []string{"Sys.Audit"}}}, {Path: "/vms", Role: Role{"T", []string{"VM.Allocate"}}}}
	reads := map[string]int{}
	lookup := func(_ context.Context, p string) (map[string]bool, error) {
		reads[p]++
		return map[string]bool{"VM.Audit": true, "Sys.Audit": false}, nil
	}
	m, err := MissingFrom(context.Background(), grants, lookup)
	if err != nil || len(m) != 1 || m[0].Path != "/vms" || strings.Join(m[0].Privs, ",") != "VM.Allocate" {
		t.Errorf("MissingFrom = %+v, %v", m, err)
	}
	if reads["/vms"] != 1 || reads["/"] != 1 {
		t.Errorf("reads %v, want each path once", reads)
	}
	refused := func(context.Context, string) (map[string]bool, error) {
		return nil, errors.New("401 authentication failure")
	}
	if _, err := MissingFrom(context.Background(), grants, refused); err == nil || err.Error() != "read the token's permissions on /vms: 401 authentication failure" {
		t.Errorf("a refused token: %v", err)
	}
}

// TestHTTPClient: a pinned fingerprint accepts the one certificate whose
// SHA-256 it is, and refuses another naming both; a CA verifies as usual;
// neither leaves the trust store, which refuses a self-signed one.
func TestHTTPClient(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	fp := Fingerprint(srv.Certificate().Raw)
	get := func(c *http.Client) error {
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, f := range []string{fp, strings.ToLower(strings.ReplaceAll(fp, ":", ""))} {
		c, _ := HTTPClient(nil, f)
		if err := get(c); err != nil {
			t.Errorf("pinned %s: %v", f, err)
		}
	}
	c, _ := HTTPClient(nil, strings.Repeat("AB:", 31)+"AB")
	var fe *FingerprintError
	if err := get(c); !errors.As(err, &fe) || fe.Got != fp {
		t.Errorf("another fingerprint: %v", err)
	}
	der := srv.Certificate().Raw
	c, _ = HTTPClient(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), "")
	if err := get(c); err != nil {
		t.Errorf("by CA: %v", err)
	}
	c, _ = HTTPClient(nil, "")
	if err := get(c); err == nil {
		t.Error("the trust store accepted a self-signed certificate")
	}
}

// TestKnown: a node's major version maps to the privileges mgmtctl knows,
// its own; an older or a newer one is not known (PVE 10's privileges are
// not PVE 9's list).
func TestKnown(t *testing.T) {
	for in, want := range map[int]int{8: 8, 9: 9} {
		if got, ok := Known(in); !ok || got != want {
			t.Errorf("Known(%d) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []int{7, 10} {
		if _, ok := Known(in); ok {
			t.Errorf("PVE %d known", in)
		}
	}
}

// TestServedAndUntrusted: the certificate read through a pinned client is
// the pinned one (the one CAPMOX is given); a CA that does not verify the
// served certificate is an *UntrustedError naming both fingerprints,
// whatever else failed is not.
func TestServedAndUntrusted(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	defer srv.Close()
	// httptest's servers share one certificate: another CA is made here.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	otherDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint(srv.Certificate().Raw)
	c, _ := HTTPClient(nil, fp)
	got, err := ServedCertificate(context.Background(), c, srv.URL+"/")
	if b, _ := pem.Decode(got); err != nil || b == nil || Fingerprint(b.Bytes) != fp {
		t.Fatalf("served: %q, %v", got, err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherDER})
	c, _ = HTTPClient(ca, "")
	_, err = c.Get(srv.URL)
	ue := Untrusted(err, srv.URL, ca)
	if ue == nil || ue.Served != fp || ue.CA != Fingerprint(otherDER) || !strings.Contains(ue.Error(), fp) {
		t.Fatalf("untrusted: %v (%v)", ue, err)
	}
	if Untrusted(errors.New("connection refused"), srv.URL, ca) != nil || Untrusted(err, srv.URL, nil) != nil {
		t.Error("another error, or no CA, is not a CA's refusal")
	}
}
