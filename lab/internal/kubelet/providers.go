package kubelet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// ProviderLabel marks what clusterctl's library installs for a provider
// (clusterctl's ManifestLabel), the operator's providers' Deployments
// among it.
const ProviderLabel = "cluster.x-k8s.io/provider"

// Providers stands in for the pods of the providers' Deployments: their
// controllers cannot run here, so a pod "starts" when its Deployment's
// template is new and is Available, unless the provider-never-ready
// fault holds it down or, for CAPMOX, its manager would exit at start
// because the Proxmox API refuses the credentials its env takes from
// capmox-manager-credentials. A pod that failed to start is started
// again (CrashLoopBackOff), reading its env anew; one that runs keeps the
// credentials it started with, as a container's env is fixed at start.
type Providers struct {
	CS     kubernetes.Interface
	LabDir string
	HTTP   *http.Client
	Log    io.Writer

	mu sync.Mutex
	// started: the pod template (uid@generation) a pod runs.
	started map[string]bool
	retry   map[string]time.Time
}

// Run keeps the providers' Deployments' status until ctx ends.
func (p *Providers) Run(ctx context.Context) {
	p.started, p.retry = map[string]bool{}, map[string]time.Time{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		list, err := p.CS.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: ProviderLabel})
		if err == nil {
			for i := range list.Items {
				p.sync(ctx, &list.Items[i])
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *Providers) sync(ctx context.Context, d *appsv1.Deployment) {
	// A pod runs one template of one Deployment: clusterctl's upgrader
	// deletes a provider's Deployment and creates it anew, generation 1
	// again, and that is a new pod.
	k := fmt.Sprintf("%s@%d", d.UID, d.Generation)
	p.mu.Lock()
	running := p.started[k]
	next := p.retry[k]
	p.mu.Unlock()
	if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
		// Scaled to zero (clusterctl's upgrader does so before it
		// replaces the components): no pod to run.
		p.write(ctx, d, simkube.Availability{Available: true})
		return
	}
	if running {
		// The pod runs: its status is what it was.
		if d.Status.ObservedGeneration != d.Generation {
			p.write(ctx, d, simkube.Availability{Available: true})
		}
		return
	}
	if time.Now().Before(next) {
		return
	}
	av := p.availability(ctx, d)
	p.mu.Lock()
	if av.Available {
		p.started[k] = true
	} else {
		p.retry[k] = time.Now().Add(10 * time.Second)
	}
	p.mu.Unlock()
	p.write(ctx, d, av)
}

func (p *Providers) write(ctx context.Context, d *appsv1.Deployment, av simkube.Availability) {
	if err := simkube.WriteDeploymentStatus(ctx, p.CS, d, av); err != nil {
		logf(p.Log, "%v", err)
	}
}

// availability is how the provider's pod fares when it starts.
func (p *Providers) availability(ctx context.Context, d *appsv1.Deployment) simkube.Availability {
	label := d.Labels[ProviderLabel]
	prov, _ := catalog.ByLabel(label)
	if b, err := os.ReadFile(filepath.Join(p.LabDir, "faults", "provider-never-ready")); err == nil {
		v := strings.TrimSpace(string(b))
		if v == "" || v == prov.Name || v == label {
			return simkube.Availability{Message: "Deployment does not have minimum availability."}
		}
	}
	if len(prov.Variables) == 0 {
		return simkube.Availability{Available: true}
	}
	sec, err := p.CS.CoreV1().Secrets(d.Namespace).Get(ctx, "capmox-manager-credentials", metav1.GetOptions{})
	if err != nil {
		return simkube.Availability{Message: "manager not started: " + err.Error()}
	}
	return checkProxmox(ctx, p.HTTP, sec)
}

// checkProxmox is CAPMOX's manager start: it builds its Proxmox client
// from url, token and secret and asks the API for its version; refused,
// it exits.
func checkProxmox(ctx context.Context, hc *http.Client, sec *corev1.Secret) simkube.Availability {
	url, token, secret := string(sec.Data["url"]), string(sec.Data["token"]), string(sec.Data["secret"])
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/api2/json/version", nil)
	if err != nil {
		return simkube.Availability{Message: "manager exited: invalid PROXMOX_URL: " + err.Error()}
	}
	req.Header.Set("Authorization", "PVEAPIToken="+token+"="+secret)
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return simkube.Availability{Message: "manager exited: unable to connect to Proxmox: " + err.Error()}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return simkube.Availability{Message: "manager exited: unable to initialize Proxmox client: " + resp.Status}
	}
	return simkube.Availability{Available: true}
}
