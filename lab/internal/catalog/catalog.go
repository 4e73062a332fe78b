// Package catalog is what the lab's internet has released: the Helm
// charts (cert-manager, cluster-api-operator) with their versions, and the
// Cluster API providers clusterctl knows by name, with their release
// assets. The mirror serves it; the simulated helm-controller and
// cluster-api-operator resolve against it, as the real ones resolve
// against the real sites.
package catalog

import (
	"fmt"
	"strings"
)

// Chart is a chart in a Helm repository.
type Chart struct {
	Repo     string // repository URL, as users write it
	Name     string
	Versions []string
	// AppVersion maps a chart version to its app version.
	AppVersion func(v string) string
}

// Charts are the charts the lab's repositories hold (upstream-facts 4.6, 5):
// cert-manager's versions carry a leading v, the operator's do not.
var Charts = []Chart{
	{Repo: "https://charts.jetstack.io", Name: "cert-manager", Versions: []string{"v1.21.1", "v1.21.2"},
		AppVersion: func(v string) string { return v }},
	{Repo: "https://kubernetes-sigs.github.io/cluster-api-operator", Name: "cluster-api-operator", Versions: []string{"0.27.0", "0.28.0"},
		AppVersion: func(v string) string { return "v" + v }},
}

// IndexURL is where a repository's index lives.
func IndexURL(repo string) string { return strings.TrimSuffix(repo, "/") + "/index.yaml" }

// Provider is a provider clusterctl has predefined (cluster-api v1.12
// cmd/clusterctl/client/config/providers_client.go), so the operator needs
// no fetchConfig for it.
type Provider struct {
	Type       string // the operator's GetType(): core, bootstrap, control-plane, infrastructure, ipam
	Kind       string // the operator CR's kind
	Name       string
	Repo       string // GitHub repository, owner/name
	Components string // release asset with the components
	Versions   []string
	// Deployment and its upstream namespace (upstream-facts 4.7).
	Deployment string
	Image      string
	// Contract by minor release series ("1.12" -> "v1beta2").
	Contracts map[string]string
	// Variables the components need, filled from the configSecret.
	Variables []string
}

// Label is the cluster.x-k8s.io/provider label value (clusterctl's
// ManifestLabel).
func (p Provider) Label() string {
	if p.Type == "core" {
		return p.Name
	}
	return p.Type + "-" + p.Name
}

// AssetURL is a release asset's URL for version v.
func (p Provider) AssetURL(v, asset string) string {
	return fmt.Sprintf("https://github.com/%s/releases/download/%s/%s", p.Repo, v, asset)
}

var capiContracts = map[string]string{"1.12": "v1beta2", "1.11": "v1beta2", "1.10": "v1beta1"}

// Providers are the providers of a Proxmox management cluster.
var Providers = []Provider{
	{Type: "core", Kind: "CoreProvider", Name: "cluster-api", Repo: "kubernetes-sigs/cluster-api", Components: "core-components.yaml",
		Versions: []string{"v1.12.10", "v1.12.11"}, Deployment: "capi-controller-manager",
		Image: "registry.k8s.io/cluster-api/cluster-api-controller", Contracts: capiContracts},
	{Type: "bootstrap", Kind: "BootstrapProvider", Name: "kubeadm", Repo: "kubernetes-sigs/cluster-api", Components: "bootstrap-components.yaml",
		Versions: []string{"v1.12.10", "v1.12.11"}, Deployment: "capi-kubeadm-bootstrap-controller-manager",
		Image: "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller", Contracts: capiContracts},
	{Type: "control-plane", Kind: "ControlPlaneProvider", Name: "kubeadm", Repo: "kubernetes-sigs/cluster-api", Components: "control-plane-components.yaml",
		Versions: []string{"v1.12.10", "v1.12.11"}, Deployment: "capi-kubeadm-control-plane-controller-manager",
		Image: "registry.k8s.io/cluster-api/kubeadm-control-plane-controller", Contracts: capiContracts},
	{Type: "infrastructure", Kind: "InfrastructureProvider", Name: "proxmox", Repo: "ionos-cloud/cluster-api-provider-proxmox", Components: "infrastructure-components.yaml",
		Versions: []string{"v0.9.0", "v0.9.1"}, Deployment: "capmox-controller-manager",
		Image: "ghcr.io/ionos-cloud/cluster-api-provider-proxmox", Contracts: map[string]string{"0.9": "v1beta2", "0.8": "v1beta2", "0.7": "v1beta1"},
		Variables: []string{"PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET"}},
	{Type: "ipam", Kind: "IPAMProvider", Name: "in-cluster", Repo: "kubernetes-sigs/cluster-api-ipam-provider-in-cluster", Components: "ipam-components.yaml",
		Versions: []string{"v1.0.3", "v1.1.1"}, Deployment: "capi-ipam-in-cluster-controller-manager",
		Image: "registry.k8s.io/capi-ipam-ic/cluster-api-ipam-in-cluster-controller", Contracts: map[string]string{"1.0": "v1beta1", "1.1": "v1beta2"}},
}

// Lookup finds a predefined provider by its operator type and name.
func Lookup(typ, name string) (Provider, bool) {
	for _, p := range Providers {
		if p.Type == typ && p.Name == name {
			return p, true
		}
	}
	return Provider{}, false
}

// Metadata renders a release's metadata.yaml (clusterctl's format).
func (p Provider) Metadata() string {
	var b strings.Builder
	b.WriteString("apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n")
	for series, contract := range p.Contracts {
		maj, min, _ := strings.Cut(series, ".")
		fmt.Fprintf(&b, "- major: %s\n  minor: %s\n  contract: %s\n", maj, min, contract)
	}
	return b.String()
}

// ComponentsYAML renders a release's components: the namespace upstream's
// kustomize puts them in, the controller Deployment, and for CAPMOX the
// credentials Secret filled from the variables (upstream-facts 4.7).
func (p Provider) ComponentsYAML(v string) string {
	ns := map[string]string{
		"capi-controller-manager":                       "capi-system",
		"capi-kubeadm-bootstrap-controller-manager":     "capi-kubeadm-bootstrap-system",
		"capi-kubeadm-control-plane-controller-manager": "capi-kubeadm-control-plane-system",
		"capmox-controller-manager":                     "capmox-system",
		"capi-ipam-in-cluster-controller-manager":       "capi-ipam-in-cluster-system",
	}[p.Deployment]
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    cluster.x-k8s.io/provider: %s\n", ns, p.Label())
	if len(p.Variables) > 0 {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: capmox-manager-credentials\n  namespace: %s\n  labels:\n    cluster.x-k8s.io/provider: %s\n    platform.ionos.com/secret-type: proxmox-credentials\ntype: Opaque\nstringData:\n  url: ${PROXMOX_URL}\n  token: ${PROXMOX_TOKEN}\n  secret: ${PROXMOX_SECRET}\n", ns, p.Label())
	}
	fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  namespace: %s
  labels:
    cluster.x-k8s.io/provider: %s
    control-plane: controller-manager
spec:
  replicas: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/provider: %s
      control-plane: controller-manager
  template:
    metadata:
      labels:
        cluster.x-k8s.io/provider: %s
        control-plane: controller-manager
    spec:
      containers:
      - name: manager
        image: %s:%s
`, p.Deployment, ns, p.Label(), p.Label(), p.Label(), p.Image, v)
	return b.String()
}
