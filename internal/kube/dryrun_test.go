package kube

import (
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
)

// TestDryRunTransport: writes get dryRun=All beside their own parameters,
// a DELETE's options body too (the server reads that instead of the
// query); reads and watches pass untouched; an options body it cannot
// amend is not sent.
func TestDryRunTransport(t *testing.T) {
	var gotQuery, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotQuery, gotBody = r.URL.RawQuery, string(b)
	}))
	defer srv.Close()
	c := &http.Client{Transport: DryRunTransport(http.DefaultTransport)}
	for _, tc := range []struct{ method, query, body, wantQuery, wantBody string }{
		{method: http.MethodGet},
		{method: http.MethodGet, query: "watch=true", wantQuery: "watch=true"},
		{method: http.MethodPost, body: `{"kind":"ConfigMap"}`, wantQuery: "dryRun=All", wantBody: `{"kind":"ConfigMap"}`},
		{method: http.MethodPut, wantQuery: "dryRun=All"},
		{method: http.MethodPatch, query: "fieldManager=mgmtctl&force=true", wantQuery: "dryRun=All&fieldManager=mgmtctl&force=true"},
		{method: http.MethodDelete, wantQuery: "dryRun=All"},
		{method: http.MethodDelete, body: `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`, wantQuery: "dryRun=All",
			wantBody: `{"apiVersion":"v1","dryRun":["All"],"kind":"DeleteOptions","propagationPolicy":"Background"}`},
	} {
		t.Run(tc.method+"?"+tc.query+" "+tc.body, func(t *testing.T) {
			gotQuery, gotBody = "", ""
			req, _ := http.NewRequest(tc.method, srv.URL+"/api/v1/namespaces/default/configmaps?"+tc.query, strings.NewReader(tc.body))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if gotQuery != tc.wantQuery || gotBody != tc.wantBody {
				t.Errorf("sent %q with body %q, want %q with %q", gotQuery, gotBody, tc.wantQuery, tc.wantBody)
			}
		})
	}
	gotQuery = "nothing sent"
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/api/v1/namespaces/default/configmaps/x", strings.NewReader("\x08protobuf"))
	if _, err := c.Do(req); err == nil || gotQuery != "nothing sent" {
		t.Errorf("a DELETE whose options cannot be amended was sent (err %v)", err)
	}
}

// TestDryRunWritesNothing runs against a live API server (the lab's, from
// the lab's e2e test TestCheckModeClientWritesNothing, which sets
// MGMTCTL_LAB_KUBECONFIG to its admin kubeconfig): every kind of write a
// step could forget to guard, through the typed and the dynamic client of
// a dry-run cluster, and a Reader's dry-run apply, is accepted by the
// server and changes nothing.
func TestDryRunWritesNothing(t *testing.T) {
	path := os.Getenv("MGMTCTL_LAB_KUBECONFIG")
	if path == "" {
		t.Skip("needs a live API server: run by the lab's e2e tests (MGMTCTL_LAB_KUBECONFIG)")
	}
	kc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	live, err := NewCluster(kc, d.DialContext, false)
	if err != nil {
		t.Fatal(err)
	}
	dry, err := NewCluster(kc, d.DialContext, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cms := live.Typed.CoreV1().ConfigMaps("default")
	_ = cms.Delete(ctx, "dry-run-probe", metav1.DeleteOptions{})
	kept, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dry-run-kept"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		kept, err = cms.Get(ctx, "dry-run-kept", metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	dcms := dry.Typed.CoreV1().ConfigMaps("default")
	if _, err := dcms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dry-run-probe"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("typed create: %v", err)
	}
	changed := kept.DeepCopy()
	changed.Data["k"] = "changed"
	if _, err := dcms.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Errorf("typed update: %v", err)
	}
	if _, err := dcms.Patch(ctx, kept.Name, types.MergePatchType, []byte(`{"data":{"k":"patched"}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("typed merge patch: %v", err)
	}
	if _, err := dcms.Apply(ctx, applycorev1.ConfigMap(kept.Name, "default").WithData(map[string]string{"k": "applied"}), metav1.ApplyOptions{FieldManager: "mgmtctl", Force: true}); err != nil {
		t.Errorf("typed server-side apply: %v", err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "dry-run-probe", "namespace": "default"}, "data": map[string]any{"k": "dynamic"}}}
	if _, err := dry.Dynamic.Resource(gvr).Namespace("default").Apply(ctx, "dry-run-probe", u, metav1.ApplyOptions{FieldManager: "mgmtctl", Force: true}); err != nil {
		t.Errorf("dynamic server-side apply: %v", err)
	}
	// A Reader's one request with a body: the server answers with what
	// it would store, and stores nothing.
	r, err := NewReader(kc, d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	ru := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": kept.Name, "namespace": "default"}, "data": map[string]any{"k": "reader"}}}
	if got, err := r.Resource(gvr).Namespace("default").DryRunApply(ctx, ru, "mgmtctl"); err != nil {
		t.Errorf("reader's dry-run apply: %v", err)
	} else if v, _, _ := unstructured.NestedString(got.Object, "data", "k"); v != "reader" {
		t.Errorf("reader's dry-run apply answered data.k=%q, want what it would store", v)
	}
	if err := dcms.Delete(ctx, kept.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("typed delete: %v", err)
	}
	if err := dry.Dynamic.Resource(gvr).Namespace("default").Delete(ctx, kept.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("dynamic delete: %v", err)
	}

	after, err := cms.Get(ctx, kept.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kept ConfigMap is gone: %v", err)
	}
	if after.ResourceVersion != kept.ResourceVersion || after.Data["k"] != "v" {
		t.Errorf("the kept ConfigMap changed: resourceVersion %s -> %s, data %v", kept.ResourceVersion, after.ResourceVersion, after.Data)
	}
	if _, err := cms.Get(ctx, "dry-run-probe", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry-run create persisted: %v", err)
	}
}

// client-go cancels a request through the transports it wraps only where
// each says what it wraps.
var _ utilnet.RoundTripperWrapper = dryRun{}
