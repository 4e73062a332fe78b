// Package catalog is what the lab's internet has released: the Helm
// charts (cert-manager, cluster-api-operator) with their versions, and the
// Cluster API providers clusterctl knows by name, with their release
// assets. The mirror serves it; upstream's helm-controller (klipper-helm's
// Helm, in the helm Jobs' pods) and cluster-api-operator, which the lab
// runs, resolve against it, as they resolve against the real sites.
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

// Charts are the charts the lab's repositories hold (docs/upstream.md §4.6, §5):
// cert-manager's versions carry a leading v, the operator's do not.
var Charts = []Chart{
	{Repo: "https://charts.jetstack.io", Name: "cert-manager", Versions: []string{"v1.21.1", "v1.21.2"},
		AppVersion: func(v string) string { return v }},
	{Repo: "https://kubernetes-sigs.github.io/cluster-api-operator", Name: "cluster-api-operator", Versions: []string{"0.27.0", "0.28.0"},
		AppVersion: func(v string) string { return "v" + v }},
}

// ChartVersions are the versions the repositories hold of the chart
// name.
func ChartVersions(name string) []string {
	for _, c := range Charts {
		if c.Name == name {
			return c.Versions
		}
	}
	return nil
}

// IndexURL is where a repository's index lives.
func IndexURL(repo string) string { return strings.TrimSuffix(repo, "/") + "/index.yaml" }

// Images are the container images the lab's registries hold, by
// repository, with their tags: what a registry's distribution API
// answers for (mirror/registry.go). kube-vip's is the one mgmtctl pins.
var Images = map[string][]string{
	"ghcr.io/kube-vip/kube-vip": {"v1.2.3"},
}

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
	// Namespace is where upstream's kustomize puts the components.
	Namespace string
	// Deployment is the controller's Deployment (docs/upstream.md §4.7), and
	// Prefix the kustomize namePrefix of the rest (ServiceAccount, RBAC).
	Deployment, Prefix string
	Image              string
	// CRDs are the CRD files (crds/<set>/ as fixtures.Lay lays them
	// out) the components carry: a glob per entry.
	CRDs []string
	// Metadata is the release's metadata.yaml, under providers/ as
	// fixtures.Lay lays it out.
	Metadata string
	// Templates are further release assets, under providers/,
	// served under their base name
	// (cluster-template.yaml for clusterctl generate cluster).
	Templates []string
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

// Providers are the providers of a Proxmox management cluster. Cluster
// API's v1.8.4 (a v1beta1 release series) is there for its metadata.yaml:
// pinned beside v1beta2 providers, it is the contract mismatch clusterctl
// refuses (the mirror serves the pin's components under it; nothing
// should install them).
var Providers = []Provider{
	{Type: "core", Kind: "CoreProvider", Name: "cluster-api", Repo: "kubernetes-sigs/cluster-api", Components: "core-components.yaml",
		Versions: []string{"v1.8.4", "v1.12.10", "v1.12.11"}, Namespace: "capi-system", Deployment: "capi-controller-manager", Prefix: "capi-",
		Image: "registry.k8s.io/cluster-api/cluster-api-controller", Metadata: "cluster-api/metadata.yaml",
		CRDs: []string{"cluster-api/cluster.x-k8s.io_*.yaml", "cluster-api/addons.cluster.x-k8s.io_*.yaml", "cluster-api/runtime.cluster.x-k8s.io_*.yaml", "cluster-api/ipam.cluster.x-k8s.io_*.yaml"}},
	{Type: "bootstrap", Kind: "BootstrapProvider", Name: "kubeadm", Repo: "kubernetes-sigs/cluster-api", Components: "bootstrap-components.yaml",
		Versions: []string{"v1.8.4", "v1.12.10", "v1.12.11"}, Namespace: "capi-kubeadm-bootstrap-system", Deployment: "capi-kubeadm-bootstrap-controller-manager", Prefix: "capi-kubeadm-bootstrap-",
		Image: "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller", Metadata: "cluster-api/metadata.yaml",
		CRDs: []string{"cluster-api/bootstrap.cluster.x-k8s.io_*.yaml"}},
	{Type: "control-plane", Kind: "ControlPlaneProvider", Name: "kubeadm", Repo: "kubernetes-sigs/cluster-api", Components: "control-plane-components.yaml",
		Versions: []string{"v1.8.4", "v1.12.10", "v1.12.11"}, Namespace: "capi-kubeadm-control-plane-system", Deployment: "capi-kubeadm-control-plane-controller-manager", Prefix: "capi-kubeadm-control-plane-",
		Image: "registry.k8s.io/cluster-api/kubeadm-control-plane-controller", Metadata: "cluster-api/metadata.yaml",
		CRDs: []string{"cluster-api/controlplane.cluster.x-k8s.io_*.yaml"}},
	{Type: "infrastructure", Kind: "InfrastructureProvider", Name: "proxmox", Repo: "ionos-cloud/cluster-api-provider-proxmox", Components: "infrastructure-components.yaml",
		Versions: []string{"v0.9.0", "v0.9.1"}, Namespace: "capmox-system", Deployment: "capmox-controller-manager", Prefix: "capmox-",
		Image: "ghcr.io/ionos-cloud/cluster-api-provider-proxmox", Metadata: "capmox/metadata.yaml",
		CRDs: []string{"capmox/*.yaml"}, Templates: []string{"capmox/cluster-template.yaml"},
		Variables: []string{"PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET"}},
	{Type: "ipam", Kind: "IPAMProvider", Name: "in-cluster", Repo: "kubernetes-sigs/cluster-api-ipam-provider-in-cluster", Components: "ipam-components.yaml",
		Versions: []string{"v1.0.3", "v1.1.1"}, Namespace: "capi-ipam-in-cluster-system", Deployment: "capi-ipam-in-cluster-controller-manager", Prefix: "capi-ipam-in-cluster-",
		Image: "registry.k8s.io/capi-ipam-ic/cluster-api-ipam-in-cluster-controller", Metadata: "ipam-in-cluster/metadata.yaml",
		CRDs: []string{"ipam-in-cluster/*.yaml"}},
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

// ByLabel finds a provider by its cluster.x-k8s.io/provider label.
func ByLabel(label string) (Provider, bool) {
	for _, p := range Providers {
		if p.Label() == label {
			return p, true
		}
	}
	return Provider{}, false
}

// ComponentsYAML renders a release's components as upstream's kustomize
// lays them out: the Namespace, the provider's real CRDs (crds holds the
// fixture files read from CRDs, in order), the manager's ServiceAccount,
// its RBAC and its Deployment, and for CAPMOX the credentials Secret
// whose values are clusterctl variables. Provider webhooks are left out:
// no provider controller runs in the lab to serve them (docs/lab.md).
func (p Provider) ComponentsYAML(v string, crds [][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata:\n  labels:\n    cluster.x-k8s.io/provider: %s\n    control-plane: controller-manager\n  name: %s\n", p.Label(), p.Namespace)
	for _, c := range crds {
		b.WriteString("---\n")
		b.WriteString(strings.TrimPrefix(strings.TrimSpace(string(c)), "---\n"))
		b.WriteString("\n")
	}
	sa := p.Prefix + "manager"
	fmt.Fprintf(&b, `---
apiVersion: v1
kind: ServiceAccount
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[2]s
  namespace: %[3]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[4]sleader-election-role
  namespace: %[3]s
rules:
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - get
  - list
  - watch
  - create
  - update
  - patch
  - delete
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[4]smanager-role
rules:
- apiGroups:
  - ""
  resources:
  - configmaps
  - events
  - secrets
  verbs:
  - create
  - delete
  - get
  - list
  - patch
  - update
  - watch
- apiGroups:
  - cluster.x-k8s.io
  - bootstrap.cluster.x-k8s.io
  - controlplane.cluster.x-k8s.io
  - infrastructure.cluster.x-k8s.io
  - ipam.cluster.x-k8s.io
  - addons.cluster.x-k8s.io
  - runtime.cluster.x-k8s.io
  resources:
  - '*'
  verbs:
  - create
  - delete
  - get
  - list
  - patch
  - update
  - watch
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[4]sleader-election-rolebinding
  namespace: %[3]s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: %[4]sleader-election-role
subjects:
- kind: ServiceAccount
  name: %[2]s
  namespace: %[3]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[4]smanager-rolebinding
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: %[4]smanager-role
subjects:
- kind: ServiceAccount
  name: %[2]s
  namespace: %[3]s
`, p.Label(), sa, p.Namespace, p.Prefix)
	if len(p.Variables) > 0 {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Secret\nmetadata:\n  labels:\n    cluster.x-k8s.io/provider: %s\n    platform.ionos.com/secret-type: proxmox-credentials\n  name: capmox-manager-credentials\n  namespace: %s\nstringData:\n  secret: ${PROXMOX_SECRET}\n  token: ${PROXMOX_TOKEN}\n  url: ${PROXMOX_URL}\ntype: Opaque\n", p.Label(), p.Namespace)
	}
	fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
    control-plane: controller-manager
  name: %[2]s
  namespace: %[3]s
spec:
  replicas: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/provider: %[1]s
      control-plane: controller-manager
  template:
    metadata:
      labels:
        cluster.x-k8s.io/provider: %[1]s
        control-plane: controller-manager
    spec:
      containers:
      - args:
        - --leader-elect
        - --diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}
        - --insecure-diagnostics=${CAPI_INSECURE_DIAGNOSTICS:=false}
        command:
        - /manager
        image: %[4]s:%[5]s
        imagePullPolicy: IfNotPresent
        name: manager
%[7]s      serviceAccountName: %[6]s
      terminationGracePeriodSeconds: 10
%[8]s`, p.Label(), p.Deployment, p.Namespace, p.Image, v, sa, p.managerExtra(), p.podExtra())
	return b.String()
}

// managerExtra and podExtra are what CAPMOX's release adds to its
// manager and pod (cluster-api-provider-proxmox v0.9.0 config/default:
// manager_credentials_patch.yaml, the env from the credentials Secret;
// manager_webhook_patch.yaml, the webhook server's certificate, which
// config/certmanager's Certificate has cert-manager write, and which
// stays unprefixed), so that the operator's customizations and patches
// of the Deployment meet what they meet upstream. Only the Certificate
// of the webhook is kept: no webhook configuration, no Service.
func (p Provider) managerExtra() string {
	if len(p.Variables) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("        env:\n")
	for _, e := range [][2]string{{"PROXMOX_URL", "url"}, {"PROXMOX_TOKEN", "token"}, {"PROXMOX_SECRET", "secret"}} {
		fmt.Fprintf(&b, "        - name: %s\n          valueFrom:\n            secretKeyRef:\n              key: %s\n              name: capmox-manager-credentials\n", e[0], e[1])
	}
	b.WriteString(`        ports:
        - containerPort: 9443
          name: webhook-server
          protocol: TCP
        volumeMounts:
        - mountPath: /tmp/k8s-webhook-server/serving-certs
          name: cert
          readOnly: true
`)
	return b.String()
}

func (p Provider) podExtra() string {
	if len(p.Variables) == 0 {
		return ""
	}
	return fmt.Sprintf(`      volumes:
      - name: cert
        secret:
          defaultMode: 420
          secretName: webhook-server-cert
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[2]sselfsigned-issuer
  namespace: %[3]s
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  labels:
    cluster.x-k8s.io/provider: %[1]s
  name: %[2]sserving-cert
  namespace: %[3]s
spec:
  dnsNames:
  - %[2]swebhook-service.%[3]s.svc
  - %[2]swebhook-service.%[3]s.svc.cluster.local
  issuerRef:
    kind: Issuer
    name: %[2]sselfsigned-issuer
  secretName: webhook-server-cert
`, p.Label(), p.Prefix, p.Namespace)
}
