// Package capi holds the capi phase's steps: the Proxmox token checked
// against the Proxmox API, the provider namespaces, each provider's
// variables in a content-named Secret (the operator reads a configSecret
// only when it installs, and never watches it), the five
// cluster-api-operator provider CRs applied one at a time (core first),
// each waited for until Ready at its pinned version, and the variables
// Secrets no provider points at any more removed.
package capi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/kube"
)

// FieldManager is mgmtctl's server-side apply identity.
const FieldManager = "mgmtctl"

// Group and version of cluster-api-operator's CRs (cluster-api-operator
// v0.28.0 config/crd/bases).
const (
	Group   = "operator.cluster.x-k8s.io"
	Version = "v1alpha2"
)

// Labels mgmtctl puts on what it creates.
const (
	ManagedBy    = "app.kubernetes.io/managed-by"
	VariablesFor = "mgmtctl.io/variables-for"
)

// Kind is a provider type's operator kind, plural and the type prefix the
// operator uses in its ConfigMap and cache Secret names.
type Kind struct {
	Kind, Plural, Prefix string
}

// Kinds by config provider type.
var Kinds = map[config.ProviderType]Kind{
	config.ProviderCore:           {"CoreProvider", "coreproviders", "core"},
	config.ProviderBootstrap:      {"BootstrapProvider", "bootstrapproviders", "bootstrap"},
	config.ProviderControlPlane:   {"ControlPlaneProvider", "controlplaneproviders", "control-plane"},
	config.ProviderInfrastructure: {"InfrastructureProvider", "infrastructureproviders", "infrastructure"},
	config.ProviderIPAM:           {"IPAMProvider", "ipamproviders", "ipam"},
}

// GVR is the provider kind's resource.
func (k Kind) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: Version, Resource: k.Plural}
}

// Cluster is what the capi steps share.
type Cluster struct {
	Name string // the management cluster, as the recap shows it
	// API is nil in a check run before the cluster exists.
	API func() *kube.Reader
	// Configured are mgmt.yaml's providers, in its order; Providers
	// gives them in install order.
	Configured []config.Provider
	// ProxmoxURL and TokenID are what CAPMOX is given beside the secret.
	ProxmoxURL, TokenID string
	// TokenSecret is PROXMOX_SECRET; it reaches the cluster only inside
	// the variables Secret.
	TokenSecret string
	// ProxmoxCA is what CAPMOX verifies the API's certificate against
	// beside the system's roots (PEM): spec.proxmox.caFile's CA, or the
	// certificate spec.proxmox.fingerprint pins; nil: the system's roots
	// alone. SkipTLSVerify, the user's explicit choice, verifies nothing.
	ProxmoxCA     []byte
	SkipTLSVerify bool
	// Timeout bounds each provider's wait; zero means ProviderTimeout.
	Timeout time.Duration
}

func (c *Cluster) timeout() time.Duration {
	if c.Timeout <= 0 {
		return ProviderTimeout
	}
	return c.Timeout
}

// Provider is one provider as mgmtctl applies it.
type Provider struct {
	config.Provider
	Kind Kind
}

// Providers lists the config's providers in install order (core first).
func (c *Cluster) Providers() []Provider {
	var out []Provider
	for _, t := range config.ProviderTypes {
		for _, p := range c.Configured {
			if p.Type == t {
				out = append(out, Provider{Provider: p, Kind: Kinds[t]})
			}
		}
	}
	return out
}

// Ref is "Kind namespace/name".
func (p Provider) Ref() string { return fmt.Sprintf("%s %s/%s", p.Kind.Kind, p.Namespace, p.Name) }

// Variables is what a provider's configSecret holds: for the Proxmox
// provider the CAPMOX credentials (docs/upstream.md §4.7), plus the provider's
// own variables; nil when it needs none.
func (c *Cluster) Variables(p Provider) map[string]string {
	vars := map[string]string{}
	for k, v := range p.Variables {
		vars[k] = v
	}
	if p.Type == config.ProviderInfrastructure {
		vars["PROXMOX_URL"], vars["PROXMOX_TOKEN"], vars["PROXMOX_SECRET"] = c.ProxmoxURL, c.TokenID, c.TokenSecret
		if ca := c.rootCA(); ca != nil {
			// Mounted from this Secret as CAPMOX's root-cert file
			// (tls.go); a new CA is a new Secret, so a new Deployment.
			vars[RootCAVariable] = string(ca)
		}
	}
	if len(vars) == 0 {
		return nil
	}
	return vars
}

// SecretName names a variables Secret after a hash of its content, so a
// new content is a new Secret and the provider's spec changes with it:
// the operator reinstalls with the new values, which it would not do for
// an edited Secret.
func SecretName(p Provider, vars map[string]string) string {
	h := sha256.New()
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, vars[k])
	}
	return fmt.Sprintf("%s-variables-%s", p.Name, hex.EncodeToString(h.Sum(nil))[:10])
}

// variablesFor is the label value that ties a variables Secret to its
// provider.
func variablesFor(p Provider) string { return strings.ToLower(p.Kind.Kind) + "." + p.Name }

// Desired is the provider CR mgmtctl applies.
func (c *Cluster) Desired(p Provider) *unstructured.Unstructured {
	spec := map[string]any{"version": p.Version}
	secret := ""
	if vars := c.Variables(p); vars != nil {
		secret = SecretName(p, vars)
		spec["configSecret"] = map[string]any{"name": secret, "namespace": p.Namespace}
	}
	if p.Type == config.ProviderInfrastructure {
		c.capmoxTLS(spec, secret)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + Version, "kind": p.Kind.Kind,
		"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace, "labels": map[string]any{ManagedBy: "mgmtctl"}},
		"spec":     spec,
	}}
}
