package config

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Minimums for the VM: k3s's own server minimum (2 cores, 2 GiB) plus
// cert-manager, cluster-api-operator and five provider controllers, and a
// disk that holds the cloud image, k3s's images and the providers' images.
const (
	MinCores     = 2
	MinMemoryMiB = 3072
	MinDiskGiB   = 20
	MaxCores     = 512
	MaxMemoryMiB = 4 * 1024 * 1024
	MaxDiskGiB   = 64 * 1024

	MinVMID = 100
	MaxVMID = 999999999

	// TokenRequest refuses expirations under 10 minutes; a year is already
	// longer than a "time-limited" inspector token should live.
	MinTokenTTL = 10 * time.Minute
	MaxTokenTTL = 8760 * time.Hour
)

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	hostname     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`)
	unixUser     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	// Proxmox: userid is user@realm, token name [A-Za-z][A-Za-z0-9.\-_]+
	// (pve-access-control PVE::AccessControl).
	tokenID = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9._-]+![A-Za-z][A-Za-z0-9._-]+$`)
	// Proxmox storage IDs: pve-storage's pve-storage-id format.
	storageID = regexp.MustCompile(`^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	// poolID is pve-access-control's pve-poolid format without nesting
	// (src/PVE/AccessControl.pm verify_poolname: [A-Za-z0-9\.\-_]+, and
	// a pool's name must start with a letter, pve-manager PVE/API2/Pool.pm).
	poolID = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]*$`)
	// A Linux interface name fits IFNAMSIZ (15 characters).
	ifName     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,14}$`)
	sha256Hex  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	fileName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
	k3sVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+\+k3s[0-9]+$`)
	vSemver    = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	semver     = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	envName    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	imageRef   = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+$`)
	uuid       = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// reservedVariables are set by mgmtctl from proxmox.* and the secrets file;
// a provider's variables may not override them.
var reservedVariables = map[string]bool{"PROXMOX_URL": true, "PROXMOX_TOKEN": true, "PROXMOX_SECRET": true}

// validator checks the effective (defaulted) config. It never opens a
// connection; the only I/O is reading the SSH public key file.
type validator struct {
	*report
	fs Env
	// defaults are the defaults of the fields that have one, by path.
	defaults map[string]string
	// firstServerAddress is spec.servers[0].address, for the gateway's
	// subnet check.
	firstServerAddress string
}

func (v *validator) cluster(c *ManagementCluster) {
	if c.APIVersion != APIVersion {
		v.add("apiVersion", c.APIVersion, "must be %s", APIVersion)
	}
	if c.Kind != Kind {
		v.add("kind", c.Kind, "must be %s", Kind)
	}
	v.dnsLabel("metadata.name", c.Metadata.Name, true)
	s := &c.Spec
	ha := len(s.Servers) > 0
	v.proxmox(&s.Proxmox, ha)
	v.image(&s.Image)
	if ha {
		v.servers(s)
	}
	v.vm(&s.VM, ha)
	v.vip(s)
	v.k3s(&s.K3s)
	v.chart("spec.certManager", s.CertManager, vSemver, "a chart version with a leading v, like v1.21.2 (cert-manager's chart versions carry the v)")
	v.chart("spec.clusterAPIOperator", s.ClusterAPIOperator, semver, "a chart version without a leading v, like 0.28.0 (the operator's chart versions carry no v)")
	v.providers(s.Providers)
	v.localPath("spec.kubeconfig.path", s.Kubeconfig.Path)
	v.dnsSubdomain("spec.inspector.name", s.Inspector.Name)
	v.tokenTTL("spec.inspector.tokenTTL", s.Inspector.TokenTTL)
	v.ssh(&s.SSH)
	v.backup(&s.Backup)
}

// Bounds of the SSH keepalive: probes faster than a second are noise, and
// a dead link should be given up within minutes, not the quarter hour TCP
// takes on its own.
const (
	MinServerAliveInterval = time.Second
	MaxServerAliveInterval = 5 * time.Minute
	MaxServerAliveCountMax = 20
)

func (v *validator) ssh(s *SSH) {
	p := "spec.ssh.serverAliveInterval"
	if v.required(p, s.ServerAliveInterval) {
		d, err := time.ParseDuration(s.ServerAliveInterval)
		switch {
		case err != nil:
			v.add(p, s.ServerAliveInterval, "must be a duration like 10s or 1m")
		case d < MinServerAliveInterval || d > MaxServerAliveInterval:
			v.add(p, s.ServerAliveInterval, "must be from 1s to 5m")
		}
	}
	if n := s.ServerAliveCountMax; n < 1 || n > MaxServerAliveCountMax {
		v.add("spec.ssh.serverAliveCountMax", fmt.Sprint(n), "must be from 1 to 20")
	}
}

// MaxSnapshotRetention bounds spec.backup.retention: each snapshot is a
// copy of the whole datastore on every server's disk.
const MaxSnapshotRetention = 1000

func (v *validator) backup(b *Backup) {
	if b.Schedule != "" {
		if _, err := ParseSchedule(b.Schedule); err != nil {
			v.add("spec.backup.schedule", b.Schedule, "must be a cron schedule of five fields (minute hour day-of-month month day-of-week), like \"0 */6 * * *\": %v", err)
		}
	}
	if n := b.Retention; n < 0 || n > MaxSnapshotRetention {
		v.add("spec.backup.retention", fmt.Sprint(n), "must be from 1 to 1000 (0 or left out: k3s's default, 5)")
	}
	if b.S3 != nil {
		v.s3(b.S3)
	}
}

var (
	// s3Endpoint is host[:port]: k3s's etcd-s3-endpoint takes no scheme.
	s3Endpoint = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$`)
	// s3Bucket is S3's bucket naming rules (general purpose buckets).
	s3Bucket = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	// s3Folder is a key prefix of path segments, no leading or trailing /.
	s3Folder = regexp.MustCompile(`^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$`)
	s3Region = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)
	// s3Key is what an access or secret key may hold: printable ASCII
	// without spaces, quotes, backslashes or $, so the environment file
	// reads alike for systemd and sh.
	s3Key = regexp.MustCompile("^[A-Za-z0-9+/=._~:@%,-]{3,256}$")
)

func (v *validator) s3(s *S3) {
	if v.required("spec.backup.s3.endpoint", s.Endpoint) && !s3Endpoint.MatchString(s.Endpoint) {
		v.add("spec.backup.s3.endpoint", s.Endpoint, "must be host or host:port, without https:// (k3s's etcd-s3-endpoint; k3s speaks HTTPS to it)")
	}
	if v.required("spec.backup.s3.bucket", s.Bucket) && !s3Bucket.MatchString(s.Bucket) {
		v.add("spec.backup.s3.bucket", s.Bucket, "must be an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit")
	}
	if s.Folder != "" && !s3Folder.MatchString(s.Folder) {
		v.add("spec.backup.s3.folder", s.Folder, "must be a key prefix like k3s/mgmt: segments of letters, digits and !_.*'()- joined by /, without a leading or trailing /")
	}
	if s.Region != "" && !s3Region.MatchString(s.Region) {
		v.add("spec.backup.s3.region", s.Region, "must be a region name like us-east-1")
	}
	if s.CAFile != "" {
		v.localPath("spec.backup.s3.caFile", s.CAFile)
		data, err := os.ReadFile(v.fs.Expand(s.CAFile))
		if err != nil {
			v.add("spec.backup.s3.caFile", s.CAFile, "cannot read the CA: %v", unwrapPathError(err))
			return
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			v.add("spec.backup.s3.caFile", s.CAFile, "holds no PEM certificate")
			return
		}
		s.CA = data
	}
}

func (v *validator) required(p, val string) bool {
	if strings.TrimSpace(val) == "" {
		if d, ok := v.defaults[p]; ok && v.set[p] {
			v.addNoValue(p, "is empty: write a value, or leave the field out for the default (%s)", d)
		} else {
			v.addNoValue(p, "is required")
		}
		return false
	}
	return true
}

func (v *validator) dnsLabel(p, val string, req bool) {
	if val == "" && !req {
		return
	}
	if !v.required(p, val) {
		return
	}
	if len(val) > 63 || !dnsLabel.MatchString(val) {
		v.add(p, val, "must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit")
	}
}

func (v *validator) dnsSubdomain(p, val string) {
	if !v.required(p, val) {
		return
	}
	if len(val) > 253 || !dnsSubdomain.MatchString(val) {
		v.add(p, val, "must be a DNS subdomain: lowercase letters, digits, '-' and '.'")
	}
}

// perServer is the reason a single server's field is refused when
// spec.servers lists the servers.
const perServer = "is set per server when spec.servers is given (spec.servers[*].%s); remove it"

func (v *validator) proxmox(p *Proxmox, ha bool) {
	api := p.API()
	switch {
	case p.Access != AccessSSH && p.Access != AccessAPI:
		v.add("spec.proxmox.access", p.Access, "must be %s (root SSH to the nodes and qm) or %s (the Proxmox API with mgmtctlTokenID)", AccessSSH, AccessAPI)
	case api:
		if v.required("spec.proxmox.mgmtctlTokenID", p.MgmtctlTokenID) && !tokenID.MatchString(p.MgmtctlTokenID) {
			v.add("spec.proxmox.mgmtctlTokenID", p.MgmtctlTokenID, "must be a Proxmox API token ID of the form user@realm!tokenname")
		}
		if v.required("spec.proxmox.imageStorage", p.ImageStorage) && !storageID.MatchString(p.ImageStorage) {
			v.add("spec.proxmox.imageStorage", p.ImageStorage, "must be a Proxmox storage ID (lowercase letters, digits, '-', '_', '.')")
		}
	case p.MgmtctlTokenID != "":
		v.add("spec.proxmox.mgmtctlTokenID", p.MgmtctlTokenID, "is used only with spec.proxmox.access: %s", AccessAPI)
	}
	if !storageID.MatchString(p.ISOStorage) {
		v.add("spec.proxmox.isoStorage", p.ISOStorage, "must be a Proxmox storage ID (lowercase letters, digits, '-', '_', '.')")
	}
	if p.Pool != "" && !poolID.MatchString(p.Pool) {
		v.add("spec.proxmox.pool", p.Pool, "must be a Proxmox pool ID: a letter, then letters, digits, '.', '-' or '_' (not nested)")
	}
	switch {
	case ha && p.Host != "":
		v.add("spec.proxmox.host", p.Host, perServer, "host")
	case ha && p.Node != "":
		v.add("spec.proxmox.node", p.Node, perServer, "node")
	case !ha:
		// In api access no node is reached over SSH: host is optional.
		if api && p.Host != "" {
			v.hostPort("spec.proxmox.host", p.Host)
		} else if !api && v.required("spec.proxmox.host", p.Host) {
			v.hostPort("spec.proxmox.host", p.Host)
		}
		v.dnsLabel("spec.proxmox.node", p.Node, true)
	}
	if v.required("spec.proxmox.user", p.User) && !unixUser.MatchString(p.User) {
		v.add("spec.proxmox.user", p.User, "must be a Unix user name")
	}
	v.url("spec.proxmox.apiURL", p.APIURL, "https")
	if v.required("spec.proxmox.tokenID", p.TokenID) && !tokenID.MatchString(p.TokenID) {
		v.add("spec.proxmox.tokenID", p.TokenID, "must be a Proxmox API token ID of the form user@realm!tokenname")
	}
	if v.required("spec.proxmox.storage", p.Storage) && !storageID.MatchString(p.Storage) {
		v.add("spec.proxmox.storage", p.Storage, "must be a Proxmox storage ID (lowercase letters, digits, '-', '_', '.')")
	}
	v.remotePath("spec.proxmox.imageDir", p.ImageDir)
	switch {
	case p.CAFile != "" && p.Fingerprint != "":
		v.add("spec.proxmox.fingerprint", p.Fingerprint, "give caFile or fingerprint, not both: one way to verify the API's certificate")
	case p.Fingerprint != "" && !certFingerprint.MatchString(p.Fingerprint):
		v.add("spec.proxmox.fingerprint", p.Fingerprint, "must be the certificate's SHA-256 as `pvenode cert info` prints it: 32 hex bytes joined by ':'")
	case p.CAFile != "":
		v.localPath("spec.proxmox.caFile", p.CAFile)
		data, err := os.ReadFile(v.fs.Expand(p.CAFile))
		if err != nil {
			v.add("spec.proxmox.caFile", p.CAFile, "cannot read the CA: %v", unwrapPathError(err))
		} else if !x509.NewCertPool().AppendCertsFromPEM(data) {
			v.add("spec.proxmox.caFile", p.CAFile, "holds no PEM certificate")
		} else {
			p.CA = data
		}
	}
}

// certFingerprint is a SHA-256 fingerprint, colon-separated or not.
var certFingerprint = regexp.MustCompile(`^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$|^[0-9A-Fa-f]{64}$`)

func (v *validator) hostPort(p, val string) {
	host := val
	if h, port, err := net.SplitHostPort(val); err == nil {
		host = h
		var n int
		if _, err := fmt.Sscanf(port, "%d", &n); err != nil || fmt.Sprint(n) != port || n < 1 || n > 65535 {
			v.add(p, val, "port must be a number from 1 to 65535")
			return
		}
	} else if strings.Count(val, ":") == 1 {
		v.add(p, val, "must be host or host:port")
		return
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return
	}
	if len(host) > 253 || !hostname.MatchString(host) {
		v.add(p, val, "must be a host name or IP address, optionally with :port")
	}
}

func (v *validator) url(p, val string, schemes ...string) {
	if !v.required(p, val) {
		return
	}
	u, err := url.Parse(val)
	if err != nil || u.Host == "" || u.Opaque != "" {
		v.add(p, val, "must be an absolute URL")
		return
	}
	ok := false
	for _, s := range schemes {
		ok = ok || u.Scheme == s
	}
	if !ok {
		v.add(p, val, "must be a %s URL", strings.Join(schemes, " or "))
		return
	}
	if u.User != nil {
		v.addNoValue(p, "must not carry credentials in the URL")
	}
}

// remotePath checks a path on a remote host: absolute and free of the
// characters that make paths ambiguous in logs and config files.
func (v *validator) remotePath(p, val string) {
	if !v.required(p, val) {
		return
	}
	if !strings.HasPrefix(val, "/") || path.Clean(val) != val || strings.ContainsAny(val, "\x00\n\r\t ") {
		v.add(p, val, "must be a clean absolute path without spaces")
	}
}

// localPath checks a laptop path: ~/ or absolute or relative to the config.
func (v *validator) localPath(p, val string) {
	if !v.required(p, val) {
		return
	}
	if strings.ContainsAny(val, "\x00\n\r") || strings.HasSuffix(val, "/") {
		v.add(p, val, "must be a file path")
		return
	}
	if strings.HasPrefix(val, "~") && !strings.HasPrefix(val, "~/") {
		v.add(p, val, "only ~/ is expanded; ~user is not supported")
	}
}

func (v *validator) image(im *Image) {
	v.url("spec.image.url", im.URL, "https", "http")
	if u, err := url.Parse(im.URL); err == nil && u.Host != "" {
		if base := path.Base(u.Path); strings.HasSuffix(u.Path, "/") || !fileName.MatchString(base) {
			v.add("spec.image.url", im.URL, "must end in a file name (letters, digits, '.', '_', '-', '+')")
		}
	}
	if v.required("spec.image.sha256", im.SHA256) && !sha256Hex.MatchString(im.SHA256) {
		v.add("spec.image.sha256", im.SHA256, "must be 64 lowercase hex digits")
	}
}

func (v *validator) intRange(p string, val, lo, hi int, why string) {
	if val < lo || val > hi {
		v.add(p, fmt.Sprint(val), "must be from %d to %d%s", lo, hi, why)
	}
}

func (v *validator) vm(m *VM, ha bool) {
	switch {
	case ha && m.ID != 0:
		v.add("spec.vm.id", fmt.Sprint(m.ID), perServer, "id")
	case ha:
	case m.ID == 0:
		v.addNoValue("spec.vm.id", "is required (a free Proxmox VMID, %d or more)", MinVMID)
	default:
		v.intRange("spec.vm.id", m.ID, MinVMID, MaxVMID, "")
	}
	v.intRange("spec.vm.cores", m.Cores, MinCores, MaxCores, " (k3s with cert-manager, the operator and five providers needs 2 or more)")
	v.intRange("spec.vm.memoryMiB", m.MemoryMiB, MinMemoryMiB, MaxMemoryMiB, " (k3s with these addons needs 3072 MiB or more)")
	v.intRange("spec.vm.diskGiB", m.DiskGiB, MinDiskGiB, MaxDiskGiB, " (the image, k3s and the providers' images need 20 GiB or more)")
	if v.required("spec.vm.bridge", m.Bridge) && !ifName.MatchString(m.Bridge) {
		v.add("spec.vm.bridge", m.Bridge, "must be a Linux bridge name (at most 15 characters)")
	}
	if m.VLAN != 0 || v.set["spec.vm.vlan"] {
		v.intRange("spec.vm.vlan", m.VLAN, 1, 4094, "; leave it out for an untagged port")
	}

	var prefix netip.Prefix
	switch {
	case ha && m.Address != "":
		v.add("spec.vm.address", m.Address, perServer, "address")
	case ha:
		// The gateway is checked against the first server's subnet.
		prefix, _ = netip.ParsePrefix(v.firstServerAddress)
	default:
		prefix = v.address("spec.vm.address", m.Address)
	}
	if v.required("spec.vm.gateway", m.Gateway) {
		gw, err := netip.ParseAddr(m.Gateway)
		switch {
		case err != nil || !gw.Is4():
			v.add("spec.vm.gateway", m.Gateway, "must be an IPv4 address")
		case prefix.IsValid() && !prefix.Masked().Contains(gw):
			v.add("spec.vm.gateway", m.Gateway, "must be inside the VM's subnet %s", prefix.Masked())
		case prefix.IsValid() && gw == prefix.Addr() && !ha:
			v.add("spec.vm.gateway", m.Gateway, "must not be the VM's own address")
		}
	}
	if len(m.Nameservers) == 0 {
		v.addNoValue("spec.vm.nameservers", "needs at least one address")
	}
	for i, ns := range m.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			v.add(fmt.Sprintf("spec.vm.nameservers[%d]", i), ns, "must be an IP address")
		}
	}
	if v.required("spec.vm.user", m.User) {
		switch {
		case !unixUser.MatchString(m.User):
			v.add("spec.vm.user", m.User, "must be a Unix user name")
		case m.User == "root":
			v.add("spec.vm.user", m.User, "must not be root: cloud-init creates this user with sudo")
		}
	}
	v.publicKey("spec.vm.sshPublicKeyFile", m.SSHPublicKeyFile)
}

// address checks a VM's address (IPv4 with its prefix length, a host
// address of its subnet) and returns it parsed, or the zero prefix.
func (v *validator) address(p, val string) netip.Prefix {
	if !v.required(p, val) {
		return netip.Prefix{}
	}
	prefix, err := netip.ParsePrefix(val)
	switch {
	case err != nil || !prefix.Addr().Is4():
		v.add(p, val, "must be an IPv4 address with its prefix length, like 192.0.2.50/24")
		return netip.Prefix{}
	case prefix.Bits() < 8 || prefix.Bits() > 30:
		v.add(p, val, "prefix length must be from 8 to 30")
		return netip.Prefix{}
	case prefix.Addr() == prefix.Masked().Addr():
		v.add(p, val, "is the network address of its subnet, not a host address")
	case isBroadcast(prefix):
		v.add(p, val, "is the broadcast address of its subnet")
	}
	return prefix
}

// MaxServers bounds spec.servers: etcd's own advice is 3 or 5 members,
// and 7 at most.
const MaxServers = 7

// servers checks spec.servers: an odd count (etcd's quorum gains nothing
// from an even one), each on its own Proxmox node (the point is to
// survive a node), VMIDs (cluster-wide in Proxmox), addresses and names
// unique, all in one subnet with the gateway.
func (v *validator) servers(s *Spec) {
	n := len(s.Servers)
	if n%2 == 0 || n > MaxServers {
		v.add("spec.servers", fmt.Sprint(n), "must list an odd number of servers, at most %d: etcd keeps quorum with a majority, so 1, 3 or 5 (an even count survives no more failures than one fewer)", MaxServers)
	}
	var first netip.Prefix
	seen := map[string]string{}
	unique := func(p, kind, val string) {
		if val == "" {
			return
		}
		if other, dup := seen[kind+"="+val]; dup {
			v.add(p, val, "is already %s; each server needs its own%s", other, map[string]string{
				"node": " Proxmox node, so losing one node loses one server", "id": " VMID (VMIDs are cluster-wide in Proxmox)"}[kind])
			return
		}
		seen[kind+"="+val] = p
	}
	for i, srv := range s.Servers {
		at := fmt.Sprintf("spec.servers[%d]", i)
		v.dnsLabel(at+".name", srv.Name, true)
		v.dnsLabel(at+".node", srv.Node, true)
		if s.Proxmox.API() && srv.Host != "" {
			v.hostPort(at+".host", srv.Host)
		} else if !s.Proxmox.API() && v.required(at+".host", srv.Host) {
			v.hostPort(at+".host", srv.Host)
		}
		if srv.ID == 0 {
			v.addNoValue(at+".id", "is required (a free Proxmox VMID, %d or more)", MinVMID)
		} else {
			v.intRange(at+".id", srv.ID, MinVMID, MaxVMID, "")
		}
		prefix := v.address(at+".address", srv.Address)
		if i == 0 {
			first = prefix
			v.firstServerAddress = srv.Address
		} else if prefix.IsValid() && first.IsValid() && prefix.Masked() != first.Masked() {
			v.add(at+".address", srv.Address, "must be in the first server's subnet %s: the VIP moves between the servers by ARP", first.Masked())
		}
		unique(at+".name", "name", srv.Name)
		unique(at+".node", "node", srv.Node)
		unique(at+".id", "id", fmt.Sprint(srv.ID))
		if prefix.IsValid() {
			unique(at+".address", "address", prefix.Addr().String())
		}
	}
	if n > 1 && s.VIP.Address == "" {
		v.addNoValue("spec.vip.address", "is required with more than one server: the one API address the kubeconfigs and CAPMOX use, held by whichever server leads")
	}
}

// vip checks spec.vip: an unused address in the servers' subnet, and
// kube-vip's pinned image.
func (v *validator) vip(s *Spec) {
	if s.VIP.Address == "" {
		return
	}
	addr, err := netip.ParseAddr(s.VIP.Address)
	if err != nil || !addr.Is4() {
		v.add("spec.vip.address", s.VIP.Address, "must be an IPv4 address without a prefix length, like 192.0.2.60")
		return
	}
	addrs := map[string]string{}
	if len(s.Servers) == 0 {
		addrs["spec.vm.address"] = s.VM.Address
	}
	for i, srv := range s.Servers {
		addrs[fmt.Sprintf("spec.servers[%d].address", i)] = srv.Address
	}
	for p, a := range addrs {
		prefix, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		if prefix.Addr() == addr {
			v.add("spec.vip.address", s.VIP.Address, "is %s's address; the VIP must be an unused address", p)
		} else if !prefix.Masked().Contains(addr) || addr == prefix.Masked().Addr() || isBroadcast(netip.PrefixFrom(addr, prefix.Bits())) {
			v.add("spec.vip.address", s.VIP.Address, "must be a host address in the servers' subnet %s", prefix.Masked())
			break
		}
	}
	if gw, err := netip.ParseAddr(s.VM.Gateway); err == nil && gw == addr {
		v.add("spec.vip.address", s.VIP.Address, "is the gateway's address")
	}
	if v.required("spec.vip.interface", s.VIP.Interface) && !ifName.MatchString(s.VIP.Interface) {
		v.add("spec.vip.interface", s.VIP.Interface, "must be a Linux interface name (at most 15 characters)")
	}
	if v.required("spec.vip.image", s.VIP.Image) && !imageRef.MatchString(s.VIP.Image) {
		v.add("spec.vip.image", s.VIP.Image, "must be an image name without a tag, like %s", DefaultKubeVIPImage)
	}
	if v.required("spec.vip.version", s.VIP.Version) && !vSemver.MatchString(s.VIP.Version) {
		v.add("spec.vip.version", s.VIP.Version, "must be a kube-vip release tag like %s", DefaultKubeVIPVersion)
	}
}

func isBroadcast(p netip.Prefix) bool {
	a := p.Addr().As4()
	host := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	mask := ^uint32(0) >> p.Bits()
	return host&mask == mask
}

func (v *validator) publicKey(p, val string) {
	if !v.required(p, val) {
		return
	}
	file := v.fs.Expand(val)
	data, err := os.ReadFile(file)
	if err != nil {
		v.add(p, val, "cannot read the SSH public key: %v", unwrapPathError(err))
		return
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey(data); err != nil {
		v.add(p, val, "is not an OpenSSH public key (%v)", err)
	}
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func (v *validator) k3s(k *K3s) {
	if v.required("spec.k3s.version", k.Version) && !k3sVersion.MatchString(k.Version) {
		v.add("spec.k3s.version", k.Version, "must be a k3s release tag like v1.35.7+k3s1")
	}
	v.url("spec.k3s.installScriptURL", k.InstallScriptURL, "https", "http")
}

func (v *validator) chart(p string, c Chart, form *regexp.Regexp, want string) {
	if v.required(p+".version", c.Version) && !form.MatchString(c.Version) {
		v.add(p+".version", c.Version, "must be %s", want)
	}
	v.url(p+".repo", c.Repo, "https", "http")
}

func (v *validator) providers(ps []Provider) {
	if len(ps) == 0 {
		v.addNoValue("spec.providers", "needs the core provider (leave the field out for the default five)")
		return
	}
	byType := map[ProviderType]int{}
	namespaces := map[string]string{}
	for i, pr := range ps {
		p := fmt.Sprintf("spec.providers[%d]", i)
		known, ok := supportedProviders[pr.Type]
		if !ok {
			v.add(p+".type", string(pr.Type), "must be one of core, bootstrap, controlPlane, infrastructure, ipam")
			continue
		}
		if first, dup := byType[pr.Type]; dup {
			v.add(p+".type", string(pr.Type), "only one provider per type; spec.providers[%d] is already %s", first, pr.Type)
			continue
		}
		byType[pr.Type] = i
		if pr.Name != known.name {
			// Core must be named cluster-api (upstream preflight); for the
			// others, only these are predefined in clusterctl and wired up
			// by mgmtctl (CAPMOX credentials, in-cluster IPAM).
			v.add(p+".name", pr.Name, "a %s provider must be %q in this version of mgmtctl", pr.Type, known.name)
		}
		if v.required(p+".version", pr.Version) && !vSemver.MatchString(pr.Version) {
			v.add(p+".version", pr.Version, "must be a release tag like v1.12.11")
		}
		v.dnsLabel(p+".namespace", pr.Namespace, true)
		if other, dup := namespaces[pr.Namespace]; dup && pr.Namespace != "" {
			v.add(p+".namespace", pr.Namespace, "is already the namespace of %s; each provider needs its own", other)
		}
		namespaces[pr.Namespace] = p
		for k := range pr.Variables {
			kp := p + ".variables." + k
			switch {
			case !envName.MatchString(k):
				v.add(kp, k, "variable names must be upper-case like CAPMOX_LOG_LEVEL")
			case reservedVariables[k]:
				v.add(kp, k, "is set by mgmtctl from spec.proxmox and the secrets file; remove it")
			}
		}
	}
	if _, ok := byType[ProviderCore]; !ok {
		v.addNoValue("spec.providers", "exactly one core provider (cluster-api) is required")
	}
	if _, ok := byType[ProviderInfrastructure]; !ok {
		v.addNoValue("spec.providers", "the infrastructure provider (proxmox) is required")
	}
}

func (v *validator) tokenTTL(p, val string) {
	if !v.required(p, val) {
		return
	}
	d, err := time.ParseDuration(val)
	if err != nil {
		v.add(p, val, "must be a duration like 168h or 90m")
		return
	}
	if d < MinTokenTTL || d > MaxTokenTTL {
		v.add(p, val, "must be from 10m to 8760h")
	}
}

// s3Secrets checks the bucket's keys, without echoing them, when the
// config has a bucket.
func (v *validator) s3Secrets(s S3Secrets, needed bool) {
	for _, k := range []struct{ path, env, val string }{
		{"s3.accessKey", S3AccessKeyEnv, s.AccessKey}, {"s3.secretKey", S3SecretKeyEnv, s.SecretKey}} {
		switch {
		case k.val == "" && needed:
			v.addNoValue(k.path, "is required by spec.backup.s3: write it to %s (mode 0600) or set %s", v.file, k.env)
		case k.val != "" && !s3Key.MatchString(k.val):
			v.addNoValue(k.path, "must be 3 to 256 characters of letters, digits and +/=._~:@%%,- (got a value of %d characters)", len(k.val))
		}
	}
}

// secrets checks secret values without ever echoing them.
func (v *validator) secrets(s *Secrets, source string) {
	if ts := s.Proxmox.TokenSecret; ts != "" && !uuid.MatchString(ts) {
		v.addNoValue("proxmox.tokenSecret", "must be a Proxmox API token secret, a UUID like 01234567-89ab-cdef-0123-456789abcdef (got a value of %d characters from %s)", len(ts), source)
	}
}

// mgmtctlSecret checks mgmtctl's own token secret when given (a run that
// reaches Proxmox in api access requires it: RequireMgmtctlSecret).
func (v *validator) mgmtctlSecret(s ProxmoxSecrets) {
	if ts := s.MgmtctlTokenSecret; ts != "" && !uuid.MatchString(ts) {
		v.addNoValue("proxmox.mgmtctlTokenSecret", "must be a Proxmox API token secret, a UUID like 01234567-89ab-cdef-0123-456789abcdef (got a value of %d characters)", len(ts))
	}
}
