package kubelet

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
)

// ProviderLabel marks what clusterctl's library installs for a provider
// (clusterctl's ManifestLabel), the operator's providers' Deployments
// among it.
const ProviderLabel = "cluster.x-k8s.io/provider"

// runProvider stands in for a provider's manager: its controllers cannot
// run here, so its container starts and is ready, unless its manager
// would exit at start (CAPMOX, when the Proxmox API refuses the
// credentials its env takes from capmox-manager-credentials: exit 1, with
// the reason as its last words, then CrashLoopBackOff, reading the env
// anew at each restart, as a container's env is fixed at its start) or
// the provider-never-ready fault holds its readiness probe down.
func (k *Kubelet) runProvider(ctx context.Context, p *corev1.Pod, st *podState, now time.Time) {
	if st.started == nil {
		if now.Before(st.next) {
			return
		}
		st.start(now)
		if msg := k.providerStart(ctx, p); msg != "" {
			st.exit(now, 1, msg)
			k.logf("provider pod %s/%s: %s", p.Namespace, p.Name, msg)
			return
		}
	}
	st.ready = !k.neverReady(p)
}

// neverReady reads the provider-never-ready fault: on for every provider
// (empty value) or for the one named (its name or its label).
func (k *Kubelet) neverReady(p *corev1.Pod) bool {
	b, err := os.ReadFile(filepath.Join(k.LabDir, "faults", "provider-never-ready"))
	if err != nil {
		return false
	}
	label := p.Labels[ProviderLabel]
	prov, _ := catalog.ByLabel(label)
	v := strings.TrimSpace(string(b))
	return v == "" || v == prov.Name || v == label
}

// providerStart is how the provider's manager fares at start: "" when it
// runs, else why it exited.
func (k *Kubelet) providerStart(ctx context.Context, p *corev1.Pod) string {
	prov, _ := catalog.ByLabel(p.Labels[ProviderLabel])
	if len(prov.Variables) == 0 {
		return ""
	}
	sec, err := k.CS.CoreV1().Secrets(p.Namespace).Get(ctx, "capmox-manager-credentials", metav1.GetOptions{})
	if err != nil {
		return "manager not started: " + err.Error()
	}
	return checkProxmox(ctx, k.HTTP, sec)
}

// checkProxmox is CAPMOX's manager start (ionos-cloud/
// cluster-api-provider-proxmox v0.9.1, cmd/main.go setupProxmoxClient,
// and pkg/proxmox/goproxmox/api_client.go NewAPIClient): with url, token
// and secret set it builds its Proxmox client and asks the API for its
// version (GET /api2/json/version); refused, main logs "unable to setup
// proxmox API client" with the client's error and exits 1. The lab's
// message is those two joined, the go-proxmox error being the HTTP
// status.
func checkProxmox(ctx context.Context, hc *http.Client, sec *corev1.Secret) string {
	url, token, secret := string(sec.Data["url"]), string(sec.Data["token"]), string(sec.Data["secret"])
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/api2/json/version", nil)
	if err != nil {
		return "unable to setup proxmox API client: invalid proxmox base URL: " + err.Error()
	}
	req.Header.Set("Authorization", "PVEAPIToken="+token+"="+secret)
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "unable to setup proxmox API client: unable to initialize proxmox api client: " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "unable to setup proxmox API client: unable to initialize proxmox api client: " + resp.Status
	}
	return ""
}
