package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBNqX0ocPvUhqnXmSiE1X44IwvtNlnZ+0Zt4F3iHFNQR user@laptop\n"

// testEnv makes a home with an SSH public key and no environment.
func testEnv(t *testing.T) Env {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte(testKey), 0o644); err != nil {
		t.Fatal(err)
	}
	return Env{Home: home, Getenv: func(string) string { return "" }}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mgmt.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLoadValid(t *testing.T) {
	env := testEnv(t)
	l, err := Load(writeConfig(t, readTestdata(t, "valid.yaml")), "", env)
	if err != nil {
		t.Fatalf("valid config rejected:\n%v", err)
	}
	if got := l.Cluster.Spec.VM.VLAN; got != 4 {
		t.Errorf("vlan = %d", got)
	}
	// Values written as text come typed, parsed once.
	if got := l.Cluster.Spec.VM.Net; got != netip.MustParsePrefix("192.0.2.50/24") {
		t.Errorf("vm net = %v", got)
	}
	if got := l.Cluster.Spec.Inspector.TTL; got != 168*time.Hour {
		t.Errorf("inspector ttl = %v", got)
	}
	if got := l.Cluster.Spec.K3s.Release; got != (K3sRelease{1, 35, 7, 1}) || got.String() != "v1.35.7+k3s1" {
		t.Errorf("k3s release = %+v", got)
	}
	if l.AuthorizedKey != strings.TrimSpace(testKey) {
		t.Errorf("authorized key = %q", l.AuthorizedKey)
	}
	if got, want := l.KubeconfigPath(), filepath.Join(env.Home, ".kube/lab-mgmt.kubeconfig"); got != want {
		t.Errorf("kubeconfig path = %q, want %q", got, want)
	}
}

func TestDefaults(t *testing.T) {
	l, err := Load(writeConfig(t, readTestdata(t, "minimal.yaml")), "", testEnv(t))
	if err != nil {
		t.Fatalf("minimal config rejected:\n%v", err)
	}
	s := l.Cluster.Spec
	checks := []struct {
		name      string
		got, want any
	}{
		{"proxmox.user", s.Proxmox.User, "root"},
		{"proxmox.apiURL", s.Proxmox.APIURL, "https://192.0.2.10:8006"},
		{"proxmox.storage", s.Proxmox.Storage, "local-lvm"},
		{"proxmox.imageDir", s.Proxmox.ImageDir, "/var/lib/vz/template/iso"},
		{"image.sha256", s.Image.SHA256, DefaultImageSHA256},
		{"vm.cores", s.VM.Cores, 2},
		{"vm.memoryMiB", s.VM.MemoryMiB, 4096},
		{"vm.diskGiB", s.VM.DiskGiB, 30},
		{"vm.vlan", s.VM.VLAN, 0},
		{"vm.nameservers", s.VM.Nameservers, []string{"192.0.2.1"}},
		{"vm.user", s.VM.User, "ubuntu"},
		{"k3s.version", s.K3s.Version, DefaultK3sVersion},
		{"certManager.version", s.CertManager.Version, DefaultCertManager},
		{"clusterAPIOperator.version", s.ClusterAPIOperator.Version, DefaultOperator},
		{"kubeconfig.path", s.Kubeconfig.Path, "~/.kube/lab-mgmt.kubeconfig"},
		{"inspector.name", s.Inspector.Name, "lab-mgmt-ro"},
		{"inspector.tokenTTL", s.Inspector.TokenTTL, "168h"},
		{"ssh.serverAliveInterval", s.SSH.Interval, 10 * time.Second},
		{"ssh.serverAliveCountMax", s.SSH.ServerAliveCountMax, 3},
		{"providers", len(s.Providers), 5},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	wantNS := []string{"capi-system", "capi-kubeadm-bootstrap-system", "capi-kubeadm-control-plane-system", "capmox-system", "capi-ipam-in-cluster-system"}
	for i, p := range s.Providers {
		if p.Namespace != wantNS[i] {
			t.Errorf("providers[%d] (%s) namespace = %q, want %q", i, p.Type, p.Namespace, wantNS[i])
		}
	}
}

// TestProviderNamespaceDefault checks that a provider listed without a
// namespace still gets upstream's.
func TestProviderNamespaceDefault(t *testing.T) {
	body := strings.Replace(readTestdata(t, "valid.yaml"), "{type: infrastructure, name: proxmox, version: v0.9.1}", "{type: infrastructure, version: v0.9.1, variables: {CAPMOX_LOG_LEVEL: \"4\"}}", 1)
	l, err := Load(writeConfig(t, body), "", testEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	p := l.Cluster.Spec.Providers[3]
	if p.Name != "proxmox" || p.Namespace != "capmox-system" || p.Variables["CAPMOX_LOG_LEVEL"] != "4" {
		t.Errorf("provider = %+v", p)
	}
}

// TestBadConfigs is the validation contract: each bad config gives exactly
// the expected message, on the expected line, naming the field.
func TestBadConfigs(t *testing.T) {
	tests := []struct {
		name     string
		from, to string // replace from with to in valid.yaml ("" from: append to)
		want     string // expected error line, after the file name
	}{
		{"wrong apiVersion", "apiVersion: mgmtctl/v1alpha1", "apiVersion: mgmtctl/v1", `:1: apiVersion: must be mgmtctl/v1alpha1 (got "mgmtctl/v1")`},
		{"wrong kind", "kind: ManagementCluster", "kind: Cluster", `:2: kind: must be ManagementCluster (got "Cluster")`},
		{"name missing", "  name: lab-mgmt\n", "  name: \"\"\n", `:4: metadata.name: is required`},
		{"name uppercase", "name: lab-mgmt\n", "name: Lab_Mgmt\n", `:4: metadata.name: must be a DNS label`},
		{"unknown top field", "kind: ManagementCluster\n", "kind: ManagementCluster\nstatus: {}\n", `:3: status: unknown field; known fields here: apiVersion, kind, metadata, spec`},
		{"typo in field", "    cores: 2", "    coers: 2", `:19: spec.vm.coers: unknown field; did you mean "cores"?`},
		{"secret in config", "    tokenID: capmox@pve!capi", "    tokenID: capmox@pve!capi\n    tokenSecret: 5e9a1f7c-0000-4000-8000-123456789abc", `:12: spec.proxmox.tokenSecret: unknown field; secrets never belong in the config`},
		{"host missing", "    host: pv1-1.example.lan\n", "", `:6: spec.proxmox.host: is required`},
		{"host bad port", "host: pv1-1.example.lan", "host: pv1-1.example.lan:99999", `:7: spec.proxmox.host: port must be a number from 1 to 65535 (got "pv1-1.example.lan:99999")`},
		{"host with space", "host: pv1-1.example.lan", "host: \"pv1 1\"", `:7: spec.proxmox.host: must be a host name or IP address, optionally with :port`},
		{"bad proxmox user", "user: root", "user: \"root; id\"", `:8: spec.proxmox.user: must be a Unix user name (got "root; id")`},
		{"node missing", "    node: pv1-1\n", "", `:6: spec.proxmox.node: is required`},
		{"apiURL http", "apiURL: https://pv1-1.example.lan:8006", "apiURL: http://pv1-1.example.lan:8006", `:10: spec.proxmox.apiURL: must be a https URL`},
		{"apiURL with credentials", "apiURL: https://pv1-1.example.lan:8006", "apiURL: https://root:pw@pv1-1.example.lan:8006", `:10: spec.proxmox.apiURL: must not carry credentials in the URL`},
		{"tokenID without name", "tokenID: capmox@pve!capi", "tokenID: capmox@pve", `:11: spec.proxmox.tokenID: must be a Proxmox API token ID of the form user@realm!tokenname (got "capmox@pve")`},
		{"bad storage", "storage: local-lvm", "storage: Local LVM", `:12: spec.proxmox.storage: must be a Proxmox storage ID`},
		{"relative imageDir", "imageDir: /var/lib/vz/template/iso", "imageDir: template/iso", `:13: spec.proxmox.imageDir: must be a clean absolute path without spaces (got "template/iso")`},
		{"imageDir traversal", "imageDir: /var/lib/vz/template/iso", "imageDir: /var/lib/../../etc", `:13: spec.proxmox.imageDir: must be a clean absolute path`},
		{"image url ftp", "url: https://cloud-images", "url: ftp://cloud-images", `:15: spec.image.url: must be a https or http URL`},
		{"image url no file", "noble-server-cloudimg-amd64.img", "", `:15: spec.image.url: must end in a file name`},
		{"sha256 short", "sha256: 6a81c37564db9b1ee84e141922625e1d7c5b389b99bb3c572e0243607d5bb4d2", "sha256: 6a81c375", `:16: spec.image.sha256: must be 64 lowercase hex digits (got "6a81c375")`},
		{"sha256 uppercase", "sha256: 6a81c37564db9b1ee84e141922625e1d7c5b389b99bb3c572e0243607d5bb4d2", "sha256: 6A81C37564DB9B1EE84E141922625E1D7C5B389B99BB3C572E0243607D5BB4D2", `:16: spec.image.sha256: must be 64 lowercase hex digits`},
		{"vmid too low", "id: 110", "id: 99", `:18: spec.vm.id: must be from 100 to 999999999 (got "99")`},
		{"vmid too high", "id: 110", "id: 1000000000", `:18: spec.vm.id: must be from 100 to 999999999`},
		{"vmid missing", "    id: 110\n", "", `:17: spec.vm.id: is required`},
		{"vmid not a number", "id: 110", "id: one-ten", `:18: spec.vm.id: must be a whole number (got "one-ten")`},
		// A value written empty or zero is validated as written, never
		// replaced by the default (which only a field left out gets).
		{"derived field written", "    cores: 2", "    cores: 2\n    net: 192.0.2.50/24", `:20: spec.vm.net: unknown field`},
		{"cores written zero", "cores: 2", "cores: 0", `:19: spec.vm.cores: must be from 2 to 512 (k3s with cert-manager, the operator and five providers needs 2 or more) (got "0")`},
		{"vlan written zero", "vlan: 4", "vlan: 0", `:23: spec.vm.vlan: must be from 1 to 4094; leave it out for an untagged port (got "0")`},
		{"kubeconfig path written empty", "path: ~/.kube/lab-mgmt.kubeconfig", `path: ""`, `:45: spec.kubeconfig.path: is empty: write a value, or leave the field out for the default (~/.kube/lab-mgmt.kubeconfig)`},
		{"bridge written empty", "bridge: vmbr0", `bridge: ""`, `:22: spec.vm.bridge: is empty: write a value, or leave the field out for the default (vmbr0)`},
		{"tokenTTL written empty", "tokenTTL: 168h", `tokenTTL: ""`, `:48: spec.inspector.tokenTTL: is empty`},
		{"too few cores", "cores: 2", "cores: 1", `:19: spec.vm.cores: must be from 2 to 512 (k3s with cert-manager, the operator and five providers needs 2 or more) (got "1")`},
		{"too little memory", "memoryMiB: 4096", "memoryMiB: 2048", `:20: spec.vm.memoryMiB: must be from 3072 to`},
		{"too little disk", "diskGiB: 30", "diskGiB: 10", `:21: spec.vm.diskGiB: must be from 20 to`},
		{"bad bridge", "bridge: vmbr0", "bridge: a-bridge-name-too-long", `:22: spec.vm.bridge: must be a Linux bridge name`},
		{"vlan zero is untagged, 4095 is not", "vlan: 4", "vlan: 4095", `:23: spec.vm.vlan: must be from 1 to 4094; leave it out for an untagged port (got "4095")`},
		{"address without prefix", "address: 192.0.2.50/24", "address: 192.0.2.50", `:24: spec.vm.address: must be an IPv4 address with its prefix length`},
		{"address is network", "address: 192.0.2.50/24", "address: 192.0.2.0/24", `:24: spec.vm.address: is the network address of its subnet`},
		{"address is broadcast", "address: 192.0.2.50/24", "address: 192.0.2.255/24", `:24: spec.vm.address: is the broadcast address of its subnet`},
		{"address ipv6", "address: 192.0.2.50/24", "address: 2001:db8::5/64", `:24: spec.vm.address: must be an IPv4 address`},
		{"gateway outside subnet", "gateway: 192.0.2.1", "gateway: 198.51.100.1", `:25: spec.vm.gateway: must be inside the VM's subnet 192.0.2.0/24 (got "198.51.100.1")`},
		{"gateway is the VM", "gateway: 192.0.2.1", "gateway: 192.0.2.50", `:25: spec.vm.gateway: must not be the VM's own address`},
		{"bad nameserver", "nameservers: [192.0.2.1]", "nameservers: [192.0.2.1, dns.example]", `:26: spec.vm.nameservers[1]: must be an IP address (got "dns.example")`},
		{"nameservers not a list", "nameservers: [192.0.2.1]", "nameservers: 192.0.2.1", `:26: spec.vm.nameservers: must be a list, not a scalar`},
		{"vm user root", "    user: ubuntu", "    user: root", `:27: spec.vm.user: must not be root`},
		{"public key missing", "sshPublicKeyFile: ~/.ssh/id_ed25519.pub", "sshPublicKeyFile: ~/.ssh/nope.pub", `:28: spec.vm.sshPublicKeyFile: cannot read the SSH public key: no such file or directory (got "~/.ssh/nope.pub")`},
		{"public key is garbage", "sshPublicKeyFile: ~/.ssh/id_ed25519.pub", "sshPublicKeyFile: ~/.ssh/garbage.pub", `:28: spec.vm.sshPublicKeyFile: is not an OpenSSH public key`},
		{"k3s version without suffix", "version: v1.35.7+k3s1", "version: v1.35.7", `:30: spec.k3s.version: must be a k3s release tag like v1.35.7+k3s1 (got "v1.35.7")`},
		{"cert-manager without v", "version: v1.21.2", "version: 1.21.2", `:33: spec.certManager.version: must be a chart version with a leading v`},
		{"operator with v", "version: 0.28.0", "version: v0.28.0", `:36: spec.clusterAPIOperator.version: must be a chart version without a leading v, like 0.28.0`},
		{"repo not a URL", "repo: https://charts.jetstack.io", "repo: charts.jetstack.io", `:34: spec.certManager.repo: must be an absolute URL`},
		{"two cores", "{type: bootstrap, name: kubeadm, version: v1.12.11}", "{type: core, name: cluster-api, version: v1.12.11}", `:40: spec.providers[1].type: only one provider per type; spec.providers[0] is already core (got "core")`},
		{"no core", "    - {type: core, name: cluster-api, version: v1.12.11}\n", "", `:38: spec.providers: exactly one core provider (cluster-api) is required`},
		{"core misnamed", "{type: core, name: cluster-api,", "{type: core, name: capi,", `:39: spec.providers[0].name: a core provider must be "cluster-api" in this version of mgmtctl (got "capi")`},
		{"unknown provider type", "{type: ipam,", "{type: addon,", `:43: spec.providers[4].type: must be one of core, bootstrap, controlPlane, infrastructure, ipam (got "addon")`},
		{"provider version bad", "version: v0.9.1}", "version: latest}", `:42: spec.providers[3].version: must be a release tag like v1.12.11 (got "latest")`},
		{"provider variable reserved", "{type: infrastructure, name: proxmox, version: v0.9.1}", "{type: infrastructure, name: proxmox, version: v0.9.1, variables: {PROXMOX_SECRET: x}}", `:42: spec.providers[3].variables.PROXMOX_SECRET: is set by mgmtctl from spec.proxmox and the secrets file; remove it`},
		{"provider variable lowercase", "{type: infrastructure, name: proxmox, version: v0.9.1}", "{type: infrastructure, name: proxmox, version: v0.9.1, variables: {log: x}}", `:42: spec.providers[3].variables.log: variable names must be upper-case`},
		{"provider namespace shared", "{type: ipam, name: in-cluster, version: v1.1.1}", "{type: ipam, name: in-cluster, version: v1.1.1, namespace: capmox-system}", `:43: spec.providers[4].namespace: is already the namespace of spec.providers[3]`},
		{"kubeconfig path is dir", "path: ~/.kube/lab-mgmt.kubeconfig", "path: ~/.kube/", `:45: spec.kubeconfig.path: must be a file path`},
		{"kubeconfig ~user", "path: ~/.kube/lab-mgmt.kubeconfig", "path: ~bob/k", `:45: spec.kubeconfig.path: only ~/ is expanded`},
		{"inspector name bad", "name: lab-mgmt-ro", "name: Lab_RO", `:47: spec.inspector.name: must be a DNS subdomain`},
		{"tokenTTL not a duration", "tokenTTL: 168h", "tokenTTL: 7d", `:48: spec.inspector.tokenTTL: must be a duration like 168h or 90m (got "7d")`},
		{"tokenTTL too short", "tokenTTL: 168h", "tokenTTL: 5m", `:48: spec.inspector.tokenTTL: must be from 10m to 8760h (got "5m")`},
		{"tokenTTL too long", "tokenTTL: 168h", "tokenTTL: 9000h", `:48: spec.inspector.tokenTTL: must be from 10m to 8760h`},
		{"keepalive not a duration", "tokenTTL: 168h", "tokenTTL: 168h\n  ssh:\n    serverAliveInterval: 10", `:50: spec.ssh.serverAliveInterval: must be a duration like 10s or 1m (got "10")`},
		{"keepalive too fast", "tokenTTL: 168h", "tokenTTL: 168h\n  ssh:\n    serverAliveInterval: 100ms", `:50: spec.ssh.serverAliveInterval: must be from 1s to 5m (got "100ms")`},
		{"keepalive count zero", "tokenTTL: 168h", "tokenTTL: 168h\n  ssh:\n    serverAliveCountMax: 0", `:50: spec.ssh.serverAliveCountMax: must be from 1 to 20 (got "0")`},
		{"snapshot schedule not cron", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    schedule: every 6h", `:50: spec.backup.schedule: must be a cron schedule of five fields (minute hour day-of-month month day-of-week), like "0 */6 * * *": expected exactly 5 fields, found 2`},
		{"snapshot schedule six fields", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    schedule: \"0 0 */6 * * *\"", `:50: spec.backup.schedule: must be a cron schedule of five fields (minute hour day-of-month month day-of-week), like "0 */6 * * *": expected exactly 5 fields, found 6`},
		{"snapshot retention", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    retention: -1", `:50: spec.backup.retention: must be from 1 to 1000`},
		{"proxmox fingerprint short", "    storage: local-lvm", "    storage: local-lvm\n    fingerprint: AB:CD", `:13: spec.proxmox.fingerprint: must be the certificate's SHA-256 as`},
		{"proxmox isoStorage bad", "    storage: local-lvm", "    storage: local-lvm\n    isoStorage: ISO store", `:13: spec.proxmox.isoStorage: must be a Proxmox storage ID`},
		{"proxmox pool bad", "    storage: local-lvm", "    storage: local-lvm\n    pool: 1capi", `:13: spec.proxmox.pool: must be a Proxmox pool ID: a letter, then letters, digits, '.', '-' or '_' (not nested)`},
		{"proxmox pool nested", "    storage: local-lvm", "    storage: local-lvm\n    pool: capi/workers", `:13: spec.proxmox.pool: must be a Proxmox pool ID`},
		{"proxmox access unknown", "    storage: local-lvm", "    storage: local-lvm\n    access: rest", `:13: spec.proxmox.access: must be ssh (root SSH to the nodes and qm) or api (the Proxmox API with mgmtctlTokenID) (got "rest")`},
		{"proxmox api without token", "    storage: local-lvm", "    storage: local-lvm\n    access: api", `:6: spec.proxmox.mgmtctlTokenID: is required`},
		{"proxmox api token malformed", "    storage: local-lvm", "    storage: local-lvm\n    access: api\n    mgmtctlTokenID: mgmtctl", `:14: spec.proxmox.mgmtctlTokenID: must be a Proxmox API token ID of the form user@realm!tokenname`},
		{"proxmox mgmtctl token with ssh", "    storage: local-lvm", "    storage: local-lvm\n    mgmtctlTokenID: mgmtctl@pve!vm", `:13: spec.proxmox.mgmtctlTokenID: is used only with spec.proxmox.access: api`},
		{"proxmox CA not PEM", "    storage: local-lvm", "    storage: local-lvm\n    caFile: ~/.ssh/garbage.pub", `:13: spec.proxmox.caFile: holds no PEM certificate`},
		{"s3 endpoint with scheme", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    s3:\n      endpoint: https://s3.example.net\n      bucket: snaps", `:51: spec.backup.s3.endpoint: must be host or host:port, without https://`},
		{"s3 bucket missing", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    s3:\n      endpoint: s3.example.net", `:50: spec.backup.s3.bucket: is required`},
		{"s3 bucket uppercase", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    s3:\n      endpoint: s3.example.net\n      bucket: My_Snaps", `:52: spec.backup.s3.bucket: must be an S3 bucket name`},
		{"s3 folder slash", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    s3:\n      endpoint: s3.example.net\n      bucket: snaps\n      folder: /mgmt/", `:53: spec.backup.s3.folder: must be a key prefix like k3s/mgmt`},
		{"s3 CA not PEM", "tokenTTL: 168h", "tokenTTL: 168h\n  backup:\n    s3:\n      endpoint: s3.example.net\n      bucket: snaps\n      caFile: ~/.ssh/garbage.pub", `:53: spec.backup.s3.caFile: holds no PEM certificate`},
		{"not yaml", "kind: ManagementCluster\n", "kind: [ManagementCluster\n", `: not valid YAML`},
		{"alias", "version: v1.35.7+k3s1\n    installScriptURL: https://get.k3s.io", "version: &k v1.35.7+k3s1\n    installScriptURL: *k", `:31: spec.k3s.installScriptURL: YAML aliases are not supported; write the value out`},
		{"duplicate field", "    cores: 2\n", "    cores: 2\n    cores: 4\n", `:20: spec.vm.cores: duplicate field`},
		{"spec not a mapping", "metadata:\n  name: lab-mgmt\n", "metadata: lab-mgmt\n", `:3: metadata: must be a mapping, not a scalar`},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		if seen[tt.want] {
			t.Fatalf("two cases expect %q; each bad config must be distinct", tt.want)
		}
		seen[tt.want] = true
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t)
			if err := os.WriteFile(filepath.Join(env.Home, ".ssh", "garbage.pub"), []byte("not a key\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			body := readTestdata(t, "valid.yaml")
			if !strings.Contains(body, tt.from) {
				t.Fatalf("valid.yaml has no %q", tt.from)
			}
			body = strings.Replace(body, tt.from, tt.to, 1)
			path := writeConfig(t, body)
			_, err := Load(path, "", env)
			if err == nil {
				t.Fatalf("config accepted:\n%s", body)
			}
			errs, ok := err.(Errors)
			if !ok {
				t.Fatalf("error is %T, want Errors", err)
			}
			want := path + tt.want
			for _, e := range errs {
				if strings.HasPrefix(e.Error(), want) {
					return
				}
			}
			t.Errorf("no error starts with\n  %s\ngot:\n%v", want, err)
		})
	}
	if len(tests) < 30 {
		t.Errorf("only %d bad configs; the contract asks for 30 or more", len(tests))
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	body := readTestdata(t, "valid.yaml")
	body = strings.Replace(body, "id: 110", "id: 5", 1)
	body = strings.Replace(body, "vlan: 4", "vlan: 5000", 1)
	body = strings.Replace(body, "tokenTTL: 168h", "tokenTTL: forever", 1)
	_, err := Load(writeConfig(t, body), "", testEnv(t))
	errs, _ := err.(Errors)
	if len(errs) != 3 {
		t.Fatalf("want 3 errors, got %d:\n%v", len(errs), err)
	}
	for i := 1; i < len(errs); i++ {
		if errs[i-1].Line > errs[i].Line {
			t.Errorf("errors not in line order: %v", err)
		}
	}
}

func TestSecrets(t *testing.T) {
	const secret = "5e9a1f7c-0000-4000-8000-123456789abc"
	tests := []struct {
		name    string
		file    string // secrets.yaml content; "" means no file
		mode    os.FileMode
		env     string
		want    string // expected error substring; "" means success
		wantSrc string
	}{
		{name: "from file", file: "proxmox:\n  tokenSecret: " + secret + "\n", mode: 0o600, wantSrc: "secrets.yaml"},
		{name: "env wins", file: "proxmox:\n  tokenSecret: 00000000-0000-0000-0000-000000000000\n", mode: 0o600, env: secret, wantSrc: SecretEnv},
		{name: "no file, no env", wantSrc: ""},
		{name: "world readable", file: "proxmox:\n  tokenSecret: " + secret + "\n", mode: 0o644, want: "secrets file is readable by group or others (mode 0644); run: chmod 600"},
		{name: "group readable", file: "proxmox:\n  tokenSecret: " + secret + "\n", mode: 0o640, want: "chmod 600"},
		{name: "unknown field", file: "proxmox:\n  token: " + secret + "\n", mode: 0o600, want: `:2: proxmox.token: unknown field`},
		{name: "not a uuid", file: "proxmox:\n  tokenSecret: hunter2-is-my-secret\n", mode: 0o600, want: "proxmox.tokenSecret: must be a Proxmox API token secret, a UUID"},
		{name: "env not a uuid", env: "hunter2-is-my-secret", want: "got a value of 20 characters from " + SecretEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t)
			env.Getenv = func(k string) string {
				if k == SecretEnv {
					return tt.env
				}
				return ""
			}
			cfg := writeConfig(t, readTestdata(t, "valid.yaml"))
			if tt.file != "" {
				sp := filepath.Join(filepath.Dir(cfg), "secrets.yaml")
				if err := os.WriteFile(sp, []byte(tt.file), tt.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(sp, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			l, err := Load(cfg, "", env)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				for _, s := range []string{secret, "hunter2-is-my-secret"} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error leaks the secret: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(l.SecretSource, tt.wantSrc) {
				t.Errorf("source = %q, want %q", l.SecretSource, tt.wantSrc)
			}
			if tt.wantSrc == "" {
				if err := l.RequireSecret(); err == nil || !strings.Contains(err.Error(), SecretEnv) {
					t.Errorf("RequireSecret = %v", err)
				}
			} else if l.Secrets.Proxmox.TokenSecret != secret {
				t.Errorf("secret not loaded from %s", tt.wantSrc)
			}
		})
	}
}

// TestS3Secrets: spec.backup.s3 needs both keys, from secrets.yaml or
// the environment (which wins); a key that would need quoting is refused;
// no error echoes a key.
func TestS3Secrets(t *testing.T) {
	const withS3 = "tokenTTL: 168h\n  backup:\n    s3:\n      endpoint: 192.0.2.20:7070\n      bucket: k3s-snapshots\n"
	tests := []struct {
		name, file string
		env        map[string]string
		want       string // error substring; "" means success
		access     string
	}{
		{name: "from file", file: "s3:\n  accessKey: AKIAEXAMPLE\n  secretKey: c2VjcmV0/key+1=\n", access: "AKIAEXAMPLE"},
		{name: "env wins", file: "s3:\n  accessKey: AKIAEXAMPLE\n  secretKey: c2VjcmV0/key+1=\n", env: map[string]string{S3AccessKeyEnv: "AKIAFROMENV"}, access: "AKIAFROMENV"},
		{name: "env only", env: map[string]string{S3AccessKeyEnv: "AKIAFROMENV", S3SecretKeyEnv: "c2VjcmV0/key+1="}, access: "AKIAFROMENV"},
		{name: "secret key missing", file: "s3:\n  accessKey: AKIAEXAMPLE\n", want: "s3.secretKey: is required by spec.backup.s3: write it to"},
		{name: "no keys", want: "s3.accessKey: is required by spec.backup.s3"},
		{name: "quote in key", file: "s3:\n  accessKey: AKIAEXAMPLE\n  secretKey: \"it's-a-secret\"\n", want: "s3.secretKey: must be 3 to 256 characters of letters, digits and +/=._~:@%,- (got a value of 13 characters)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t)
			env.Getenv = func(k string) string { return tt.env[k] }
			cfg := writeConfig(t, strings.Replace(readTestdata(t, "valid.yaml"), "tokenTTL: 168h", withS3, 1))
			if tt.file != "" {
				if err := os.WriteFile(filepath.Join(filepath.Dir(cfg), "secrets.yaml"), []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			l, err := Load(cfg, "", env)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				if strings.Contains(err.Error(), "it's-a-secret") {
					t.Errorf("error leaks the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Secrets.S3.AccessKey != tt.access || l.Secrets.S3.SecretKey != "c2VjcmV0/key+1=" || l.Cluster.Spec.Backup.S3.Bucket != "k3s-snapshots" {
				t.Errorf("loaded %+v, %+v", l.Secrets.S3, l.Cluster.Spec.Backup.S3)
			}
		})
	}
}

func TestExplicitSecretsFileMissing(t *testing.T) {
	_, err := Load(writeConfig(t, readTestdata(t, "valid.yaml")), filepath.Join(t.TempDir(), "nope.yaml"), testEnv(t))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml: cannot read secrets: no such file or directory") {
		t.Fatalf("err = %v", err)
	}
}

func TestMissingConfig(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "mgmt.yaml"), "", testEnv(t))
	if err == nil || !strings.Contains(err.Error(), "mgmt.yaml: cannot read config: no such file or directory") {
		t.Fatalf("err = %v", err)
	}
}

func TestInitThenLoad(t *testing.T) {
	env := testEnv(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mgmt.yaml")
	files, err := Init(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || !files[0].Written || !files[1].Written {
		t.Fatalf("files = %+v", files)
	}
	if _, err := Load(cfg, "", env); err != nil {
		t.Fatalf("init's own output does not validate:\n%v", err)
	}
	// A second init leaves both files alone.
	if err := os.WriteFile(cfg, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err = Init(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Written || files[1].Written {
		t.Errorf("init overwrote: %+v", files)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "mine" {
		t.Errorf("mgmt.yaml overwritten")
	}
	// The example secrets file is valid once copied with the right mode.
	ex, err := os.ReadFile(filepath.Join(dir, "secrets.yaml.example"))
	if err != nil {
		t.Fatal(err)
	}
	var s Secrets
	r := &report{file: "x", lines: map[string]int{}}
	decode(ex, &s, r)
	if len(r.errs) > 0 || s.Proxmox.TokenSecret == "" {
		t.Errorf("example secrets do not decode: %v", r.errs)
	}
}

func TestK3sReleaseOrder(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"v1.35.7+k3s1", "v1.35.7+k3s1", 0},
		{"v1.35.7+k3s1", "v1.35.7+k3s2", -1},
		{"v1.35.10+k3s1", "v1.35.9+k3s3", 1}, // numbers, not strings
		{"v1.34.10+k3s1", "v1.35.7+k3s1", -1},
		{"v2.0.0+k3s1", "v1.99.99+k3s9", 1},
	} {
		a, err1 := ParseK3sRelease(tc.a)
		b, err2 := ParseK3sRelease(tc.b)
		if err1 != nil || err2 != nil || a.Compare(b) != tc.want || a.String() != tc.a {
			t.Errorf("%s vs %s: %d (%v %v)", tc.a, tc.b, a.Compare(b), err1, err2)
		}
	}
	for _, bad := range []string{"1.35.7+k3s1", "v1.35+k3s1", "v1.35.7", "v1.35.7+rke2r1", ""} {
		if _, err := ParseK3sRelease(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestServers(t *testing.T) {
	env := testEnv(t)
	l, err := Load(writeConfig(t, readTestdata(t, "ha.yaml")), "", env)
	if err != nil {
		t.Fatalf("valid config rejected:\n%v", err)
	}
	var names []string
	for _, s := range l.Servers() {
		names = append(names, s.Name+"@"+s.Node+"="+s.Net.Addr().String())
	}
	if got := strings.Join(names, " "); got != "lab-mgmt@pve1=192.0.2.50 lab-mgmt-2@pve2=192.0.2.51 lab-mgmt-3@pve3=192.0.2.52" {
		t.Errorf("servers: %s", got)
	}
	if len(l.Servers()) != 3 || l.APIAddr() != netip.MustParseAddr("192.0.2.60") || l.Cluster.Spec.Proxmox.APIURL != "https://192.0.2.10:8006" {
		t.Errorf("servers %d, API %v, Proxmox API %s", len(l.Servers()), l.APIAddr(), l.Cluster.Spec.Proxmox.APIURL)
	}
	v := l.Cluster.Spec.VIP
	if v.Interface != "eth0" || v.Image != DefaultKubeVIPImage || v.Version != DefaultKubeVIPVersion {
		t.Errorf("vip defaults: %+v", v)
	}

	// The single-server form is one server, named after the cluster.
	one, err := Load(writeConfig(t, readTestdata(t, "minimal.yaml")), "", env)
	if err != nil {
		t.Fatal(err)
	}
	if s := one.Servers(); len(s) != 1 || s[0].Name != "lab-mgmt" || s[0].Node != "pve" || s[0].ID != 110 || one.APIAddr() != netip.MustParseAddr("192.0.2.50") {
		t.Errorf("single server: %+v", s)
	}
}

func TestBadServers(t *testing.T) {
	cases := []struct {
		name, old, new, want string
	}{
		{"two servers", "    - {node: pve3, host: 192.0.2.12, id: 112, address: 192.0.2.52/24}\n", "", `spec.servers: must list an odd number of servers, at most 7`},
		{"two on one node", "node: pve2", "node: pve1", `:12: spec.servers[1].node: is already spec.servers[0].node; each server needs its own Proxmox node`},
		{"same VMID", "id: 111", "id: 110", `:12: spec.servers[1].id: is already spec.servers[0].id; each server needs its own VMID (VMIDs are cluster-wide in Proxmox)`},
		{"same address", "192.0.2.52/24", "192.0.2.50/24", `:13: spec.servers[2].address: is already spec.servers[0].address`},
		{"other subnet", "192.0.2.52/24", "198.51.100.52/24", `:13: spec.servers[2].address: must be in the first server's subnet 192.0.2.0/24`},
		{"no VIP", "  vip:\n    address: 192.0.2.60\n", "", `spec.vip.address: is required with more than one server`},
		{"VIP is a server's", "address: 192.0.2.60", "address: 192.0.2.51", `spec.vip.address: is spec.servers[1].address's address`},
		{"VIP outside", "address: 192.0.2.60", "address: 198.51.100.60", `spec.vip.address: must be a host address in the servers' subnet 192.0.2.0/24`},
		{"VIP with prefix", "address: 192.0.2.60", "address: 192.0.2.60/24", `spec.vip.address: must be an IPv4 address without a prefix length`},
		{"vm.id beside servers", "    gateway: 192.0.2.1\n", "    gateway: 192.0.2.1\n    id: 110\n", `spec.vm.id: is set per server when spec.servers is given (spec.servers[*].id); remove it`},
		{"proxmox.host beside servers", "    tokenID: capmox@pve!capi\n", "    tokenID: capmox@pve!capi\n    host: 192.0.2.10\n", `spec.proxmox.host: is set per server when spec.servers is given`},
		{"gateway outside", "gateway: 192.0.2.1", "gateway: 198.51.100.1", `spec.vm.gateway: must be inside the VM's subnet 192.0.2.0/24`},
		{"bad VIP version", "    address: 192.0.2.60\n", "    address: 192.0.2.60\n    version: latest\n", `spec.vip.version: must be a kube-vip release tag like v1.2.3 (got "latest")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := readTestdata(t, "ha.yaml")
			if !strings.Contains(body, c.old) {
				t.Fatalf("ha.yaml lacks %q", c.old)
			}
			_, err := Load(writeConfig(t, strings.Replace(body, c.old, c.new, 1)), "", testEnv(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %s", err, c.want)
			}
		})
	}
}
