// Package helmctl is the lab's helm-controller, the one k3s embeds
// (docs/upstream.md §3): for each HelmChart it runs the helm-install-<name>
// Job in the chart's namespace, and the Job does what klipper-helm's entry
// script does: resolve repo, chart and version against the repository's
// index (the lab's mirror), then install or upgrade the release. Until the
// lab runs upstream's helm-controller and klipper-helm (issue #31, with
// the controller manager's Job controller off meanwhile), "running the
// Job" is done here: its Pod is created, its container's outcome written
// as the kubelet would, and the Job's status as the Job controller would.
package helmctl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/lab/internal/pki"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// GVR is the HelmChart resource.
var GVR = schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmcharts"}

// RetryDelay is how long a failed install attempt waits before the Job's
// container is restarted (restartPolicy OnFailure; the kubelet's back-off
// starts at 10 s).
const RetryDelay = 10 * time.Second

// Controller reconciles HelmCharts.
type Controller struct {
	CS     kubernetes.Interface
	DC     dynamic.Interface
	Node   string
	LabDir string // faults/ and crds/
	HTTP   *http.Client
	Log    io.Writer
	// WebhookCA signs the operator webhooks' serving certificate, in place
	// of cert-manager's self-signed Issuer.
	WebhookCA *pki.CA

	mu   sync.Mutex
	next map[string]time.Time // ns/name -> when a failing Job retries
}

// Run reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.next = map[string]time.Time{}
	t := simkube.NewTrigger()
	go simkube.Watch(ctx, c.DC, GVR, t)
	simkube.Loop(ctx, t, 2*time.Second, c.reconcileAll)
}

func (c *Controller) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), "helm-controller: "+fmt.Sprintf(format, args...))
	}
}

func (c *Controller) reconcileAll(ctx context.Context) {
	list, err := c.DC.Resource(GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		if err := c.reconcile(ctx, &list.Items[i]); err != nil {
			c.logf("reconcile %s/%s: %v", list.Items[i].GetNamespace(), list.Items[i].GetName(), err)
		}
	}
}

// Spec is the part of a HelmChart's spec the lab acts on.
type Spec struct {
	Chart           string `json:"chart"`
	Repo            string `json:"repo"`
	Version         string `json:"version"`
	TargetNamespace string `json:"targetNamespace"`
	CreateNamespace bool   `json:"createNamespace"`
	ValuesContent   string `json:"valuesContent"`
}

func specOf(u *unstructured.Unstructured) (Spec, string) {
	raw, _, _ := unstructured.NestedMap(u.Object, "spec")
	b, _ := json.Marshal(raw)
	var s Spec
	_ = json.Unmarshal(b, &s)
	if s.TargetNamespace == "" {
		s.TargetNamespace = u.GetNamespace()
	}
	// The config hash covers the whole spec, so any change replaces the
	// Job (docs/upstream.md §3.4).
	sum := sha256.Sum256(b)
	return s, "SHA256=" + strings.ToUpper(hex.EncodeToString(sum[:]))
}

const (
	hashAnnotation = "helmcharts.helm.cattle.io/configHash"
	chartLabel     = "helmcharts.helm.cattle.io/chart"
)

func (c *Controller) reconcile(ctx context.Context, hc *unstructured.Unstructured) error {
	if hc.GetDeletionTimestamp() != nil {
		return nil
	}
	ns, name := hc.GetNamespace(), hc.GetName()
	if hc.GetAnnotations()["helmcharts.cattle.io/managed-by"] == "" {
		a := hc.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["helmcharts.cattle.io/managed-by"] = "helm-controller"
		hc.SetAnnotations(a)
		u, err := c.DC.Resource(GVR).Namespace(ns).Update(ctx, hc, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		hc = u
	}
	spec, hash := specOf(hc)
	jobName := "helm-install-" + name
	jobs := c.CS.BatchV1().Jobs(ns)
	job, err := jobs.Get(ctx, jobName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && job.Spec.Template.Annotations[hashAnnotation] != hash {
		// A spec change: the old Job goes (with its Pods: the lab has no
		// garbage collector), a new one runs helm upgrade.
		if err := c.deleteJob(ctx, job); err != nil {
			return err
		}
		job = nil
	} else if err != nil {
		job = nil
	}
	if job == nil {
		if job, err = c.createJob(ctx, hc, spec, hash); err != nil {
			c.setStatus(ctx, hc, jobName, []map[string]any{
				cond("JobCreated", "False", "", ""), cond("Failed", "True", "Job create failed", "Failed to generate Job: "+err.Error())})
			return err
		}
		c.setStatus(ctx, hc, jobName, []map[string]any{
			cond("JobCreated", "True", "Job created", fmt.Sprintf("Applying HelmChart using Job %s/%s", ns, jobName)), cond("Failed", "False", "", "")})
		source := spec.Repo
		if source == "" {
			source = spec.Chart
		}
		simkube.Event(ctx, c.CS, ref(hc), "helm-controller", "Normal", "ApplyJob",
			fmt.Sprintf("Applying HelmChart from %s using Job %s/%s ", source, ns, jobName))
		c.mu.Lock()
		delete(c.next, ns+"/"+name)
		c.mu.Unlock()
	}
	if finished(job) {
		return nil
	}
	c.mu.Lock()
	due := c.next[ns+"/"+name]
	c.mu.Unlock()
	if time.Now().Before(due) {
		return nil
	}
	return c.attempt(ctx, hc, spec, job)
}

func ref(u *unstructured.Unstructured) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID()}
}

func cond(typ, status, reason, msg string) map[string]any {
	m := map[string]any{"type": typ, "status": status}
	if reason != "" {
		m["reason"] = reason
	}
	if msg != "" {
		m["message"] = msg
	}
	return m
}

func (c *Controller) setStatus(ctx context.Context, hc *unstructured.Unstructured, jobName string, conds []map[string]any) {
	cur, err := c.DC.Resource(GVR).Namespace(hc.GetNamespace()).Get(ctx, hc.GetName(), metav1.GetOptions{})
	if err != nil {
		return
	}
	list := make([]any, len(conds))
	for i, m := range conds {
		list[i] = m
	}
	_ = unstructured.SetNestedField(cur.Object, jobName, "status", "jobName")
	_ = unstructured.SetNestedSlice(cur.Object, list, "status", "conditions")
	_, _ = c.DC.Resource(GVR).Namespace(hc.GetNamespace()).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
}

func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (c *Controller) deleteJob(ctx context.Context, job *batchv1.Job) error {
	bg := metav1.DeletePropagationBackground
	if err := c.CS.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return c.deletePods(ctx, job.Namespace, job.Name)
}

func (c *Controller) deletePods(ctx context.Context, ns, jobName string) error {
	zero := int64(0)
	pods, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + jobName})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if err := c.CS.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// createJob makes the Job and what it runs with: ServiceAccount,
// cluster-admin binding, values Secret (docs/upstream.md §3.3).
func (c *Controller) createJob(ctx context.Context, hc *unstructured.Unstructured, s Spec, hash string) (*batchv1.Job, error) {
	ns, name := hc.GetNamespace(), hc.GetName()
	owner := metav1.OwnerReference{APIVersion: "helm.cattle.io/v1", Kind: "HelmChart", Name: name, UID: hc.GetUID()}
	labels := map[string]string{chartLabel: name}
	sa := "helm-" + name
	if _, err := c.CS.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: sa, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if _, err := c.CS.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "helm-" + ns + "-" + name, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	secrets := c.CS.CoreV1().Secrets(ns)
	values := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "chart-values-" + name, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Type: "helmcharts.helm.cattle.io/values", Data: map[string][]byte{"values-01_HelmChart.yaml": []byte(s.ValuesContent)}}
	if _, err := secrets.Create(ctx, values, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if _, err := secrets.Update(ctx, values, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	args := []string{"install"}
	if s.TargetNamespace != "" {
		args = append(args, "--namespace", s.TargetNamespace)
	}
	if s.CreateNamespace {
		args = append(args, "--create-namespace")
	}
	if s.Version != "" {
		args = append(args, "--version", s.Version)
	}
	env := []corev1.EnvVar{{Name: "NAME", Value: name}, {Name: "VERSION", Value: s.Version}, {Name: "REPO", Value: s.Repo},
		{Name: "HELM_DRIVER", Value: "secret"}, {Name: "CHART_NAMESPACE", Value: ns}, {Name: "CHART", Value: s.Chart},
		{Name: "HELM_VERSION"}, {Name: "TARGET_NAMESPACE", Value: s.TargetNamespace}, {Name: "FAILURE_POLICY", Value: "reinstall"},
		{Name: "SERVER_SIDE", Value: "true"}, {Name: "CONFIG_HASH", Value: hash}}
	backoff := int32(1000)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "helm-install-" + name, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{hashAnnotation: hash}},
				Spec: corev1.PodSpec{
					RestartPolicy:      corev1.RestartPolicyOnFailure,
					ServiceAccountName: sa,
					PriorityClassName:  "system-cluster-critical",
					NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
					Containers: []corev1.Container{{Name: "helm", Image: "rancher/klipper-helm:v0.9.8-build20250709", Args: args, Env: env,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						VolumeMounts:             []corev1.VolumeMount{{Name: "values", MountPath: "/config"}}}},
					Volumes: []corev1.Volume{{Name: "values", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "chart-values-" + name}}}},
				},
			},
		},
	}
	return c.CS.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
}

// attempt runs the Job's container once: klipper-helm's install or
// upgrade. Success completes the Job; failure leaves the container
// restarting, as backoffLimit 1000 and restartPolicy OnFailure do.
func (c *Controller) attempt(ctx context.Context, hc *unstructured.Unstructured, s Spec, job *batchv1.Job) error {
	pod, err := c.pod(ctx, job)
	if err != nil {
		return err
	}
	res := c.helm(ctx, hc.GetName(), s)
	now := metav1.Now()
	pods := c.CS.CoreV1().Pods(job.Namespace)
	if res.err != nil {
		c.logf("helm-install-%s: %s", hc.GetName(), res.err)
		restarts := int32(0)
		if len(pod.Status.ContainerStatuses) == 1 {
			restarts = pod.Status.ContainerStatuses[0].RestartCount + 1
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "helm", Image: job.Spec.Template.Spec.Containers[0].Image, RestartCount: restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off 10s restarting failed container=helm pod=%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: res.log + res.err.Error() + "\n", StartedAt: now, FinishedAt: now}}}}
		// The kubelet records the back-off as it restarts the container.
		simkube.Event(ctx, c.CS, corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			"kubelet", "Warning", "BackOff", fmt.Sprintf("Back-off restarting failed container helm in pod %s_%s(%s)", pod.Name, pod.Namespace, pod.UID))
		if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.mu.Lock()
		c.next[hc.GetNamespace()+"/"+hc.GetName()] = time.Now().Add(RetryDelay)
		c.mu.Unlock()
		return nil
	}
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "helm", Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: res.log, StartedAt: now, FinishedAt: now}}}}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return err
	}
	start := job.Status.StartTime
	if start == nil {
		start = &job.CreationTimestamp
	}
	job.Status = batchv1.JobStatus{StartTime: start, CompletionTime: &now, Succeeded: 1, Ready: new(int32),
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
		}}
	if _, err := c.CS.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("complete Job %s: %w", job.Name, err)
	}
	simkube.Event(ctx, c.CS, corev1.ObjectReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, Namespace: job.Namespace, UID: job.UID},
		"job-controller", "Normal", "Completed", "Job completed")
	c.logf("helm-install-%s: %s", hc.GetName(), strings.TrimSpace(res.log))
	return nil
}

// pod returns the Job's Pod, creating it (as the Job controller would) on
// the lab's node.
func (c *Controller) pod(ctx context.Context, job *batchv1.Job) (*corev1.Pod, error) {
	pods := c.CS.CoreV1().Pods(job.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Labels["controller-uid"] == string(job.UID) {
			return &list.Items[i], nil
		}
	}
	tmpl := job.Spec.Template.DeepCopy()
	labels := map[string]string{"job-name": job.Name, "controller-uid": string(job.UID), "batch.kubernetes.io/job-name": job.Name, "batch.kubernetes.io/controller-uid": string(job.UID)}
	for k, v := range tmpl.Labels {
		labels[k] = v
	}
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-" + simkube.Suffix(string(job.UID)), Namespace: job.Namespace, Labels: labels, Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: tmpl.Spec,
	}
	p.Spec.NodeName = c.Node
	created, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Pod for Job %s: %w", job.Name, err)
	}
	simkube.Event(ctx, c.CS, corev1.ObjectReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, Namespace: job.Namespace, UID: job.UID},
		"job-controller", "Normal", "SuccessfulCreate", "Created pod: "+created.Name)
	return created, nil
}

// fault reads the helm-fail switch: on for every chart (empty value) or
// for the chart named in it.
func (c *Controller) fault(chart string) bool {
	b, err := os.ReadFile(filepath.Join(c.LabDir, "faults", "helm-fail"))
	if err != nil {
		return false
	}
	v := strings.TrimSpace(string(b))
	return v == "" || v == chart
}
