package config

import (
	"net"
	"strings"
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

// applyDefaults fills every field that has a sensible default. It runs after
// decoding and before validation, so validation sees the effective config.
func applyDefaults(c *ManagementCluster) {
	s := &c.Spec
	p := &s.Proxmox
	setDefault(&p.User, "root")
	if p.APIURL == "" && p.Host != "" {
		host := p.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		p.APIURL = "https://" + net.JoinHostPort(host, "8006")
	}
	setDefault(&p.Storage, "local-lvm")
	setDefault(&p.ImageDir, "/var/lib/vz/template/iso")

	setDefault(&s.Image.URL, DefaultImageURL)
	if s.Image.URL == DefaultImageURL {
		setDefault(&s.Image.SHA256, DefaultImageSHA256)
	}

	v := &s.VM
	setDefaultInt(&v.Cores, 2)
	setDefaultInt(&v.MemoryMiB, 4096)
	setDefaultInt(&v.DiskGiB, 30)
	setDefault(&v.Bridge, "vmbr0")
	setDefault(&v.User, "ubuntu")
	setDefault(&v.SSHPublicKeyFile, "~/.ssh/id_ed25519.pub")
	if len(v.Nameservers) == 0 && v.Gateway != "" {
		v.Nameservers = []string{v.Gateway}
	}

	setDefault(&s.K3s.Version, DefaultK3sVersion)
	setDefault(&s.K3s.InstallScriptURL, DefaultK3sInstallScript)
	setDefault(&s.CertManager.Version, DefaultCertManager)
	setDefault(&s.CertManager.Repo, DefaultCertManagerRepo)
	setDefault(&s.ClusterAPIOperator.Version, DefaultOperator)
	setDefault(&s.ClusterAPIOperator.Repo, DefaultOperatorRepo)

	if s.Providers == nil {
		for _, t := range ProviderTypes {
			k := supportedProviders[t]
			s.Providers = append(s.Providers, Provider{Type: t, Name: k.name, Version: k.version})
		}
	}
	for i := range s.Providers {
		pr := &s.Providers[i]
		if k, ok := supportedProviders[pr.Type]; ok {
			setDefault(&pr.Name, k.name)
			if pr.Name == k.name {
				setDefault(&pr.Version, k.version)
				setDefault(&pr.Namespace, k.namespace)
			}
		}
	}

	if c.Metadata.Name != "" {
		setDefault(&s.Kubeconfig.Path, "~/.kube/"+c.Metadata.Name+".kubeconfig")
		setDefault(&s.Inspector.Name, c.Metadata.Name+"-ro")
	}
	setDefault(&s.Inspector.TokenTTL, DefaultTokenTTL)
}

func setDefault(f *string, v string) {
	if strings.TrimSpace(*f) == "" {
		*f = v
	}
}

func setDefaultInt(f *int, v int) {
	if *f == 0 {
		*f = v
	}
}
