// Package config is the contract between users and mgmtctl: the types of
// mgmt.yaml and secrets.yaml, their defaults, and the validation that runs
// before any connection is opened.
package config

import (
	"net/netip"
	"time"
)

// APIVersion and Kind identify a management cluster config file.
const (
	APIVersion = "mgmtctl/v1alpha1"
	Kind       = "ManagementCluster"
)

// ManagementCluster is the whole of mgmt.yaml.
type ManagementCluster struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Metadata   Metadata `yaml:"metadata"`
	Spec       Spec     `yaml:"spec"`
}

// Metadata names the cluster; the name is also the VM name, the kubeconfig
// context and part of file names.
type Metadata struct {
	Name string `yaml:"name"`
}

// Spec is the desired state of the management cluster.
type Spec struct {
	Proxmox            Proxmox    `yaml:"proxmox"`
	Image              Image      `yaml:"image"`
	VM                 VM         `yaml:"vm"`
	Servers            []Server   `yaml:"servers"`
	VIP                VIP        `yaml:"vip"`
	K3s                K3s        `yaml:"k3s"`
	CertManager        Chart      `yaml:"certManager"`
	ClusterAPIOperator Chart      `yaml:"clusterAPIOperator"`
	Providers          []Provider `yaml:"providers"`
	Kubeconfig         Kubeconfig `yaml:"kubeconfig"`
	Inspector          Inspector  `yaml:"inspector"`
	SSH                SSH        `yaml:"ssh"`
	Backup             Backup     `yaml:"backup"`
}

// Proxmox is the Proxmox VE node that hosts the VM, and the API identity
// CAPMOX will use.
type Proxmox struct {
	// Access is how the vm phase reaches the nodes: "ssh" (root SSH and
	// qm, the default) or "api" (the REST API with mgmtctl's own token,
	// MgmtctlTokenID; no SSH to any node).
	Access string `yaml:"access"`
	// MgmtctlTokenID is mgmtctl's API token in api access (`mgmtctl
	// proxmox role --for mgmtctl` prints its role); its secret is
	// secrets.yaml's proxmox.mgmtctlTokenSecret. CAPMOX keeps its own,
	// TokenID.
	MgmtctlTokenID string `yaml:"mgmtctlTokenID"`
	// ImageStorage is the directory storage, with 'import' content, that
	// holds the cloud image in api access.
	ImageStorage string `yaml:"imageStorage"`
	Host         string `yaml:"host"`
	User         string `yaml:"user"`
	Node         string `yaml:"node"`
	APIURL       string `yaml:"apiURL"`
	TokenID      string `yaml:"tokenID"`
	Storage      string `yaml:"storage"`
	ImageDir     string `yaml:"imageDir"`
	// ISOStorage is the storage, with 'iso' content, where CAPMOX puts
	// each machine's cloud-init ISO: go-proxmox uploads it to the first
	// storage with 'iso' content that CAPMOX's token can see, so its
	// role makes this one that storage.
	ISOStorage string `yaml:"isoStorage"`
	// Pool, when set, is the Proxmox pool whose VMs CAPMOX may handle:
	// its VM privileges are granted on /pool/<Pool> instead of /vms, so
	// a VM outside the pool (the management VM itself) is out of its
	// reach. Its machine templates clone into the pool (the
	// ProxmoxMachine's spec.pool), from templates in the pool.
	Pool string `yaml:"pool"`
	// CAFile is a PEM file on the laptop with the CA of the API's
	// certificate (a node's /etc/pve/pve-root-ca.pem); Fingerprint pins
	// the certificate itself instead, by its SHA-256 as `pvenode cert
	// info` prints it. Neither: the laptop's trust store.
	CAFile      string `yaml:"caFile"`
	Fingerprint string `yaml:"fingerprint"`
	// CAPMOXSkipTLSVerify gives CAPMOX its own default back
	// (PROXMOX_INSECURE=true: the API's certificate unverified); every
	// run warns. Without it CAPMOX verifies the API's certificate as
	// mgmtctl does: against CAFile's CA, the pinned certificate, or the
	// system's roots.
	CAPMOXSkipTLSVerify bool `yaml:"capmoxSkipTLSVerify"`

	// CA is CAFile's content, read by Load once the file is valid.
	CA []byte `yaml:"-"`
}

// Image is the pinned cloud image the VM is created from.
type Image struct {
	URL    string `yaml:"url"`
	SHA256 string `yaml:"sha256"`
}

// VM is the management cluster's virtual machine.
type VM struct {
	ID               int      `yaml:"id"`
	Cores            int      `yaml:"cores"`
	MemoryMiB        int      `yaml:"memoryMiB"`
	DiskGiB          int      `yaml:"diskGiB"`
	Bridge           string   `yaml:"bridge"`
	VLAN             int      `yaml:"vlan"`
	Address          string   `yaml:"address"`
	Gateway          string   `yaml:"gateway"`
	Nameservers      []string `yaml:"nameservers"`
	User             string   `yaml:"user"`
	SSHPublicKeyFile string   `yaml:"sshPublicKeyFile"`

	// Net is Address parsed (the VM's IP and its prefix length), set by
	// Load once the file is valid; code uses it, not Address.
	Net netip.Prefix `yaml:"-"`
}

// Server is one k3s server's VM of a highly available cluster: the
// Proxmox node it runs on (reached over SSH at Host), its VMID and its
// address. Every other VM setting is spec.vm's, shared by all servers.
type Server struct {
	Name    string `yaml:"name"`
	Node    string `yaml:"node"`
	Host    string `yaml:"host"`
	ID      int    `yaml:"id"`
	Address string `yaml:"address"`

	// Net is Address parsed, set by Load once the file is valid.
	Net netip.Prefix `yaml:"-"`
}

// The ways the vm phase reaches the Proxmox nodes (spec.proxmox.access).
const (
	AccessSSH = "ssh"
	AccessAPI = "api"
)

// API says the vm phase goes through the Proxmox API.
func (p Proxmox) API() bool { return p.Access == AccessAPI }

// VIP is the cluster's one API address: a virtual IP that kube-vip,
// deployed as a k3s manifest, keeps on the server holding its lease and
// announces by ARP. A cluster of servers needs one; a single server may
// have one, so that it keeps its API address when it grows.
type VIP struct {
	Address   string `yaml:"address"`
	Interface string `yaml:"interface"`
	Image     string `yaml:"image"`
	Version   string `yaml:"version"`

	// Addr is Address parsed, set by Load once the file is valid.
	Addr netip.Addr `yaml:"-"`
}

// K3s pins the Kubernetes distribution on the VM.
type K3s struct {
	Version          string `yaml:"version"`
	InstallScriptURL string `yaml:"installScriptURL"`

	// Release is Version parsed, set by Load once the file is valid.
	Release K3sRelease `yaml:"-"`
}

// Chart pins a Helm chart installed through a k3s HelmChart.
type Chart struct {
	Version string `yaml:"version"`
	Repo    string `yaml:"repo"`
}

// ProviderType is the kind of a Cluster API provider, as written in mgmt.yaml.
type ProviderType string

// The provider types mgmtctl installs.
const (
	ProviderCore           ProviderType = "core"
	ProviderBootstrap      ProviderType = "bootstrap"
	ProviderControlPlane   ProviderType = "controlPlane"
	ProviderInfrastructure ProviderType = "infrastructure"
	ProviderIPAM           ProviderType = "ipam"
)

// ProviderTypes lists the types in the order they are installed: core first,
// as upstream's upgrade advice requires.
var ProviderTypes = []ProviderType{ProviderCore, ProviderBootstrap, ProviderControlPlane, ProviderInfrastructure, ProviderIPAM}

// Provider is one cluster-api-operator provider CR.
type Provider struct {
	Type      ProviderType      `yaml:"type"`
	Name      string            `yaml:"name"`
	Version   string            `yaml:"version"`
	Namespace string            `yaml:"namespace"`
	Variables map[string]string `yaml:"variables"`
}

// Kubeconfig is where the admin kubeconfig lands on the laptop.
type Kubeconfig struct {
	Path string `yaml:"path"`
}

// Inspector is the read-only identity with a time-limited token.
type Inspector struct {
	Name     string `yaml:"name"`
	TokenTTL string `yaml:"tokenTTL"`

	// TTL is TokenTTL parsed, set by Load once the file is valid.
	TTL time.Duration `yaml:"-"`
}

// SSH is how mgmtctl watches its SSH connections, under the names OpenSSH
// users know from ssh_config(5): a keepalive every ServerAliveInterval,
// and the connection given up when more than ServerAliveCountMax in a row
// go unanswered, so a dropped network fails a run instead of hanging it.
type SSH struct {
	ServerAliveInterval string `yaml:"serverAliveInterval"`
	ServerAliveCountMax int    `yaml:"serverAliveCountMax"`

	// Interval is ServerAliveInterval parsed, set by Load.
	Interval time.Duration `yaml:"-"`
}

// Backup is the snapshots k3s takes on every server on its own schedule
// (k3s's etcd-snapshot-schedule-cron and etcd-snapshot-retention,
// docs.k3s.io cli/etcd-snapshot). Empty, k3s's defaults apply: at 00:00
// and 12:00, five kept.
type Backup struct {
	Schedule  string `yaml:"schedule"`
	Retention int    `yaml:"retention"`
	// S3, when set, sends every snapshot off-site too (k3s's etcd-s3*).
	S3 *S3 `yaml:"s3"`
}

// S3 is the bucket k3s uploads its snapshots to, lists and prunes them
// in, and restores them from (docs.k3s.io cli/etcd-snapshot, "S3
// Compatible API Support"). The keys are secrets: secrets.yaml's s3.
type S3 struct {
	// Endpoint is host[:port], without a scheme: k3s always speaks HTTPS
	// here (etcd-s3-insecure is never set).
	Endpoint string `yaml:"endpoint"`
	Bucket   string `yaml:"bucket"`
	// Folder is the key prefix the snapshots go under; empty: the root.
	Folder string `yaml:"folder"`
	// Region is the bucket's; empty: k3s's default, us-east-1.
	Region string `yaml:"region"`
	// CAFile is a PEM file on the laptop holding the CA that signed the
	// endpoint's certificate; empty: the VM's system trust store.
	CAFile string `yaml:"caFile"`

	// CA is CAFile's content, read by Load once the file is valid.
	CA []byte `yaml:"-"`
}

// Secrets is the whole of secrets.yaml.
type Secrets struct {
	Proxmox ProxmoxSecrets `yaml:"proxmox"`
	S3      S3Secrets      `yaml:"s3"`
}

// S3Secrets are the keys of spec.backup.s3's bucket. They reach k3s only
// through its unit's environment file on each server (0600), never its
// config.yaml or a command line.
type S3Secrets struct {
	AccessKey string `yaml:"accessKey"`
	SecretKey string `yaml:"secretKey"`
}

// ProxmoxSecrets holds the Proxmox API token secrets: CAPMOX's
// (PROXMOX_SECRET) and, in api access, mgmtctl's own.
type ProxmoxSecrets struct {
	TokenSecret        string `yaml:"tokenSecret"`
	MgmtctlTokenSecret string `yaml:"mgmtctlTokenSecret"`
}
