package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
		// Its volumes first, as the kubelet mounts them before the
		// container starts: a Secret not there keeps it creating.
		binds, _, err := k.volumes(ctx, p, p.Spec.Containers[0])
		if err != nil {
			st.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}
			return
		}
		st.waiting = nil
		st.start(now)
		if msg := k.providerStart(ctx, p, st, binds); msg != "" {
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
func (k *Kubelet) providerStart(ctx context.Context, p *corev1.Pod, st *podState, binds []bind) string {
	prov, _ := catalog.ByLabel(p.Labels[ProviderLabel])
	if len(prov.Variables) == 0 {
		return ""
	}
	sec, err := k.CS.CoreV1().Secrets(p.Namespace).Get(ctx, "capmox-manager-credentials", metav1.GetOptions{})
	if err != nil {
		return "manager not started: " + err.Error()
	}
	hc, msg := capmoxHTTP(k.HTTP, k.containerEnv(p, st, p.Spec.Containers[0]), p.Spec.Containers[0].Args, binds)
	if msg != "" {
		return msg
	}
	return checkProxmox(ctx, hc, sec)
}

// capmoxHTTP is the client CAPMOX's manager builds for the Proxmox API
// (v0.9.0 cmd/main.go setupProxmoxClient, initFlagsAndEnv; internal/
// tlshelper/roots.go SystemRootsWithFile): the certificate unverified
// unless PROXMOX_INSECURE is other than "true" (unset is "true"); when
// verified, against the system's roots plus the PEM of
// --proxmox-root-cert-file, read where the container sees it (its
// volumes' binds). A file it cannot read, or that holds no certificate,
// ends the start as main words it. base carries the lab's dialing.
func capmoxHTTP(base *http.Client, env map[string]string, args []string, binds []bind) (*http.Client, string) {
	insecure := true
	if v, ok := env["PROXMOX_INSECURE"]; ok {
		insecure = v == "true"
	}
	file := ""
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--proxmox-root-cert-file="); ok {
			file = v
		} else if a == "--proxmox-root-cert-file" && i+1 < len(args) {
			file = args[i+1]
		}
	}
	var roots *x509.CertPool
	if file != "" {
		pemBlock, err := os.ReadFile(inContainer(file, binds))
		if err != nil {
			return nil, "unable to setup proxmox API client: loading cert pool: loading certificate file: " + err.Error()
		}
		if len(pemBlock) > 0 {
			if roots, err = x509.SystemCertPool(); err != nil {
				roots = x509.NewCertPool()
			}
			if !roots.AppendCertsFromPEM(pemBlock) {
				return nil, "unable to setup proxmox API client: loading cert pool: certificate was not appended"
			}
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if base != nil {
		if t, ok := base.Transport.(*http.Transport); ok {
			tr = t.Clone()
		}
	}
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: insecure, RootCAs: roots} //nolint:gosec // CAPMOX's own default, which mgmtctl turns off
	return &http.Client{Transport: tr}, ""
}

// inContainer is where a path the container names is on the lab's disk:
// under the volume mounted at it, else as it is.
func inContainer(path string, binds []bind) string {
	for _, b := range binds {
		if rel, ok := strings.CutPrefix(path, strings.TrimSuffix(b.mountPath, "/")+"/"); ok {
			return filepath.Join(b.dir, rel)
		}
	}
	return path
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
