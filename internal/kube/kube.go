// Package kube talks to the management cluster's Kubernetes API through
// the SSH connection to the VM: the REST client's dialer opens
// 127.0.0.1:6443 from the VM's side, so the API port need not be reachable
// from the laptop, and the admin credentials (read from k3s.yaml over SSH)
// stay in memory.
package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		return nil, fmt.Errorf("parse the kubeconfig: %w", err)
	}
	rc.Dial = d
	rc.UserAgent = "mgmtctl"
	rc.Timeout = timeout
	return rc, nil
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

// WaitNodeReady waits (a watch, through Until) until the node is Ready or
// ctx ends; the error then says what was last seen. A node not registered
// yet, or deleted and registered again, and an API server that does not
// answer for a moment (k3s restarting) are waited through.
func WaitNodeReady(ctx context.Context, r *Reader, name string) error {
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	last := "the node is not registered yet"
	err := Until(ctx, []WatchFunc{func(ctx context.Context) (watch.Interface, error) { return r.Nodes().Watch(ctx, sel) }},
		func(ctx context.Context) (bool, error) {
			n, err := r.Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				last = "the node is not registered yet"
				return false, nil
			case err != nil:
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				last = "the API server did not answer: " + err.Error()
				return false, nil
			}
			ok, why := NodeReady(n)
			if !ok {
				last = why
			}
			return ok, nil
		})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("node %s not Ready: %s", name, last)
	}
	return err
}

// Cluster is the management cluster's API, typed and dynamic, reached
// through the VM: what the run's effect.Executor writes with. Steps read
// through a Reader.
type Cluster struct {
	Typed   kubernetes.Interface
	Dynamic dynamic.Interface
}

// NewCluster builds both clients from k3s.yaml's bytes, dialling through
// d. With dryRun, every write either client makes is a server-side dry run
// (see DryRunTransport): a Reader's (NewReader), in every mode; the run's
// Executor writes through a client without it.
//
// wrap, when given, wraps the transport (outermost last): the caller's
// view of a failed request, such as the SSH link it rode on being gone.
func NewCluster(kubeconfig []byte, d Dialer, dryRun bool, wrap ...func(http.RoundTripper) http.RoundTripper) (*Cluster, error) {
	// A bound on every request, so a connection that went silent fails
	// instead of hanging; a watch cut by it is re-opened by Until.
	rc, err := restConfig(kubeconfig, d, time.Minute)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	for _, w := range wrap {
		rc.Wrap(w)
	}
	if dryRun {
		// JSON bodies, so the transport can set dryRun in a DELETE's
		// options (the typed client would send them as protobuf).
		rc.ContentType = "application/json"
		rc.Wrap(DryRunTransport)
	}
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

// DryRunTransport makes every write that passes through rt a server-side
// dry run, so the API server runs admission, validation and webhooks and
// answers as it would, but persists nothing (controller-runtime's dry-run
// client, at the transport, so the typed and the dynamic client are both
// covered). POST, PUT and PATCH get dryRun=All in the query. A DELETE's
// options travel in its body, which the server then reads instead of the
// query, so dryRun is set there too; a body that is not JSON is refused
// rather than sent. Reads pass as they are.
func DryRunTransport(rt http.RoundTripper) http.RoundTripper { return dryRun{rt} }

type dryRun struct{ next http.RoundTripper }

// WrappedRoundTripper lets client-go reach the transport beneath to cancel
// a request (k8s.io/apimachinery/pkg/util/net.RoundTripperWrapper);
// without it, client-go logs "unable to cancel request" on the user's
// terminal each time a request with a timeout ends.
func (d dryRun) WrappedRoundTripper() http.RoundTripper { return d.next }

func (d dryRun) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return d.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	q := r.URL.Query()
	q.Set("dryRun", metav1.DryRunAll)
	r.URL.RawQuery = q.Encode()
	if r.Method == http.MethodDelete && r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(b)) > 0 {
			opts := map[string]any{}
			if err := json.Unmarshal(b, &opts); err != nil {
				return nil, fmt.Errorf("dry run: cannot set dryRun in the options of DELETE %s: %w", r.URL.Path, err)
			}
			opts["dryRun"] = []string{metav1.DryRunAll}
			if b, err = json.Marshal(opts); err != nil {
				return nil, err
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	return d.next.RoundTrip(r)
}
