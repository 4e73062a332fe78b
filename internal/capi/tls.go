package capi

import (
	"encoding/json"
	"path"
)

// CAPMOX verifies the Proxmox API's certificate only when told to: its
// manager reads PROXMOX_INSECURE, true unless set, and takes a CA beside
// the system's roots from the file --proxmox-root-cert-file names
// (ionos-cloud/cluster-api-provider-proxmox v0.9.0 cmd/main.go,
// initFlagsAndEnv and setupProxmoxClient; internal/tlshelper/roots.go,
// SystemRootsWithFile; docs/advanced-setups.md, "Proxmox TLS
// communication"). mgmtctl tells it, through the operator's own fields
// for the provider's Deployment (cluster-api-operator v0.28.0
// api/v1alpha2/provider_types.go: spec.deployment.containers[] env and
// args, applied by internal/controller/component_customizer.go
// customizeContainer; spec.patches, applied by internal/patch/patch.go
// ApplyGenericPatches: a JSON array is an RFC 6902 patch, anything else
// a JSON merge patch, which would replace the Deployment's lists whole).
const (
	// CAPMOXDeployment and its container, as CAPMOX's release names them
	// (config/manager/manager.yaml under config/default's namePrefix
	// capmox-).
	CAPMOXDeployment = "capmox-controller-manager"
	CAPMOXContainer  = "manager"
	// InsecureEnv and RootCertFlag are the manager's.
	InsecureEnv  = "PROXMOX_INSECURE"
	RootCertFlag = "--proxmox-root-cert-file"
	// RootCAVariable is the variables Secret's key that holds the CA;
	// RootCertPath is where the manager reads it: a volume of that
	// Secret with that key alone, beside the webhook certificate's.
	RootCAVariable = "PROXMOX_ROOT_CA"
	rootCertVolume = "proxmox-root-ca"
	RootCertPath   = "/etc/capmox/proxmox/root-ca.pem"
)

// capmoxTLS sets spec's deployment (and patches, for the CA's volume)
// so that CAPMOX verifies the API's certificate, unless the user chose
// otherwise; secret is the variables Secret that holds the CA.
func (c *Cluster) capmoxTLS(spec map[string]any, secret string) {
	insecure := "false"
	if c.SkipTLSVerify {
		insecure = "true"
	}
	container := map[string]any{"name": CAPMOXContainer, "env": []any{map[string]any{"name": InsecureEnv, "value": insecure}}}
	spec["deployment"] = map[string]any{"containers": []any{container}}
	if c.rootCA() == nil {
		return
	}
	container["args"] = map[string]any{RootCertFlag: RootCertPath}
	// Appended to the lists the release has (the webhook certificate's
	// volume and mount): containers/0 is the manager, the Deployment's
	// one container.
	ops := []map[string]any{
		{"op": "add", "path": "/spec/template/spec/volumes/-", "value": map[string]any{"name": rootCertVolume,
			"secret": map[string]any{"secretName": secret, "items": []any{map[string]any{"key": RootCAVariable, "path": path.Base(RootCertPath)}}}}},
		{"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-", "value": map[string]any{"name": rootCertVolume,
			"mountPath": path.Dir(RootCertPath), "readOnly": true}},
	}
	b, _ := json.Marshal(ops)
	spec["patches"] = []any{map[string]any{"patch": string(b),
		"target": map[string]any{"group": "apps", "version": "v1", "kind": "Deployment", "name": CAPMOXDeployment}}}
}

// rootCA is the CA CAPMOX is given as its root-cert file: none when it
// verifies against the system's roots alone, or verifies nothing.
func (c *Cluster) rootCA() []byte {
	if c.SkipTLSVerify {
		return nil
	}
	return c.ProxmoxCA
}
