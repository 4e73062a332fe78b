package kubelet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm"
	"github.com/mgmtctl/mgmtctl/lab/internal/podnet"
)

// The kubelet's timings (k8s.io/kubelet/config/v1beta1 defaults, which
// k3s keeps): the node Lease lasts 40 s and is renewed every quarter of
// it; the node's status is posted when it changes, checked every 10 s,
// and at least every 5 minutes.
const (
	LeaseDuration       = 40 * time.Second
	LeaseRenew          = LeaseDuration / 4
	StatusUpdate        = 10 * time.Second
	StatusReport        = 5 * time.Minute
	KubeletPort         = 10250
	podSync             = time.Second
	containerRuntimeVer = "containerd://2.1.4-k3s1"
)

// Kubelet is the lab's kubelet on one server, as k3s's agent runs one in
// the same process: it registers the Node (named after the host, as k3s
// names it), renews its Lease in kube-node-lease, posts its status, and
// runs the pods the scheduler binds to it, writing each pod's status as
// a kubelet does. Containers cannot run here, so what a pod's container
// does is stood in for by its kind (see kindOf): the
// cluster-api-operator's is upstream's binary, really run; a provider's
// starts and is ready unless its manager would exit at start; every
// other container starts and is ready.
type Kubelet struct {
	CS      kubernetes.Interface
	Node    string
	IP      string
	Version string // k3s's version, the kubelet's
	// Etcd marks a server with embedded etcd (k3s's etcd node role).
	Etcd bool
	// LabDir holds the operator builds (bin/) and the fault switches.
	LabDir string
	// CA is the cluster's CA, a pod's ca.crt.
	CA   []byte
	HTTP *http.Client
	Log  io.Writer
	// LogDir is where the containers' logs are kept (LogDir when empty).
	LogDir string
	// Helm does the work of klipper-helm's containers.
	Helm *klipperhelm.Runner
	// Net is the node's pod network; without it, every pod has the
	// node's address.
	Net *podnet.Network
	// PodDir is where pods' volumes are kept (/var/lib/kubelet/pods
	// when empty).
	PodDir string
	// VIPCommands replace kube-vip's ip and arping, and PodClient the
	// client a container makes from its token file (tests).
	VIPCommands *VIPCommands
	PodClient   func(tokenFile string) (kubernetes.Interface, error)

	mu   sync.Mutex
	pods map[types.UID]*podState
	// rebooted: the node's last reported boot ID was another's.
	rebooted bool
}

func (k *Kubelet) logf(format string, args ...any) { logf(k.Log, format, args...) }

// Register creates the Node, or takes the one of an earlier start, and
// posts it Ready with its addresses, capacity and kubelet endpoint.
func (k *Kubelet) Register(ctx context.Context) error {
	nodes := k.CS.CoreV1().Nodes()
	n, err := nodes.Get(ctx, k.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		labels := map[string]string{
			"kubernetes.io/hostname": k.Node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
			"node-role.kubernetes.io/control-plane": "true", "node-role.kubernetes.io/master": "true",
			"node.kubernetes.io/instance-type": "k3s",
		}
		if k.Etcd {
			labels["node-role.kubernetes.io/etcd"] = "true"
		}
		n, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.Node, Labels: labels,
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", k.Node, err)
	}
	if k.Etcd && n.Labels["node-role.kubernetes.io/etcd"] != "true" {
		// A patch: the controllers write the Node too (its pod CIDR).
		patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/etcd":"true"}}}`)
		if n, err = nodes.Patch(ctx, k.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s: %w", k.Node, err)
		}
	}
	// A boot ID other than the one this node last reported: the machine
	// rebooted since, and the containers died with it.
	k.mu.Lock()
	k.rebooted = n.Status.NodeInfo.BootID != "" && n.Status.NodeInfo.BootID != bootID
	k.mu.Unlock()
	return k.postStatus(ctx, n, true)
}

// status is the Node's status as this kubelet sees it.
func (k *Kubelet) status(prev corev1.NodeStatus, now metav1.Time) corev1.NodeStatus {
	st := prev
	c := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		cond := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		for _, p := range prev.Conditions {
			if p.Type == t && p.Status == s {
				cond.LastTransitionTime = p.LastTransitionTime
			}
		}
		return cond
	}
	st.Conditions = []corev1.NodeCondition{
		c(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		c(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		c(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		c(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
	st.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.IP}, {Type: corev1.NodeHostName, Address: k.Node}}
	st.DaemonEndpoints.KubeletEndpoint.Port = KubeletPort
	st.Capacity = capacity()
	st.Allocatable = st.Capacity.DeepCopy()
	st.NodeInfo.KubeletVersion = k.Version
	st.NodeInfo.KubeProxyVersion = k.Version
	st.NodeInfo.OperatingSystem, st.NodeInfo.Architecture = "linux", "amd64"
	st.NodeInfo.OSImage = "Ubuntu 24.04.3 LTS"
	st.NodeInfo.KernelVersion = kernel()
	st.NodeInfo.ContainerRuntimeVersion = containerRuntimeVer
	st.NodeInfo.MachineID = machineID()
	st.NodeInfo.SystemUUID = machineID()
	st.NodeInfo.BootID = bootID
	return st
}

// bootID is the boot's, as cAdvisor reads it for the kubelet: it changes
// with every boot of the VM (the lab's host agent gives each boot its
// own), not with k3s's restart.
var bootID = func() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}()

func machineID() string {
	b, _ := os.ReadFile("/etc/machine-id")
	return strings.TrimSpace(string(b))
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// capacity is the machine's, as cAdvisor reads it; k3s reserves nothing,
// so it is also what is allocatable.
func capacity() corev1.ResourceList {
	mem := int64(4 << 30)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					mem = kb << 10
				}
			}
		}
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(30<<30, resource.BinarySI),
		"hugepages-2Mi":                 *resource.NewQuantity(0, resource.BinarySI),
	}
}

// postStatus writes the node's status when a condition's status
// differs from this kubelet's (the node lifecycle controller marked it
// Unknown, say), or when force, or when the last report is older than
// StatusReport.
func (k *Kubelet) postStatus(ctx context.Context, n *corev1.Node, force bool) error {
	now := apiNow()
	if !force {
		stale := true
		differs := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				stale = now.Sub(c.LastHeartbeatTime.Time) > StatusReport
				differs = c.Status != corev1.ConditionTrue
			}
		}
		if !stale && !differs {
			return nil
		}
	}
	for {
		n = n.DeepCopy()
		n.Status = k.status(n.Status, now)
		_, err := k.CS.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		// Written meanwhile (the controllers set its pod CIDR, its
		// taints): again, on what is there now.
		if n, err = k.CS.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{}); err != nil {
			return err
		}
	}
}

// Run renews the Lease, keeps the node's status and runs the node's
// pods until ctx ends; then it stops the containers it runs.
func (k *Kubelet) Run(ctx context.Context) {
	k.mu.Lock()
	if k.pods == nil {
		k.pods = map[types.UID]*podState{}
	}
	k.mu.Unlock()
	defer k.stopAll()
	go k.renewLease(ctx)
	go k.nodeStatus(ctx)
	go k.runNetwork(ctx)
	tick := time.NewTicker(podSync)
	defer tick.Stop()
	for {
		k.syncPods(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewLease keeps kube-node-lease/<node> renewed, owned by the Node, as
// the kubelet's node lease controller does.
func (k *Kubelet) renewLease(ctx context.Context) {
	leases := k.CS.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	secs := int32(LeaseDuration / time.Second)
	for {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, k.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			var owner []metav1.OwnerReference
			if n, err := k.CS.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{}); err == nil {
				owner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
			}
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: k.Node, Namespace: corev1.NamespaceNodeLease, OwnerReferences: owner},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &k.Node, LeaseDurationSeconds: &secs, RenewTime: &now}}, metav1.CreateOptions{})
			if err != nil && ctx.Err() == nil {
				k.logf("create node lease: %v", err)
			}
		case err == nil:
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &k.Node, &secs, &now
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				k.logf("renew node lease: %v", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(LeaseRenew):
		}
	}
}

func (k *Kubelet) nodeStatus(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(StatusUpdate):
		}
		n, err := k.CS.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// Deleted (a server removed and re-added): register again.
			err = k.Register(ctx)
		} else if err == nil {
			err = k.postStatus(ctx, n, false)
		}
		if err != nil && ctx.Err() == nil {
			k.logf("node status: %v", err)
		}
	}
}

// syncPods brings every pod bound to this node to what its spec says.
func (k *Kubelet) syncPods(ctx context.Context) {
	list, err := k.CS.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.Node).String()})
	if err != nil {
		return
	}
	seen := map[types.UID]bool{}
	bound := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		seen[p.UID] = true
		bound[string(p.UID)] = true
		if err := k.syncPod(ctx, p); err != nil && ctx.Err() == nil {
			k.logf("pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	// A pod deleted outright (force): its containers go.
	k.mu.Lock()
	var gone []*podState
	for uid, st := range k.pods {
		if !seen[uid] {
			gone = append(gone, st)
			delete(k.pods, uid)
		}
	}
	k.mu.Unlock()
	for _, st := range gone {
		st.stop()
	}
	k.collect(bound)
}

// stopAll stops every container at once: one that takes its grace
// period (the operator's) must not hold up another's stop (kube-vip's,
// which gives the address up while its server's API still answers).
func (k *Kubelet) stopAll() {
	k.mu.Lock()
	pods := k.pods
	k.pods = map[types.UID]*podState{}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range pods {
		wg.Go(st.stop)
	}
	wg.Wait()
}
