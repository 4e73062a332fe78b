package capi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodState(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, tc := range []struct {
		name string
		pod  corev1.PodStatus
		want string
	}{
		{"ready", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: running}}}, "Running"},
		{"not ready", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{State: running}}}, "Running, not ready"},
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, "Pending"},
		{"crash loop", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{RestartCount: 2,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "a\nb\nc\nunable to initialize Proxmox client: 401 Unauthorized\n"}}}}},
			"CrashLoopBackOff, not ready, 2 restarts, last exit 1 (Error): b\nc\nunable to initialize Proxmox client: 401 Unauthorized"},
	} {
		if got := PodState(&corev1.Pod{Status: tc.pod}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
