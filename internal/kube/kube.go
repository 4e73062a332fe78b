// Package kube talks to the management cluster's Kubernetes API through
// the SSH connection to the VM: the REST client's dialer opens
// 127.0.0.1:6443 from the VM's side, so the API port need not be reachable
// from the laptop, and the admin credentials (read from k3s.yaml over SSH)
// stay in memory.
package kube

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Dialer opens connections from the VM's side.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// restConfig reads k3s.yaml's bytes into a REST config that dials
// through d, with each request bounded by timeout.
func restConfig(kubeconfig []byte, d Dialer, timeout time.Duration) (*rest.Config, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse k3s.yaml: %w", err)
	}
	rc.Dial = d
	rc.UserAgent = "mgmtctl"
	rc.Timeout = timeout
	return rc, nil
}

// NewClient builds a clientset from k3s.yaml's bytes, dialling through d.
func NewClient(kubeconfig []byte, d Dialer) (kubernetes.Interface, error) {
	rc, err := restConfig(kubeconfig, d, 30*time.Second)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// NodeReady reports whether the node's Ready condition is True, and a
// description of its conditions when not.
func NodeReady(n *corev1.Node) (bool, string) {
	var parts []string
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
		}
		parts = append(parts, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	if len(parts) == 0 {
		return false, "the node reports no conditions yet"
	}
	return false, "no Ready condition (" + strings.Join(parts, ", ") + ")"
}

// WaitNodeReady watches the node until it is Ready or ctx ends; the error
// then says what was missing.
func WaitNodeReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	last := "the node is not registered yet"
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return waitErr(ctx, name, last, err)
		}
		for i := range list.Items {
			ok, why := NodeReady(&list.Items[i])
			if ok {
				return nil
			}
			last = why
		}
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return waitErr(ctx, name, last, err)
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if n, ok := ev.Object.(*corev1.Node); ok {
				ready, why := NodeReady(n)
				if ready {
					w.Stop()
					return nil
				}
				last = why
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return waitErr(ctx, name, last, ctx.Err())
		}
		// The watch ended (server timeout): list again and resume.
	}
}

func waitErr(ctx context.Context, name, last string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("node %s not Ready: %s", name, last)
	}
	return fmt.Errorf("watch node %s: %w", name, err)
}

// Cluster is the management cluster's API, typed and dynamic, reached
// through the VM.
type Cluster struct {
	Typed   kubernetes.Interface
	Dynamic dynamic.Interface
}

// NewCluster builds both clients from k3s.yaml's bytes, dialling through d.
func NewCluster(kubeconfig []byte, d Dialer) (*Cluster, error) {
	// A bound on every request, so a connection that went silent fails
	// instead of hanging; a watch cut by it is re-opened by Until.
	rc, err := restConfig(kubeconfig, d, time.Minute)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Cluster{Typed: cs, Dynamic: dc}, nil
}
