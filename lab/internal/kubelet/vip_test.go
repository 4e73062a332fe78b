package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestKubeVIPPod: a pod of kube-vip's DaemonSet is run by the kubelet:
// with its ServiceAccount's token it wins the control-plane Lease, adds
// the address to its interface and announces it, logs in the
// container's log; deleted, it gives the address up.
func TestKubeVIPPod(t *testing.T) {
	dir := t.TempDir()
	p := pod(map[string]string{"app.kubernetes.io/name": "kube-vip-ds"}, "ghcr.io/kube-vip/kube-vip:v1.0.1")
	p.Namespace, p.Spec.HostNetwork, p.Spec.ServiceAccountName = "kube-system", true, "kube-vip"
	p.Spec.Containers[0].Name = "kube-vip"
	for k, v := range map[string]string{"vip_arp": "true", "cp_enable": "true", "vip_leaderelection": "true", "address": "192.0.2.60",
		"vip_interface": "eth0", "vip_leaseduration": "5", "vip_renewdeadline": "3", "vip_retryperiod": "1"} {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: k, Value: v})
	}
	cs := fake.NewClientset(p, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-vip", Namespace: "kube-system"}})
	// The API server's TokenRequest, which the fake does not answer.
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "kube-vip-token"}}, nil
	})
	var (
		mu   sync.Mutex
		cmds []string
	)
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		cmds = append(cmds, s)
	}
	recorded := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(cmds, "; ")
	}
	var tokenFile string
	k := &Kubelet{CS: cs, Node: "lab-mgmt", IP: "192.0.2.50", LabDir: dir, LogDir: filepath.Join(dir, "logs"), PodDir: filepath.Join(dir, "pods"),
		pods: map[types.UID]*podState{},
		VIPCommands: &VIPCommands{
			IP:       func(args ...string) error { record("ip " + strings.Join(args, " ")); return nil },
			Announce: func(iface, addr string) error { record("arping " + iface + " " + addr); return nil }},
		PodClient: func(f string) (kubernetes.Interface, error) { tokenFile = f; return cs, nil }}
	ctx := context.Background()
	k.syncPods(ctx)
	st := k.pods[p.UID]
	if st == nil || st.proc == nil || st.kind != kubeVIP {
		t.Fatalf("kube-vip not started: %+v", st)
	}
	if want := filepath.Join(dir, "pods", "u1", "volumes", "kubernetes.io~projected", "kube-api-access", "token"); tokenFile != want {
		t.Errorf("token file %q, want %q", tokenFile, want)
	} else if b, err := os.ReadFile(tokenFile); err != nil || string(b) != "kube-vip-token" {
		t.Errorf("token file: %q %v", b, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(recorded(), "arping eth0 192.0.2.60") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := recorded(); got != "ip addr replace 192.0.2.60/32 dev eth0; arping eth0 192.0.2.60" {
		t.Errorf("as leader: %s", got)
	}
	if l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "plndr-cp-lock", metav1.GetOptions{}); err != nil || *l.Spec.HolderIdentity != "lab-mgmt" {
		t.Errorf("lease: %v %+v", err, l)
	}
	got, _ := cs.CoreV1().Pods("kube-system").Get(ctx, p.Name, metav1.GetOptions{})
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "192.0.2.50" || !got.Status.ContainerStatuses[0].Ready {
		t.Errorf("pod status: %+v", got.Status)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "logs", "kube-system_p-abc_u1", "kube-vip", "0.log"))
	if !strings.Contains(string(b), "lab-mgmt is assuming leadership of the cluster, 192.0.2.60 on eth0") {
		t.Errorf("container log: %q", b)
	}

	// Deleted: the container stops and the address goes.
	if err := cs.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	k.syncPods(ctx)
	if got := recorded(); !strings.HasSuffix(got, "ip addr del 192.0.2.60/32 dev eth0") {
		t.Errorf("after the pod's deletion: %s", got)
	}
}
