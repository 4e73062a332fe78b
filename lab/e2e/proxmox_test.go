package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestProxmoxRole: `mgmtctl proxmox role` prints the pveum commands for
// CAPMOX's least privileges on the node's PVE version; run on the node,
// they make a token with privilege separation that apply accepts. With
// one privilege taken from its role, apply names it, the path and the
// command that grants it, exits 1 and changes nothing; that command
// fixes it. The token's secret is printed by no mgmtctl output. The API's
// certificate pinned by its fingerprint is what CAPMOX verifies it
// against too; a CA that did not sign it stops the run before CAPMOX is
// touched.
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

	// spec.proxmox.pool: CAPMOX's VM role on the pool instead of /vms.
	// Through the lab's API, as CAPMOX would call it, its token is
	// refused on the management VM (in no pool) and may read a VM in
	// the pool; apply checks the token on the pool's path.
	e.editConfig("tokenID: least@pve!capi", "tokenID: least@pve!capi\n    pool: capi")
	r = e.mgmtctl("proxmox", "role")
	mustSucceed(t, r, "proxmox role with a pool")
	if !strings.Contains(r.Stdout, "\npveum pool add capi\n") || !strings.Contains(r.Stdout, "pveum acl modify /pool/capi --roles CAPMOX.VM --users least@pve --tokens 'least@pve!capi'\n") ||
		strings.Contains(r.Stdout, "acl modify /vms ") {
		t.Fatalf("proxmox role with a pool:\n%s", r.Stdout)
	}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(line, "pveum pool add ") || strings.HasPrefix(line, "pveum acl modify /pool/") {
			mustSucceed(t, e.PVE(line), line)
		}
	}
	mustSucceed(t, e.PVE("pveum acl delete /vms --roles CAPMOX.VM --users least@pve --tokens 'least@pve!capi'"), "the role off /vms")
	node := e.Nodes()[0].Name
	e.capmoxVM(node, 201, "lab1-cp-1", "192.0.2.101")
	mustSucceed(t, e.PVE("pveum pool modify capi --vms 201"), "VM 201 into the pool")
	asCAPMOX := func(vmid int) string {
		t.Helper()
		r := e.Run("", "curl", "-sS", "--cacert", e.CABundle(), "-H", "Authorization: PVEAPIToken=least@pve!capi="+secret,
			fmt.Sprintf("https://192.0.2.10:8006/api2/json/nodes/%s/qemu/%d/status/current", node, vmid), "-w", " %{http_code}")
		return r.Stdout
	}
	if got := asCAPMOX(110); !strings.HasSuffix(got, " 403") || !strings.Contains(got, "Permission check failed (/vms/110, VM.Audit)") {
		t.Errorf("CAPMOX's token on the management VM, with a pool: %q", got)
	}
	if got := asCAPMOX(201); !strings.HasSuffix(got, " 200") {
		t.Errorf("CAPMOX's token on a VM in its pool: %q", got)
	}
	r = e.apply()
	mustSucceed(t, r, "apply with a pool")
	if !strings.Contains(r.Stdout, "with every privilege CAPMOX needs") || !strings.Contains(recap(t, r), "changed=0") {
		t.Errorf("apply with a pool:\n%s", r.Stdout)
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
	// Pinned, the certificate is CAPMOX's trust too: the operator's
	// Deployment verifies (PROXMOX_INSECURE=false) against it, mounted
	// from the variables Secret as --proxmox-root-cert-file, and the lab's
	// CAPMOX, verifying, starts and is Ready.
	e.editConfig(wrong, fp)
	r = e.apply()
	mustSucceed(t, r, "apply with the node's fingerprint pinned")
	if !strings.Contains(r.Stdout, "changed: [lab-mgmt] capi/provider-infrastructure: update InfrastructureProvider capmox-system/proxmox") {
		t.Errorf("apply with the node's fingerprint pinned:\n%s", r.Stdout)
	}
	deploy := func(path string) string {
		return e.adminKubectl("get", "deploy", "-n", "capmox-system", "capmox-controller-manager", "-o", "jsonpath="+path).Stdout
	}
	if got := deploy(`{.spec.template.spec.containers[0].env[?(@.name=="PROXMOX_INSECURE")].value} {.spec.template.spec.containers[0].args}`); !strings.HasPrefix(got, "false ") ||
		!strings.Contains(got, "--proxmox-root-cert-file=/etc/capmox/proxmox/root-ca.pem") {
		t.Errorf("CAPMOX's Deployment: %q", got)
	}
	secretName := deploy(`{.spec.template.spec.volumes[?(@.name=="proxmox-root-ca")].secret.secretName}`)
	ca, err := base64.StdEncoding.DecodeString(e.adminKubectl("get", "secret", "-n", "capmox-system", secretName, "-o", "jsonpath={.data.PROXMOX_ROOT_CA}").Stdout)
	if b, _ := pem.Decode(ca); err != nil || b == nil || !bytes.Equal(b.Bytes, block.Bytes) {
		t.Errorf("CAPMOX's root-cert file (Secret %q) is not the pinned certificate: %q", secretName, ca)
	}
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("apply again with the node's fingerprint pinned: %s", got)
	}

	// A CA that did not sign the API's certificate: the capi phase stops
	// before CAPMOX is changed, naming both fingerprints.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not the node's CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	otherDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(e.LaptopHome(), "other-ca.pem")
	os.WriteFile(otherCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherDER}), 0o644)
	otherSum := sha256.Sum256(otherDER)
	var otherParts []string
	for _, b := range otherSum {
		otherParts = append(otherParts, fmt.Sprintf("%02X", b))
	}
	generation := deploy("{.metadata.generation}")
	e.editConfig("    fingerprint: "+fp, "    caFile: "+otherCA)
	r = e.apply()
	if r.Code != 1 || !strings.Contains(r.Stderr, "serves a certificate (SHA-256 "+fp+") that spec.proxmox.caFile's CA (SHA-256 "+strings.Join(otherParts, ":")+") does not verify") {
		t.Errorf("apply with another CA: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if got := deploy("{.metadata.generation}"); got != generation {
		t.Errorf("CAPMOX's Deployment changed (generation %s, then %s)", generation, got)
	}
}
