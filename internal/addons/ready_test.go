package addons

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/kube"
)

// TestReadyRetriesAFailedAttempt: a failed attempt of the helm-install Job
// is waited through (helm-controller retries it), reported with helm's
// message; only a Job that failed for good ends the wait at once; a Job
// that completed after failed attempts is complete.
func TestReadyRetriesAFailedAttempt(t *testing.T) {
	c := CertManager(config.Chart{Repo: config.DefaultCertManagerRepo, Version: config.DefaultCertManager})
	hc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
		"metadata": map[string]any{"name": c.Name, "namespace": ChartNamespace},
		"spec":     map[string]any{"version": c.Version, "repo": c.Repo, "valuesContent": strings.TrimRight(c.ValuesContent, "\n")},
	}}
	job := func(conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "helm-install-" + c.Name, Namespace: ChartNamespace, UID: "j1"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "helm",
				Env: []corev1.EnvVar{{Name: "VERSION", Value: c.Version}, {Name: "REPO", Value: c.Repo}}}}}}},
			Status: batchv1.JobStatus{Conditions: conds}}
	}
	failedPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "helm-install-cert-manager-x", Namespace: ChartNamespace,
		Labels: map[string]string{"job-name": "helm-install-" + c.Name, "controller-uid": "j1"}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "helm",
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "Installing helm chart\nError: INSTALLATION FAILED: boom"}}}}}}
	// klipper-helm's container writes no termination message: helm's
	// words are read from its log, the previous container's.
	noMessage := failedPod.DeepCopy()
	noMessage.Status.ContainerStatuses[0].LastTerminationState.Terminated.Message = ""
	available := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: c.Deployment, Namespace: c.TargetNamespace},
		Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}}
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	failed := batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}

	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		done    bool
		why     string
		err     string
	}{
		{name: "an attempt failed", objects: []runtime.Object{job(), failedPod},
			why: "Job helm-install-cert-manager failed, helm-controller retries it: Error: INSTALLATION FAILED: boom"},
		{name: "the Job gave up", objects: []runtime.Object{job(failed), failedPod},
			err: "Job kube-system/helm-install-cert-manager failed; the end of Pod helm-install-cert-manager-x's log:\n  Installing helm chart\n  Error: INSTALLATION FAILED: boom\n  BackoffLimitExceeded: Job has reached the specified backoff limit"},
		{name: "the message from the log", objects: []runtime.Object{job(), noMessage},
			why: "Job helm-install-cert-manager failed, helm-controller retries it: fake logs"},
		{name: "completed after failed attempts", objects: []runtime.Object{job(complete), failedPod, available}, done: true},
		{name: "running", objects: []runtime.Object{job()}, why: "Job helm-install-cert-manager running helm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typed := fake.NewClientset(tc.objects...)
			cl := kube.ReaderOf(typed,
				dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{HelmChartGVR: "HelmChartList"}, hc))
			r := &Ready{C: c}
			done, why, err := r.Observe(context.Background(), cl)
			var jf *JobFailedError
			switch {
			case tc.err != "":
				if !errors.As(err, &jf) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
			case err != nil || done != tc.done || why != tc.why:
				t.Errorf("Observe = %v, %q, %v; want %v, %q", done, why, err, tc.done, tc.why)
			}
			if tc.name == "the message from the log" {
				var logs []corev1.PodLogOptions
				for _, a := range typed.Actions() {
					if g, ok := a.(k8stesting.GenericAction); ok && a.GetSubresource() == "log" {
						logs = append(logs, *g.GetValue().(*corev1.PodLogOptions))
					}
				}
				if len(logs) != 1 || !logs[0].Previous || logs[0].Container != "helm" || logs[0].TailLines == nil || *logs[0].TailLines != logTailLines {
					t.Errorf("log reads = %+v, want one of the previous helm container's last %d lines", logs, logTailLines)
				}
			}
			if tc.name == "an attempt failed" && (r.failing == nil || r.failing.final) {
				t.Errorf("the failed attempt is not kept for the error at the bound: %+v", r.failing)
			}
		})
	}
}
