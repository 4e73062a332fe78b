package addons

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// ChartTimeout is the default bound of the wait for a chart to become
// usable. k3s picks a changed manifest up within 15 s; the rest is the
// helm job (and its retries) and the chart's Deployments.
const ChartTimeout = 10 * time.Minute

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// HelmChartGVR is k3s's HelmChart resource.
var HelmChartGVR = schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmcharts"}

// JobFailedError is a helm-install Job that failed: its Pod, the tail of
// the failed container's log (helm's own error is its last line), and the
// Events of the Job and its Pod.
type JobFailedError struct {
	Chart, Job, Pod, Message string
	Events                   []string
}

func (e *JobFailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HelmChart %s: Job %s/%s failed", e.Chart, ChartNamespace, e.Job)
	if e.Pod != "" {
		fmt.Fprintf(&b, "; the end of Pod %s's log:\n  %s", e.Pod, strings.ReplaceAll(strings.TrimSpace(e.Message), "\n", "\n  "))
	} else {
		fmt.Fprintf(&b, ": %s", strings.TrimSpace(e.Message))
	}
	if len(e.Events) > 0 {
		b.WriteString("\nevents:\n  " + strings.Join(e.Events, "\n  "))
	}
	return b.String()
}

// Ready says when a chart is usable: k3s applied its HelmChart, the
// helm-install Job for that spec completed, and the chart's key Deployment
// is Available. HelmChart status only ever says JobCreated or Failed, so
// it is not what this waits on. A failed attempt of the Job is not the
// end: helm-controller's Job retries (backoffLimit 1000), so the wait goes
// on, reporting helm's message, until the Job completes, gives up, or the
// wait's bound passes. The Manifest step waits with it.
type Ready struct {
	C Chart
	// failing is the Job's last failed attempt seen, for the error at the
	// wait's bound.
	failing *jobFailure
}

// wait blocks until the chart is usable, its Job gives up, or ctx's
// deadline (the step's bound) passes.
func (s *Ready) wait(ctx context.Context, cl *kube.Reader, bound time.Duration) error {
	last := "nothing observed yet"
	err := kube.Until(ctx, s.watches(cl), func(ctx context.Context) (bool, error) {
		ok, why, err := s.Observe(ctx, cl)
		if why != last && why != "" {
			step.Progress(ctx, fmt.Sprintf("%s: %s", s.C.Name, why))
			last = why
		}
		return ok, err
	})
	var jf *JobFailedError
	if err == nil || errors.As(err, &jf) || ctx.Err() == nil {
		return err
	}
	if f := s.failing; f != nil {
		// The Events are read once, for the error: the retries are
		// reported as they happen by their message alone.
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return fmt.Errorf("%s %s not usable after %s: its helm-install Job kept failing while helm-controller retried it: %w",
			s.C.Name, s.C.Version, bound, f.err(bg, cl, s.C.Name))
	}
	return step.Timeout(bound, ctx.Err(), "%s %s not usable after %s: %s", s.C.Name, s.C.Version, bound, last)
}

func (s *Ready) note() string {
	return fmt.Sprintf("%s %s installed; Deployment %s/%s Available", s.C.Name, s.C.Version, s.C.TargetNamespace, s.C.Deployment)
}

func (s *Ready) job() string { return "helm-install-" + s.C.Name }

func (s *Ready) watches(cl *kube.Reader) []kube.WatchFunc {
	byName := func(n string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", n).String()}
	}
	return []kube.WatchFunc{
		kube.WatchResource(cl, HelmChartGVR, ChartNamespace, byName(s.C.Name)),
		func(ctx context.Context) (watch.Interface, error) {
			return cl.Jobs(ChartNamespace).Watch(ctx, byName(s.job()))
		},
		func(ctx context.Context) (watch.Interface, error) {
			return cl.Pods(ChartNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: "job-name=" + s.job()})
		},
		func(ctx context.Context) (watch.Interface, error) {
			return cl.Deployments(s.C.TargetNamespace).Watch(ctx, byName(s.C.Deployment))
		},
	}
}

// Observe says whether the chart is usable, and if not, what it waits for.
func (s *Ready) Observe(ctx context.Context, cl *kube.Reader) (bool, string, error) {
	hc, err := cl.Resource(HelmChartGVR).Namespace(ChartNamespace).Get(ctx, s.C.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "k3s has not applied " + s.C.Path() + " yet", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read HelmChart %s: %w", s.C.Name, err)
	}
	field := func(name string) string {
		v, _, _ := unstructured.NestedString(hc.Object, "spec", name)
		return v
	}
	if field("version") != s.C.Version || field("repo") != s.C.Repo || field("valuesContent") != strings.TrimRight(s.C.ValuesContent, "\n") {
		return false, "k3s has not applied the new " + s.C.Path() + " yet", nil
	}
	job, err := cl.Jobs(ChartNamespace).Get(ctx, s.job(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "helm-controller has not created Job " + s.job() + " yet", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read Job %s: %w", s.job(), err)
	}
	if env := jobEnv(job); env["VERSION"] != s.C.Version || env["REPO"] != s.C.Repo {
		return false, fmt.Sprintf("Job %s still runs the previous spec (%s)", s.job(), env["VERSION"]), nil
	}
	if !jobComplete(job) {
		f, err := s.jobFailure(ctx, cl, job)
		switch {
		case err != nil:
			return false, "", err
		case f != nil && f.final:
			return false, "", f.err(ctx, cl, s.C.Name)
		case f != nil:
			s.failing = f
			return false, fmt.Sprintf("Job %s failed, helm-controller retries it: %s", s.job(), lastLine(f.message)), nil
		}
		return false, "Job " + s.job() + " running helm", nil
	}
	d, err := cl.Deployments(s.C.TargetNamespace).Get(ctx, s.C.Deployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("Deployment %s/%s does not exist yet", s.C.TargetNamespace, s.C.Deployment), nil
	}
	if err != nil {
		return false, "", err
	}
	if ok, why := DeploymentAvailable(d); !ok {
		return false, fmt.Sprintf("Deployment %s/%s not Available: %s", s.C.TargetNamespace, s.C.Deployment, why), nil
	}
	return true, "", nil
}

func jobEnv(j *batchv1.Job) map[string]string {
	env := map[string]string{}
	for _, c := range j.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
	}
	return env
}

func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobFailure is a failed attempt of a helm-install Job: helm's message
// and the objects whose Events explain it. final means the Job itself
// failed (its backoffLimit is spent): nothing will retry it.
type jobFailure struct {
	job, pod string
	message  string
	final    bool
	objects  []metav1.Object
}

func (f *jobFailure) err(ctx context.Context, cl *kube.Reader, chart string) *JobFailedError {
	return &JobFailedError{Chart: chart, Job: f.job, Pod: f.pod, Message: f.message, Events: Events(ctx, cl, ChartNamespace, f.objects...)}
}

// jobFailure returns the Job's failure, if it failed or its helm container
// last exited non-zero; nil while no attempt has failed. Helm's own words
// come first: the failed container's log; the Job's reason when it gave
// up follows.
func (s *Ready) jobFailure(ctx context.Context, cl *kube.Reader, j *batchv1.Job) (*jobFailure, error) {
	f := &jobFailure{job: j.Name}
	gaveUp := ""
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			gaveUp, f.final = c.Reason+": "+c.Message, true
		}
	}
	pods, err := cl.Pods(ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j.Name})
	if err != nil {
		return nil, fmt.Errorf("list the Pods of Job %s: %w", j.Name, err)
	}
	f.objects = []metav1.Object{j}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels["controller-uid"] != "" && p.Labels["controller-uid"] != string(j.UID) {
			continue
		}
		f.objects = append(f.objects, p)
		for _, cs := range p.Status.ContainerStatuses {
			for i, st := range []corev1.ContainerState{cs.State, cs.LastTerminationState} {
				if t := st.Terminated; t != nil && t.ExitCode != 0 && f.message == "" {
					f.pod, f.message = p.Name, t.Message
					if f.message == "" {
						// klipper-helm writes no termination message:
						// helm's error is in the container's log, read
						// through the API as kubectl logs reads it (the
						// previous container's when it was restarted).
						f.message = logTail(ctx, cl, p.Name, cs.Name, i == 1)
						if f.message == "" && i == 0 {
							// Restarted between the Pod's read and
							// the log's (helm-controller's Job retries
							// at once): the run that ended is the
							// previous container now.
							f.message = logTail(ctx, cl, p.Name, cs.Name, true)
						}
					}
					if f.message == "" {
						f.message = fmt.Sprintf("container %s exited %d (%s)", cs.Name, t.ExitCode, t.Reason)
					}
				}
			}
		}
	}
	if gaveUp != "" {
		f.message = strings.TrimSpace(f.message + "\n" + gaveUp)
	}
	if f.message == "" {
		return nil, nil
	}
	return f, nil
}

// logTailLines is how much of a failed helm container's log an error
// shows: helm's error and what it did before.
const logTailLines = 10

// logTail is the end of a container's log, empty when it cannot be read.
func logTail(ctx context.Context, cl *kube.Reader, pod, container string, previous bool) string {
	n := int64(logTailLines)
	b, err := cl.Pods(ChartNamespace).Logs(ctx, pod, &corev1.PodLogOptions{Container: container, Previous: previous, TailLines: &n})
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// lastLine is the last line of s: helm prints its error last.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Events lists the Events of the given objects in ns (this incarnation of
// each: an earlier object of the same name has another UID), oldest first,
// as "Type Reason (Kind/name): message"; repeats of one line are one line
// with their count, "(x8)", as kubectl describe counts them.
func Events(ctx context.Context, cl *kube.Reader, ns string, objs ...metav1.Object) []string {
	type ev struct {
		at    time.Time
		line  string
		count int32
	}
	var all []ev
	for _, o := range objs {
		list, err := cl.Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", o.GetName()).String()})
		if err != nil {
			continue
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID != "" && e.InvolvedObject.UID != o.GetUID() {
				continue
			}
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			all = append(all, ev{at, fmt.Sprintf("%s %s (%s/%s): %s", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, strings.TrimSpace(e.Message)), max(e.Count, 1)})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	return groupEvents(all, func(e ev) (string, int32) { return e.line, e.count })
}

// groupEvents folds repeated lines into the first one, with the sum of
// their counts when it is more than one.
func groupEvents[E any](events []E, line func(E) (string, int32)) []string {
	var order []string
	counts := map[string]int32{}
	for _, e := range events {
		l, n := line(e)
		if _, seen := counts[l]; !seen {
			order = append(order, l)
		}
		counts[l] += n
	}
	out := make([]string, len(order))
	for i, l := range order {
		out[i] = l
		if counts[l] > 1 {
			out[i] = fmt.Sprintf("%s (x%d)", l, counts[l])
		}
	}
	return out
}

// DeploymentAvailable reads a Deployment's Available condition.
func DeploymentAvailable(d *appsv1.Deployment) (bool, string) {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return false, "no Available condition yet"
}
