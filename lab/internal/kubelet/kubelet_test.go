package kubelet

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func pod(labels map[string]string, image string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-abc", Namespace: "ns", UID: "u1", Labels: labels},
		Spec: corev1.PodSpec{NodeName: "lab-mgmt", Containers: []corev1.Container{{Name: "manager", Image: image}}},
		Status: corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Unix(100, 0))}}}}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		image  string
		want   kind
	}{
		{map[string]string{"clusterctl.cluster.x-k8s.io/core": "capi-operator", "control-plane": "controller-manager"}, "registry.k8s.io/capi-operator/cluster-api-operator:v0.28.0", binary},
		{map[string]string{ProviderLabel: "infrastructure-proxmox"}, "ghcr.io/ionos-cloud/cluster-api-provider-proxmox:v0.9.1", provider},
		{map[string]string{"job-name": "helm-install-x"}, "rancher/klipper-helm:v0.9.8-build20250709", helmJob},
		{map[string]string{"app": "cert-manager"}, "quay.io/jetstack/cert-manager-controller:v1.21.2", binary},
		{map[string]string{"app": "webhook"}, "quay.io/jetstack/cert-manager-webhook:v1.21.2", binary},
		{map[string]string{"app": "startupapicheck"}, "quay.io/jetstack/cert-manager-startupapicheck:v1.21.2", binary},
		{map[string]string{"app": "solver"}, "quay.io/jetstack/cert-manager-acmesolver:v1.21.2", plain},
		{map[string]string{"app": "web"}, "docker.io/library/nginx:1.29", plain},
	} {
		if got := kindOf(pod(tc.labels, tc.image)); got != tc.want {
			t.Errorf("%v %s: kind %d, want %d", tc.labels, tc.image, got, tc.want)
		}
	}
}

// TestPodStatus: the status a kubelet writes, for a container that
// starts, one not started yet, and one that crashed and waits.
func TestPodStatus(t *testing.T) {
	k := &Kubelet{Node: "lab-mgmt", IP: "192.0.2.50"}
	now := metav1.NewTime(time.Unix(1000, 0))
	p := pod(nil, "quay.io/jetstack/cert-manager-webhook:v1.21.2")

	// Running and ready, in its sandbox.
	st := &podState{startTime: now, ip: "10.42.0.7"}
	st.start(now.Time)
	st.ready = true
	s := k.podStatus(p, st, now)
	if s.Phase != corev1.PodRunning || s.PodIP != "10.42.0.7" || len(s.PodIPs) != 1 || s.HostIP != "192.0.2.50" || s.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("running: %+v", s)
	}
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range s.Conditions {
		conds[c.Type] = c.Status
	}
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		if conds[c] != corev1.ConditionTrue {
			t.Errorf("running: %s = %q", c, conds[c])
		}
	}
	cs := s.ContainerStatuses[0]
	if !cs.Ready || cs.State.Running == nil || !cs.State.Running.StartedAt.Equal(&now) || *cs.Started != true || !strings.HasPrefix(cs.ContainerID, "containerd://") ||
		cs.ImageID != "quay.io/jetstack/cert-manager-webhook@sha256:"+cs.ImageID[len("quay.io/jetstack/cert-manager-webhook@sha256:"):] || cs.RestartCount != 0 {
		t.Errorf("running container: %+v", cs)
	}
	// The scheduler's condition keeps its time.
	for _, c := range s.Conditions {
		if c.Type == corev1.PodScheduled && c.LastTransitionTime.Unix() != 100 {
			t.Errorf("PodScheduled rewritten: %+v", c)
		}
	}

	// No sandbox yet: Pending, ContainerCreating, not ready, no address.
	s = k.podStatus(p, &podState{startTime: now}, now)
	if s.Phase != corev1.PodPending || s.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" || s.ContainerStatuses[0].Ready || s.PodIP != "" {
		t.Errorf("not started: %+v", s)
	}
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReadyToStartContainers && c.Status != corev1.ConditionFalse {
			t.Errorf("no sandbox: %+v", c)
		}
		if c.Type == corev1.PodReady && (c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [manager]") {
			t.Errorf("not started: %+v", c)
		}
	}

	// Crashed: Running (it restarts), waiting in CrashLoopBackOff, its
	// last state the exit; the back-off doubles.
	st = &podState{startTime: now, ip: "10.42.0.8"}
	st.start(now.Time)
	st.exit(now.Time.Add(time.Second), 1, "unable to setup proxmox API client: unable to initialize proxmox api client: 401 Unauthorized")
	if st.next.Sub(now.Time) != 11*time.Second {
		t.Errorf("first back-off: %v", st.next.Sub(now.Time))
	}
	s = k.podStatus(p, st, now)
	cs = s.ContainerStatuses[0]
	if s.Phase != corev1.PodRunning || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" ||
		cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 || !strings.Contains(cs.LastTerminationState.Terminated.Message, "401") {
		t.Errorf("crashed: %+v", cs)
	}
	st.start(st.next)
	st.exit(st.next, 1, "again")
	if cs := k.podStatus(p, st, now).ContainerStatuses[0]; cs.RestartCount != 1 || !strings.Contains(cs.State.Waiting.Message, "back-off 20s") {
		t.Errorf("second crash: %+v", cs)
	}
}

// TestNodeStatus: ready, with addresses, capacity and the kubelet's
// endpoint; a condition's transition time kept while it holds.
func TestNodeStatus(t *testing.T) {
	k := &Kubelet{Node: "lab-mgmt", IP: "192.0.2.50", Version: "v1.35.7+k3s1"}
	t0 := metav1.NewTime(time.Unix(100, 0))
	st := k.status(corev1.NodeStatus{}, t0)
	if st.DaemonEndpoints.KubeletEndpoint.Port != 10250 || st.NodeInfo.KubeletVersion != "v1.35.7+k3s1" || st.Addresses[0].Address != "192.0.2.50" ||
		st.Capacity.Pods().Value() != 110 || st.Allocatable.Cpu().Value() < 1 {
		t.Errorf("node status: %+v", st)
	}
	t1 := metav1.NewTime(time.Unix(200, 0))
	for _, c := range k.status(st, t1).Conditions {
		if c.LastTransitionTime != t0 || c.LastHeartbeatTime != t1 {
			t.Errorf("%s: transition %v heartbeat %v", c.Type, c.LastTransitionTime, c.LastHeartbeatTime)
		}
	}
	unknown := st.DeepCopy()
	unknown.Conditions[3].Status = corev1.ConditionUnknown
	for _, c := range k.status(*unknown, t1).Conditions {
		if c.Type == corev1.NodeReady && (c.Status != corev1.ConditionTrue || c.LastTransitionTime != t1) {
			t.Errorf("ready again: %+v", c)
		}
	}
}

// TestLogs: the CRI records the kubelet keeps, rendered as its log
// endpoint returns them.
func TestLogs(t *testing.T) {
	var file bytes.Buffer
	clock := time.Date(2026, 12, 5, 1, 2, 3, 0, time.UTC)
	w := &criWriter{f: &file, now: func() time.Time { clock = clock.Add(time.Second); return clock }}
	out := w.stream("stdout")
	out.Write([]byte("one\ntwo\nthr"))
	out.Write([]byte("ee\nfour"))
	out.Close()
	w.wait()
	want := "2026-12-05T01:02:04Z stdout F one\n2026-12-05T01:02:05Z stdout F two\n2026-12-05T01:02:06Z stdout F three\n2026-12-05T01:02:07Z stdout P four\n"
	if file.String() != want {
		t.Fatalf("CRI records:\n%s\nwant:\n%s", file.String(), want)
	}
	for _, tc := range []struct {
		name string
		o    logOptions
		want string
	}{
		{"all", logOptions{tailLines: -1}, "one\ntwo\nthree\nfour"},
		{"tail", logOptions{tailLines: 2}, "two\nthree\nfour"},
		{"tail 0", logOptions{tailLines: 0}, "four"},
		{"timestamps", logOptions{tailLines: 1, timestamps: true}, "2026-12-05T01:02:06Z three\n2026-12-05T01:02:07Z four"},
		{"since", logOptions{tailLines: -1, since: time.Date(2026, 12, 5, 1, 2, 6, 0, time.UTC)}, "three\nfour"},
		{"limit", logOptions{tailLines: -1, limitBytes: 6}, "one\ntw"},
	} {
		var b bytes.Buffer
		if _, err := render(&b, file.Bytes(), tc.o); err != nil || b.String() != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.name, b.String(), err, tc.want)
		}
	}
}

// TestSyncPod: a pod bound to the node is started and its status written
// once (a second sync writes nothing); a provider held down by the fault
// runs not ready; a pod deleted gracefully is deleted for good.
func TestSyncPod(t *testing.T) {
	dir := t.TempDir()
	plainPod := pod(map[string]string{"app": "web"}, "docker.io/library/nginx:1.29")
	prov := pod(map[string]string{ProviderLabel: "bootstrap-kubeadm"}, "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:v1.12.11")
	prov.Name, prov.UID = "prov-1", "u2"
	cs := fake.NewClientset(plainPod, prov)
	k := &Kubelet{CS: cs, Node: "lab-mgmt", IP: "192.0.2.50", LabDir: dir, pods: map[types.UID]*podState{}}
	ctx := context.Background()
	updates := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "update" && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	k.syncPods(ctx)
	got, _ := cs.CoreV1().Pods("ns").Get(ctx, "p-abc", metav1.GetOptions{})
	if got.Status.Phase != corev1.PodRunning || !got.Status.ContainerStatuses[0].Ready {
		t.Errorf("plain pod: %+v", got.Status)
	}
	if n := updates(); n != 2 {
		t.Errorf("first sync: %d status updates, want 2", n)
	}
	k.syncPods(ctx)
	if n := updates(); n != 2 {
		t.Errorf("a second sync wrote the status again: %d updates", n)
	}

	// The fault holds the provider's readiness down, then lets it go.
	os.MkdirAll(filepath.Join(dir, "faults"), 0o755)
	os.WriteFile(filepath.Join(dir, "faults", "provider-never-ready"), []byte("kubeadm"), 0o644)
	k.syncPods(ctx)
	got, _ = cs.CoreV1().Pods("ns").Get(ctx, "prov-1", metav1.GetOptions{})
	if got.Status.Phase != corev1.PodRunning || got.Status.ContainerStatuses[0].Ready {
		t.Errorf("provider held down: %+v", got.Status.ContainerStatuses)
	}
	os.Remove(filepath.Join(dir, "faults", "provider-never-ready"))
	k.syncPods(ctx)
	got, _ = cs.CoreV1().Pods("ns").Get(ctx, "prov-1", metav1.GetOptions{})
	if !got.Status.ContainerStatuses[0].Ready || got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("provider let go: %+v", got.Status.ContainerStatuses)
	}

	// Deleted gracefully: the kubelet finishes the deletion.
	now := metav1.Now()
	got.DeletionTimestamp = &now
	cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), got, "ns")
	cs.ClearActions()
	k.syncPods(ctx)
	var deleted bool
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetName() == "prov-1" {
			o := d.GetDeleteOptions()
			deleted = o.GracePeriodSeconds != nil && *o.GracePeriodSeconds == 0 && o.Preconditions != nil && *o.Preconditions.UID == "u2"
		}
	}
	if !deleted {
		t.Errorf("no deletion with grace 0 and the pod's UID: %v", cs.Actions())
	}
}

// TestRestartAfterReboot: a kubelet started again finds its pods running;
// after k3s's restart alone a stood-in container still runs, as
// containerd keeps it; after the machine's reboot (the node's boot ID
// another) it ran out with the machine, exit 255, reason Unknown, and
// starts again, one restart more.
func TestRestartAfterReboot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rebooted bool
		restarts int32
	}{{"k3s restarted", false, 0}, {"machine rebooted", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(map[string]string{"app": "web"}, "docker.io/library/nginx:1.29")
			cs := fake.NewClientset(p)
			ctx := context.Background()
			first := &Kubelet{CS: cs, Node: "lab-mgmt", IP: "192.0.2.50", LabDir: t.TempDir(), pods: map[types.UID]*podState{}}
			first.syncPods(ctx)
			ran, _ := cs.CoreV1().Pods("ns").Get(ctx, "p-abc", metav1.GetOptions{})
			if ran.Status.ContainerStatuses[0].State.Running == nil {
				t.Fatalf("not running: %+v", ran.Status)
			}
			again := &Kubelet{CS: cs, Node: "lab-mgmt", IP: "192.0.2.50", LabDir: first.LabDir, pods: map[types.UID]*podState{}, rebooted: tc.rebooted}
			again.syncPods(ctx)
			got, _ := cs.CoreV1().Pods("ns").Get(ctx, "p-abc", metav1.GetOptions{})
			c := got.Status.ContainerStatuses[0]
			if c.State.Running == nil || c.RestartCount != tc.restarts {
				t.Fatalf("after the restart: %+v", c)
			}
			last := c.LastTerminationState.Terminated
			if tc.rebooted != (last != nil && last.ExitCode == 255 && last.Reason == "Unknown") {
				t.Errorf("last state: %+v", last)
			}
		})
	}
}
