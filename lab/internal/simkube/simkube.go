// Package simkube holds what the lab's own controllers (its
// helm-controller, kube-vip, the deploy controller) share: watches and
// loops, leader election, applying CRDs and Deployments, Events worded as
// the real components word them. Upstream's controller manager and the
// lab's kubelet take a Deployment from there.
package simkube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Trigger coalesces "something changed" signals for a level-triggered
// reconcile loop: many events while a reconcile runs make one more pass.
type Trigger chan struct{}

// NewTrigger returns a trigger that has fired once, so the loop starts
// with a full pass.
func NewTrigger() Trigger {
	t := make(Trigger, 1)
	t <- struct{}{}
	return t
}

// Fire asks for one more reconcile pass.
func (t Trigger) Fire() {
	select {
	case t <- struct{}{}:
	default:
	}
}

// Watch fires t on every change to gvr's objects in all namespaces, until
// ctx ends; a watch the server closes is re-established.
func Watch(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, t Trigger) {
	for ctx.Err() == nil {
		list, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			// The resource may not exist yet (a CRD a chart installs).
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		w, err := dc.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			continue
		}
		for range w.ResultChan() {
			t.Fire()
		}
		w.Stop()
		t.Fire()
	}
}

// Loop runs reconcile on every trigger and every resync, until ctx ends.
func Loop(ctx context.Context, t Trigger, resync time.Duration, reconcile func(context.Context)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-t:
		case <-time.After(resync):
		}
		reconcile(ctx)
	}
}

// Event records an Event on obj as component would.
func Event(ctx context.Context, cs kubernetes.Interface, obj corev1.ObjectReference, component, typ, reason, msg string) {
	now := metav1.Now()
	ns := obj.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	_, _ = cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: obj.Name + ".", Namespace: ns},
		InvolvedObject: obj, Type: typ, Reason: reason, Message: msg,
		Source:         corev1.EventSource{Component: component},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
}

// EnsureNamespace creates ns if it does not exist.
func EnsureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Deployment is a Deployment the simulators make, with one container.
type Deployment struct {
	Namespace, Name string
	Labels          map[string]string
	Image           string
	Owner           *metav1.OwnerReference
	// Pod, when set, is the pod template's spec as the chart renders it
	// (its container's image is Image).
	Pod *corev1.PodSpec
	// Selector, when set, is the chart's selector (else the instance
	// label).
	Selector map[string]string
}

// ApplyDeployment creates or updates d; upstream's deployment controller
// and the lab's kubelet take it from there.
func ApplyDeployment(ctx context.Context, cs kubernetes.Interface, d Deployment) error {
	one := int32(1)
	sel := d.Selector
	if sel == nil {
		sel = map[string]string{"app.kubernetes.io/instance": d.Name}
	}
	podLabels := map[string]string{}
	for k, v := range d.Labels {
		podLabels[k] = v
	}
	for k, v := range sel {
		podLabels[k] = v
	}
	pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: d.Image}}}
	if d.Pod != nil {
		pod = *d.Pod
	}
	want := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: d.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       pod,
			},
		},
	}
	if d.Owner != nil {
		want.OwnerReferences = []metav1.OwnerReference{*d.Owner}
	}
	deps := cs.AppsV1().Deployments(d.Namespace)
	cur, err := deps.Get(ctx, d.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur, err = deps.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		cur.Labels, cur.OwnerReferences, cur.Spec = want.Labels, want.OwnerReferences, want.Spec
		cur, err = deps.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("apply Deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// Available reports a Deployment's Available condition.
func Available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func shortHash(s string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	out := make([]byte, 10)
	for i := range out {
		out[i] = alphabet[h%uint32(len(alphabet))]
		h = h/uint32(len(alphabet)) + uint32(i)*2654435761
	}
	return string(out)
}

// Suffix is a pod-name suffix like the ones the API server generates.
func Suffix(seed string) string { return shortHash(seed)[:5] }

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyCRD creates or updates a CRD with server-side apply as manager, and
// waits, for at most within, until it is Established so objects of its
// kind can be applied.
func ApplyCRD(ctx context.Context, dc dynamic.Interface, u *unstructured.Unstructured, manager string, within time.Duration) error {
	if _, err := dc.Resource(crdGVR).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: manager, Force: true}); err != nil {
		return fmt.Errorf("apply CRD %s: %w", u.GetName(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		got, err := dc.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not established", u.GetName())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StatusError is an HTTP answer other than 200 OK.
type StatusError struct{ Status string }

func (e *StatusError) Error() string { return e.Status }

// Fetch GETs url (bounded to 30 s) and returns the body of a 200 answer,
// or a *StatusError with the answer's status line.
func Fetch(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Status: resp.Status}
	}
	return io.ReadAll(resp.Body)
}

// Election is a Lease the lab's simulated controllers elect a leader by,
// with client-go's leaderelection as the real ones do.
type Election struct {
	Namespace, Name, Identity string
	Lease, Renew, Retry       time.Duration
}

// Lead runs onStart while the identity holds the lease and onStop when it
// loses it, standing again until ctx ends; the lease is released then.
func Lead(ctx context.Context, cs kubernetes.Interface, e Election, onStart func(context.Context), onStop func()) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: e.Lease, RenewDeadline: e.Renew, RetryPeriod: e.Retry, ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: onStart, OnStoppedLeading: onStop},
		})
	}
}
