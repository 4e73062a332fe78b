package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestContainerLogs: the kubelet API's log endpoint as the API server
// calls it for kubectl logs: who may, which start's file, tail and the
// kubelet's refusals.
func TestContainerLogs(t *testing.T) {
	dir := t.TempDir()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "op-1", Namespace: "capi-operator-system", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "lab-mgmt", Containers: []corev1.Container{{Name: "manager"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "manager", RestartCount: 1,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}}}
	waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new-1", Namespace: "capi-operator-system", UID: "u2"},
		Spec: corev1.PodSpec{NodeName: "lab-mgmt", Containers: []corev1.Container{{Name: "manager"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "manager",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}}
	cs := fake.NewClientset(p, waiting)
	// The authorizer: the API server's user may, others may not.
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.User == "kube-apiserver" && sar.Spec.ResourceAttributes.Resource == "nodes" && sar.Spec.ResourceAttributes.Name == "lab-mgmt"
		return true, sar, nil
	})
	k := &Kubelet{CS: cs, Node: "lab-mgmt", LogDir: dir}
	write := func(restart int32, lines ...string) {
		path := k.logPath(p.Namespace, p.Name, string(p.UID), "manager", restart)
		os.MkdirAll(filepath.Dir(path), 0o755)
		var b strings.Builder
		for i, l := range lines {
			b.WriteString(time.Date(2026, 12, 5, 1, 0, i, 0, time.UTC).Format(time.RFC3339Nano) + " stderr F " + l + "\n")
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write(0, "first run", "exiting")
	write(1, `"starting manager" logger="setup"`, "second", "third")

	get := func(user, url string) (int, string) {
		r := httptest.NewRequest("GET", url, nil)
		if user != "" {
			r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: user}}}}}
		}
		w := httptest.NewRecorder()
		k.handler().ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, tc := range []struct {
		name, user, url string
		code            int
		body            string
	}{
		{"current", "kube-apiserver", "/containerLogs/capi-operator-system/op-1/manager", 200, "\"starting manager\" logger=\"setup\"\nsecond\nthird\n"},
		{"tail", "kube-apiserver", "/containerLogs/capi-operator-system/op-1/manager?tailLines=1", 200, "third\n"},
		{"previous", "kube-apiserver", "/containerLogs/capi-operator-system/op-1/manager?previous=true", 200, "first run\nexiting\n"},
		{"timestamps", "kube-apiserver", "/containerLogs/capi-operator-system/op-1/manager?tailLines=1&timestamps=true", 200, "2026-12-05T01:00:02Z third\n"},
		{"no client certificate", "", "/containerLogs/capi-operator-system/op-1/manager", 401, "Unauthorized"},
		{"not allowed", "system:anonymous", "/containerLogs/capi-operator-system/op-1/manager", 403, "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=log)"},
		{"no such pod", "kube-apiserver", "/containerLogs/capi-operator-system/nope/manager", 404, `pod "nope" does not exist`},
		{"no such container", "kube-apiserver", "/containerLogs/capi-operator-system/op-1/x", 404, `container "x" not found in pod "op-1"`},
		{"waiting", "kube-apiserver", "/containerLogs/capi-operator-system/new-1/manager", 400, `container "manager" in pod "new-1" is waiting to start: ContainerCreating`},
		{"no previous", "kube-apiserver", "/containerLogs/capi-operator-system/new-1/manager?previous=true", 400, `previous terminated container "manager" in pod "new-1" not found`},
		{"bad tail", "kube-apiserver", "/containerLogs/capi-operator-system/op-1/manager?tailLines=x", 422, "Invalid request."},
	} {
		code, body := get(tc.user, tc.url)
		if code != tc.code || !strings.Contains(body, tc.body) || (code == 200 && body != tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, body, tc.code, tc.body)
		}
	}
}

// TestFollow: a follow streams what the running container appends, and
// ends when the container stops.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "op-1", Namespace: "ns", UID: "u1"},
		Spec:   corev1.PodSpec{NodeName: "lab-mgmt", Containers: []corev1.Container{{Name: "manager"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "manager", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	cs := fake.NewClientset(p)
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	now := metav1.Now()
	k := &Kubelet{CS: cs, Node: "lab-mgmt", LogDir: dir, pods: map[types.UID]*podState{"u1": {started: &now}}}
	path := k.logPath("ns", "op-1", "u1", "manager", 0)
	os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := &criWriter{f: f}
	out := cw.stream("stdout")
	out.Write([]byte("before\n"))

	srv := httptest.NewUnstartedServer(k.handler())
	srv.Config.ConnState = nil
	srv.StartTLS()
	defer srv.Close()
	// httptest's TLS carries no client certificate: the request is
	// made as the authorized handler sees it, through a wrapper.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.TLS.VerifiedChains = [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "kube-apiserver"}}}}
		k.handler().ServeHTTP(w, r)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/containerLogs/ns/op-1/manager?follow=true", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 1024)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.String()
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	out.Write([]byte("after\n"))
	time.Sleep(500 * time.Millisecond)
	// The container stops: the follow ends.
	k.mu.Lock()
	k.pods["u1"].started = nil
	k.mu.Unlock()
	out.Close()
	cw.wait()
	select {
	case s := <-got:
		if s != "before\nafter\n" {
			t.Errorf("follow: %q", s)
		}
	case <-ctx.Done():
		t.Fatal("the follow did not end with the container")
	}
}
