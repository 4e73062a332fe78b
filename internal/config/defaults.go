package config

import (
	"fmt"
	"net"
)

// The pins mgmtctl ships with. docs/versions.md says where each was checked.
const (
	DefaultImageURL         = "https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img"
	DefaultImageSHA256      = "6a81c37564db9b1ee84e141922625e1d7c5b389b99bb3c572e0243607d5bb4d2"
	DefaultK3sVersion       = "v1.35.7+k3s1"
	DefaultK3sInstallScript = "https://get.k3s.io"
	DefaultCertManager      = "v1.21.2"
	DefaultCertManagerRepo  = "https://charts.jetstack.io"
	DefaultOperator         = "0.28.0"
	DefaultOperatorRepo     = "https://kubernetes-sigs.github.io/cluster-api-operator"
	DefaultCAPIVersion      = "v1.12.11"
	DefaultCAPMOXVersion    = "v0.9.1"
	DefaultIPAMVersion      = "v1.1.1"
	DefaultTokenTTL         = "168h"
	// A dead link is noticed 30 to 40 s after it drops (OpenSSH's own
	// default is no keepalive at all; 10 s x 3 is the common advice).
	DefaultServerAliveInterval = "10s"
	DefaultServerAliveCountMax = 3
	DefaultKubeVIPImage        = "ghcr.io/kube-vip/kube-vip"
	DefaultKubeVIPVersion      = "v1.2.3"
	// DefaultVIPInterface is eth0: Proxmox's cloud-init network config
	// names the VM's first NIC so, whatever the kernel called it.
	DefaultVIPInterface = "eth0"
)

// knownProvider is a provider mgmtctl can install: its operator name and the
// namespace its upstream manifests use.
type knownProvider struct {
	name, namespace, version string
}

// supportedProviders are the providers of a Proxmox management cluster, by
// type. Each is predefined in clusterctl's registry, so the operator needs no
// fetchConfig for it (upstream preflight rule).
var supportedProviders = map[ProviderType]knownProvider{
	ProviderCore:           {"cluster-api", "capi-system", DefaultCAPIVersion},
	ProviderBootstrap:      {"kubeadm", "capi-kubeadm-bootstrap-system", DefaultCAPIVersion},
	ProviderControlPlane:   {"kubeadm", "capi-kubeadm-control-plane-system", DefaultCAPIVersion},
	ProviderInfrastructure: {"proxmox", "capmox-system", DefaultCAPMOXVersion},
	ProviderIPAM:           {"in-cluster", "capi-ipam-in-cluster-system", DefaultIPAMVersion},
}

// applyDefaults fills every field the file leaves out (set says which it
// gives a value; an explicit null counts as left out). It runs after
// decoding and before validation, so validation sees the effective config,
// and a field written empty or zero is validated as written, not
// replaced.
//
// It returns the default of every field that has one, by path, for the
// errors about a field written empty.
func applyDefaults(c *ManagementCluster, set func(path string) bool) map[string]string {
	defaults := map[string]string{}
	str := func(f *string, path, v string) {
		defaults[path] = v
		if !set(path) {
			*f = v
		}
	}
	num := func(f *int, path string, v int) {
		defaults[path] = fmt.Sprint(v)
		if !set(path) {
			*f = v
		}
	}
	s := &c.Spec
	p := &s.Proxmox
	str(&p.Access, "spec.proxmox.access", AccessSSH)
	str(&p.User, "spec.proxmox.user", "root")
	apiHost := p.Host
	if apiHost == "" && len(s.Servers) > 0 {
		apiHost = s.Servers[0].Host
	}
	if !set("spec.proxmox.apiURL") && apiHost != "" {
		host := apiHost
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		p.APIURL = "https://" + net.JoinHostPort(host, "8006")
	}
	str(&p.Storage, "spec.proxmox.storage", "local-lvm")
	str(&p.ImageDir, "spec.proxmox.imageDir", "/var/lib/vz/template/iso")
	str(&p.ImageStorage, "spec.proxmox.imageStorage", "local")
	str(&p.ISOStorage, "spec.proxmox.isoStorage", "local")

	str(&s.Image.URL, "spec.image.url", DefaultImageURL)
	if s.Image.URL == DefaultImageURL {
		str(&s.Image.SHA256, "spec.image.sha256", DefaultImageSHA256)
	}

	v := &s.VM
	num(&v.Cores, "spec.vm.cores", 2)
	num(&v.MemoryMiB, "spec.vm.memoryMiB", 4096)
	num(&v.DiskGiB, "spec.vm.diskGiB", 30)
	str(&v.Bridge, "spec.vm.bridge", "vmbr0")
	str(&v.User, "spec.vm.user", "ubuntu")
	str(&v.SSHPublicKeyFile, "spec.vm.sshPublicKeyFile", "~/.ssh/id_ed25519.pub")
	if !set("spec.vm.nameservers") && v.Gateway != "" {
		v.Nameservers = []string{v.Gateway}
	}

	for i := range s.Servers {
		at := fmt.Sprintf("spec.servers[%d].", i)
		str(&s.Servers[i].Name, at+"name", ServerName(c.Metadata.Name, i))
		str(&s.Servers[i].Host, at+"host", s.Servers[i].Node)
	}
	str(&s.VIP.Interface, "spec.vip.interface", DefaultVIPInterface)
	str(&s.VIP.Image, "spec.vip.image", DefaultKubeVIPImage)
	str(&s.VIP.Version, "spec.vip.version", DefaultKubeVIPVersion)

	str(&s.K3s.Version, "spec.k3s.version", DefaultK3sVersion)
	str(&s.K3s.InstallScriptURL, "spec.k3s.installScriptURL", DefaultK3sInstallScript)
	str(&s.CertManager.Version, "spec.certManager.version", DefaultCertManager)
	str(&s.CertManager.Repo, "spec.certManager.repo", DefaultCertManagerRepo)
	str(&s.ClusterAPIOperator.Version, "spec.clusterAPIOperator.version", DefaultOperator)
	str(&s.ClusterAPIOperator.Repo, "spec.clusterAPIOperator.repo", DefaultOperatorRepo)

	if !set("spec.providers") {
		for _, t := range ProviderTypes {
			k := supportedProviders[t]
			s.Providers = append(s.Providers, Provider{Type: t, Name: k.name, Version: k.version})
		}
	}
	for i := range s.Providers {
		pr := &s.Providers[i]
		at := fmt.Sprintf("spec.providers[%d].", i)
		if k, ok := supportedProviders[pr.Type]; ok {
			str(&pr.Name, at+"name", k.name)
			if pr.Name == k.name {
				str(&pr.Version, at+"version", k.version)
				str(&pr.Namespace, at+"namespace", k.namespace)
			}
		}
	}

	if c.Metadata.Name != "" {
		str(&s.Kubeconfig.Path, "spec.kubeconfig.path", "~/.kube/"+c.Metadata.Name+".kubeconfig")
		str(&s.Inspector.Name, "spec.inspector.name", c.Metadata.Name+"-ro")
	}
	str(&s.Inspector.TokenTTL, "spec.inspector.tokenTTL", DefaultTokenTTL)
	str(&s.SSH.ServerAliveInterval, "spec.ssh.serverAliveInterval", DefaultServerAliveInterval)
	num(&s.SSH.ServerAliveCountMax, "spec.ssh.serverAliveCountMax", DefaultServerAliveCountMax)
	return defaults
}

// ServerName is the default name of the i-th server (from 0): the
// cluster's name for the first, so a single server keeps its VM and node
// name when the cluster grows, then name-2, name-3.
func ServerName(cluster string, i int) string {
	if i == 0 {
		return cluster
	}
	return fmt.Sprintf("%s-%d", cluster, i+1)
}
