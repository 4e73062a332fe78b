package catalog

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCAPMOXDeploymentAsReleased: CAPMOX's components carry what its
// release's kustomize adds to the manager (the credentials' env, the
// webhook certificate's volume and mount, and cert-manager's Issuer and
// Certificate that write it), so that a patch appending to those lists
// meets them as upstream; the other providers' Deployments are as they
// were.
func TestCAPMOXDeploymentAsReleased(t *testing.T) {
	for _, p := range Providers {
		var deploy map[string]any
		var kinds []string
		for _, doc := range strings.Split(p.ComponentsYAML(p.Versions[0], nil), "\n---\n") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v\n%s", p.Name, err, doc)
			}
			kinds = append(kinds, o["kind"].(string))
			if o["kind"] == "Deployment" {
				deploy = o
			}
		}
		pod := deploy["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		ctr := pod["containers"].([]any)[0].(map[string]any)
		_, vols := pod["volumes"]
		_, mounts := ctr["volumeMounts"]
		capmox := len(p.Variables) > 0
		if vols != capmox || mounts != capmox || strings.Contains(strings.Join(kinds, ","), "Certificate") != capmox {
			t.Errorf("%s: volumes %v, mounts %v, kinds %v", p.Name, vols, mounts, kinds)
		}
	}
}
