// Package simkube holds what the lab's own stand-ins (k3s's, kube-vip's,
// the kubelet's) share: leader election on a Lease, applying a CRD and
// waiting until it is Established, Events worded as the real components
// word them.
package simkube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

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
