package kubelet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Serving is what the kubelet's API needs: its serving certificate (the
// cluster's server CA signs it, for the node's name and address, as k3s
// issues serving-kubelet.crt: k3s-io/k3s v1.35.7+k3s1
// pkg/agent/config/config.go) and the client CA whose certificates it
// accepts (the kubelet's --client-ca-file). The API's paths and answers
// follow Kubernetes v1.36.3 pkg/kubelet/server/server.go
// (/containerLogs/<ns>/<pod>/<container>, /healthz).
type Serving struct {
	Cert, Key []byte
	ClientCA  *x509.CertPool
}

// Serve serves the kubelet API's log endpoint on :10250 until ctx ends:
// GET /containerLogs/<namespace>/<pod>/<container> with follow,
// tailLines, previous, timestamps, sinceSeconds, sinceTime and
// limitBytes, as kubectl logs reaches it through the API server
// (pkg/kubelet/server/server.go, getContainerLogs). A client proves
// itself with a certificate of the client CA and is authorized, as the
// kubelet's webhook authorizer does, by a SubjectAccessReview for the
// nodes/log or nodes/proxy subresource of this node.
func (k *Kubelet) Serve(ctx context.Context, s Serving) error {
	cert, err := tls.X509KeyPair(s.Cert, s.Key)
	if err != nil {
		return fmt.Errorf("kubelet serving certificate: %w", err)
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(KubeletPort))
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	srv := &http.Server{
		Handler: k.handler(),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: s.ClientCA,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	err = srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (k *Kubelet) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", k.authorized("log", k.containerLogs))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return mux
}

// authorized admits a request whose client certificate's user may get
// this node's subresource (or nodes/proxy, which covers them all).
func (k *Kubelet) authorized(sub string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		c := r.TLS.VerifiedChains[0][0]
		user, groups := c.Subject.CommonName, c.Subject.Organization
		for _, s := range []string{sub, "proxy"} {
			sar, err := k.CS.AuthorizationV1().SubjectAccessReviews().Create(r.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: s, Name: k.Node}}}, metav1.CreateOptions{})
			if err != nil {
				http.Error(w, "Internal Server Error: "+err.Error(), http.StatusInternalServerError)
				return
			}
			if sar.Status.Allowed {
				next(w, r)
				return
			}
		}
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=get, resource=nodes, subresource=%s)", user, sub), http.StatusForbidden)
	}
}

// logQuery reads the log endpoint's query (core/v1 PodLogOptions, as
// kubectl logs sends them); a value the kubelet refuses comes back as its
// status code and message.
func logQuery(q url.Values, now time.Time) (o logOptions, previous bool, code int, msg string) {
	const invalid = `{"message": "Invalid request."}`
	// num sets a whole number of at least least, when given.
	num := func(key string, least int64, set func(int64)) bool {
		s := q.Get(key)
		if s == "" {
			return true
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < least {
			return false
		}
		set(n)
		return true
	}
	o = logOptions{tailLines: -1, follow: q.Get("follow") == "true", timestamps: q.Get("timestamps") == "true"}
	if !num("tailLines", 0, func(n int64) { o.tailLines = n }) ||
		!num("sinceSeconds", 1, func(n int64) { o.since = now.Add(-time.Duration(n) * time.Second) }) {
		return o, false, http.StatusUnprocessableEntity, invalid
	}
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return o, false, http.StatusBadRequest, `{"message": "Unable to decode query."}`
		}
		o.since = t
	}
	if !num("limitBytes", 1, func(n int64) { o.limitBytes = n }) {
		return o, false, http.StatusUnprocessableEntity, invalid
	}
	return o, q.Get("previous") == "true", 0, ""
}

// containerLogs is the kubelet's getContainerLogs.
func (k *Kubelet) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	o, previous, code, msg := logQuery(r.URL.Query(), time.Now())
	if code != 0 {
		http.Error(w, msg, code)
		return
	}
	p, err := k.CS.CoreV1().Pods(ns).Get(r.Context(), name, metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != k.Node {
		http.Error(w, fmt.Sprintf("pod %q does not exist", name), http.StatusNotFound)
		return
	}
	var cs *corev1.ContainerStatus
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			cs = &p.Status.ContainerStatuses[i]
		}
	}
	if cs == nil {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, name), http.StatusNotFound)
		return
	}
	// Which start's log (the kubelet's validateContainerLogStatus).
	restart := cs.RestartCount
	switch {
	case previous:
		if cs.LastTerminationState.Terminated == nil {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", container, name), http.StatusBadRequest)
			return
		}
		restart--
		if cs.State.Running == nil {
			// Waiting to restart: the last start is the one that ended.
			restart++
		}
		o.follow = false
	case cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil:
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %s", container, name, cs.State.Waiting.Reason), http.StatusBadRequest)
		return
	case cs.State.Running == nil:
		// Crashed and waiting: its last words.
		o.follow = false
	}
	path := k.logPath(ns, name, string(p.UID), container, max(restart, 0))
	w.Header().Set("Content-Type", "text/plain")
	flusher, _ := w.(http.Flusher)
	data, err := readFile(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// Only whole records now; a follow picks up the rest.
	whole := len(data)
	if i := bytes.LastIndexByte(data, '\n'); i+1 < whole {
		whole = i + 1
	}
	n, err := render(w, data[:whole], o)
	if err != nil || !o.follow || (o.limitBytes > 0 && n >= o.limitBytes) {
		return
	}
	if flusher != nil {
		flusher.Flush()
	}
	k.follow(r.Context(), w, flusher, path, int64(whole), o, n, p.UID)
}

// follow streams what is appended to the log file until the client goes
// or the container it follows has stopped.
func (k *Kubelet) follow(ctx context.Context, w io.Writer, flusher http.Flusher, path string, off int64, o logOptions, written int64, uid types.UID) {
	o.tailLines = -1
	limit := o.limitBytes
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var rest []byte
	for {
		running := k.running(uid)
		f, err := os.Open(path)
		if err == nil {
			if _, err := f.Seek(off, io.SeekStart); err == nil {
				b, _ := io.ReadAll(f)
				off += int64(len(b))
				rest = append(rest, b...)
			}
			f.Close()
		}
		if i := bytes.LastIndexByte(rest, '\n'); i >= 0 {
			if limit > 0 {
				o.limitBytes = limit - written
			}
			n, err := render(w, rest[:i+1], o)
			written += n
			rest = rest[i+1:]
			if err != nil || (limit > 0 && written >= limit) {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if !running {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// running reports whether this kubelet runs a container of the pod.
func (k *Kubelet) running(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.pods[uid]
	return ok && st.started != nil
}
