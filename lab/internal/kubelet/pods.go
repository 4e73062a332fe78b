package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm"
	"github.com/mgmtctl/mgmtctl/lab/internal/kubevip"
)

// kind is what stands in for a pod's container.
type kind int

const (
	// plain: the container starts and is ready.
	plain kind = iota
	// binary: upstream's own binary for the image (cluster-api-operator,
	// cert-manager's), run as a process (container.go).
	binary
	// provider: a provider's manager, which starts unless it would exit
	// at start (providers.go).
	provider
	// helmJob: a helm-controller Job's pod, klipper-helm's container
	// (helm.go).
	helmJob
	// kubeVIP: a kube-vip pod, its control-plane election (vip.go).
	kubeVIP
)

// kindOf reads a pod's kind from its labels and image.
func kindOf(p *corev1.Pod) kind {
	switch {
	case len(p.Spec.Containers) > 0 && isUpstream(p.Spec.Containers[0].Image):
		return binary
	case p.Labels[ProviderLabel] != "":
		return provider
	case len(p.Spec.Containers) > 0 && strings.Contains(p.Spec.Containers[0].Image, klipperhelm.Image):
		return helmJob
	}
	if len(p.Spec.Containers) > 0 {
		if _, ok := kubevip.FromContainer(p.Spec.Containers[0]); ok {
			return kubeVIP
		}
	}
	return plain
}

// podState is what this kubelet knows of a pod's (first) container.
type podState struct {
	uid  types.UID
	kind kind
	// ref names the container in the kubelet's messages:
	// container=<name> pod=<pod>_<namespace>(<uid>).
	ref       string
	startTime metav1.Time
	// everStarted: a further start is a restart.
	everStarted bool
	restarts    int32
	// started is when the running container started; nil when none runs.
	started *metav1.Time
	ready   bool
	waiting *corev1.ContainerStateWaiting
	last    *corev1.ContainerStateTerminated
	// done is a container that ran to completion (exit 0) and, by its
	// pod's restartPolicy, is not started again: the pod has Succeeded.
	done *corev1.ContainerStateTerminated
	// next is when a crashed container may start again (back-off).
	next time.Time
	proc *process
	// ip is the pod's address: its sandbox's, or the node's for a pod
	// on the host's network; "" while it has no sandbox yet.
	ip string
}

func (st *podState) stop() {
	if st.proc != nil {
		st.proc.kill()
		st.proc = nil
	}
}

// start records a container start.
func (st *podState) start(now time.Time) {
	if st.everStarted {
		st.restarts++
	}
	st.everStarted = true
	t := metav1.NewTime(now.Truncate(time.Second))
	st.started, st.ready, st.waiting = &t, false, nil
}

// exit records the container's end and schedules its restart with the
// kubelet's back-off: 10 s, doubling, at most 5 minutes.
func (st *podState) exit(now time.Time, code int32, msg string) {
	started := metav1.NewTime(now.Truncate(time.Second))
	if st.started != nil {
		started = *st.started
	}
	reason := "Error"
	if code == 0 {
		reason = "Completed"
	}
	st.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: started, FinishedAt: metav1.NewTime(now.Truncate(time.Second))}
	st.started, st.ready = nil, false
	backoff := min(10*time.Second<<min(st.restarts, 5), 5*time.Minute)
	st.next = now.Add(backoff)
	st.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed %s", backoff, st.ref)}
}

// complete records a container that exited 0 and is not restarted:
// the pod has Succeeded.
func (st *podState) complete(now time.Time) { st.finish(now, 0) }

// fail records a container that exited non-zero and is not restarted
// (restartPolicy Never): the pod has Failed.
func (st *podState) fail(now time.Time, code int32) { st.finish(now, code) }

func (st *podState) finish(now time.Time, code int32) {
	started := metav1.NewTime(now.Truncate(time.Second))
	if st.started != nil {
		started = *st.started
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	st.done = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: metav1.NewTime(now.Truncate(time.Second))}
	st.started, st.ready, st.waiting = nil, false, nil
}

// state is the pod's state, made on first sight. A pod that already has
// a status was run by this kubelet before k3s restarted: containerd
// keeps containers running across that, so a stood-in container still
// runs; the operator's process and kube-vip's election did not survive,
// and are restarted.
func (k *Kubelet) state(p *corev1.Pod) *podState {
	k.mu.Lock()
	defer k.mu.Unlock()
	if st, ok := k.pods[p.UID]; ok {
		return st
	}
	st := &podState{uid: p.UID, kind: kindOf(p), startTime: apiNow()}
	if len(p.Spec.Containers) > 0 {
		st.ref = fmt.Sprintf("container=%s pod=%s_%s(%s)", p.Spec.Containers[0].Name, p.Name, p.Namespace, p.UID)
	}
	if p.Status.StartTime != nil {
		st.startTime = *p.Status.StartTime
	}
	if cs := p.Status.ContainerStatuses; len(cs) > 0 {
		st.restarts, st.everStarted = cs[0].RestartCount, cs[0].State.Running != nil || cs[0].LastTerminationState.Terminated != nil
		if r := cs[0].State.Running; r != nil && st.kind != binary && st.kind != kubeVIP {
			t := r.StartedAt
			st.started, st.ready = &t, cs[0].Ready
		}
		st.last = cs[0].LastTerminationState.Terminated
		// After a reboot no container survived: the kubelet finds each
		// pod's sandbox gone ("Pod sandbox changed, it will be killed and
		// re-created") and starts its containers again; the one that
		// ran ended as containerd reports a task it lost (exit 255,
		// reason Unknown).
		if r := cs[0].State.Running; r != nil && k.rebooted {
			st.last = &corev1.ContainerStateTerminated{ExitCode: 255, Reason: "Unknown", StartedAt: r.StartedAt, FinishedAt: metav1.NewTime(time.Now().Truncate(time.Second))}
			st.started, st.ready = nil, false
		}
	}
	k.pods[p.UID] = st
	return st
}

func (k *Kubelet) forget(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pods, uid)
}

// syncPod runs one pod one step on and writes its status.
func (k *Kubelet) syncPod(ctx context.Context, p *corev1.Pod) error {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		// A finished pod's sandbox goes; its status keeps its address.
		k.teardown(p)
		return nil
	}
	st := k.state(p)
	if p.DeletionTimestamp != nil {
		// The containers are stopped, then the pod is deleted for good,
		// as the kubelet's status manager does once they are gone.
		st.stop()
		k.teardown(p)
		zero := int64(0)
		err := k.CS.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete: %w", err)
		}
		k.forget(p.UID)
		return nil
	}
	if len(p.Spec.Containers) == 0 {
		return nil
	}
	now := time.Now()
	if st.ip == "" {
		if err := k.sandbox(p, st); err != nil {
			// No sandbox, no container: the pod waits in
			// ContainerCreating, as the kubelet's FailedCreatePodSandBox.
			st.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			if werr := k.writeStatus(ctx, p, st); werr != nil {
				return werr
			}
			return err
		}
	}
	switch st.kind {
	case binary:
		k.runBinary(ctx, p, st, now)
	case provider:
		k.runProvider(ctx, p, st, now)
	case helmJob:
		k.runHelm(ctx, p, st, now)
	case kubeVIP:
		k.runKubeVIP(ctx, p, st, now)
	default:
		if st.started == nil {
			st.start(now)
			st.ready = true
		}
	}
	return k.writeStatus(ctx, p, st)
}

// writeStatus posts the pod's status as the kubelet's status manager
// does, when it differs from what the API holds.
func (k *Kubelet) writeStatus(ctx context.Context, p *corev1.Pod, st *podState) error {
	want := k.podStatus(p, st, apiNow())
	if equality.Semantic.DeepEqual(p.Status, want) {
		return nil
	}
	p = p.DeepCopy()
	p.Status = want
	_, err := k.CS.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed: the next sync sees it anew
	}
	return err
}

// podStatus is the status a kubelet writes for p: its phase, conditions,
// addresses (its sandbox's, or the node's on the host's network) and
// container statuses.
func (k *Kubelet) podStatus(p *corev1.Pod, st *podState, now metav1.Time) corev1.PodStatus {
	s := *p.Status.DeepCopy()
	s.Phase = corev1.PodPending
	if st.everStarted {
		s.Phase = corev1.PodRunning
	}
	if st.done != nil {
		s.Phase = corev1.PodSucceeded
		if st.done.ExitCode != 0 {
			s.Phase = corev1.PodFailed
		}
	}
	s.HostIP, s.HostIPs = k.IP, []corev1.HostIP{{IP: k.IP}}
	if st.ip != "" {
		s.PodIP, s.PodIPs = st.ip, []corev1.PodIP{{IP: st.ip}}
	}
	start := st.startTime
	s.StartTime = &start
	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	ready, notReady := corev1.ConditionTrue, ""
	if !st.ready {
		ready, notReady = corev1.ConditionFalse, fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	}
	cond := func(t corev1.PodConditionType, status corev1.ConditionStatus, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: now}
		for _, old := range p.Status.Conditions {
			if old.Type == t && old.Status == status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	reason := ""
	if notReady != "" {
		reason = "ContainersNotReady"
	}
	sandbox := corev1.ConditionTrue
	if st.ip == "" {
		sandbox = corev1.ConditionFalse
	}
	if st.done != nil {
		// A finished pod's sandbox is gone; its readiness says why.
		sandbox, reason, notReady = corev1.ConditionFalse, "PodCompleted", ""
		if st.done.ExitCode != 0 {
			reason = "PodFailed"
		}
	}
	conds := []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, sandbox, "", ""),
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", ""),
		cond(corev1.PodReady, ready, reason, notReady),
		cond(corev1.ContainersReady, ready, reason, notReady),
	}
	for _, old := range p.Status.Conditions {
		if old.Type == corev1.PodScheduled {
			conds = append(conds, old)
		}
	}
	s.Conditions = conds
	s.ContainerStatuses = nil
	for i, c := range p.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), RestartCount: st.restarts, Ready: st.ready}
		started := st.started != nil
		cs.Started = &started
		switch {
		case st.done != nil:
			d := *st.done
			d.ContainerID = containerID(p.UID, c.Name, st.restarts)
			cs.State.Terminated = &d
		case st.started != nil:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: *st.started}
			cs.ContainerID = containerID(p.UID, c.Name, st.restarts)
		case st.waiting != nil:
			w := *st.waiting
			cs.State.Waiting = &w
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if st.last != nil && i == 0 {
			l := *st.last
			cs.LastTerminationState.Terminated = &l
			if l.ContainerID == "" {
				cs.LastTerminationState.Terminated.ContainerID = containerID(p.UID, c.Name, st.restarts-1)
			}
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	return s
}

// apiNow is now as the API keeps a time (whole seconds), so that a
// status compares equal to what was written.
func apiNow() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

// imageID is the image's digest as containerd reports it.
func imageID(image string) string {
	name := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		name = image[:i]
	}
	s := sha256.Sum256([]byte(image))
	return name + "@sha256:" + hex.EncodeToString(s[:])
}

// containerID is a container's ID, one per start.
func containerID(uid types.UID, name string, restart int32) string {
	s := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", uid, name, restart)))
	return "containerd://" + hex.EncodeToString(s[:])
}
