package kube

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// readMethods are the only methods a Reader, or what it hands out, may have
// beside the accessors that hand out a kind's reader.
var readMethods = []string{"Get", "List", "Watch", "Logs", "GetPath", "ServerGroupsAndResources", "ServerVersion", "CanI", "DryRunApply", "Namespace"}

// TestReaderHasNoMethodThatWrites walks every method of a Reader and of
// each reader it hands out (Objects of each kind, Pods, Resource): each is
// a read, or an accessor that hands out a reader of this package; and none
// of these types has an exported field, through which its client could be
// reached.
func TestReaderHasNoMethodThatWrites(t *testing.T) {
	pkg := reflect.TypeFor[Reader]().PkgPath()
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		st := ty
		if st.Kind() == reflect.Pointer {
			st = st.Elem()
		}
		if st.Kind() == reflect.Struct {
			for f := range st.Fields() {
				if f.IsExported() && !f.Anonymous {
					t.Errorf("%s has an exported field %s", st, f.Name)
				}
			}
		}
		for m := range ty.Methods() {
			var handsOut []reflect.Type
			for out := range m.Type.Outs() {
				if out.Kind() == reflect.Pointer {
					out = out.Elem()
				}
				if out.PkgPath() == pkg {
					handsOut = append(handsOut, out)
				}
			}
			if len(handsOut) == 0 && !slices.Contains(readMethods, m.Name) {
				t.Errorf("%s has method %s, which is not a read", ty, m.Name)
			}
			for _, o := range handsOut {
				walk(o)
			}
		}
	}
	walk(reflect.TypeFor[*Reader]())
	if len(seen) < 10 {
		t.Errorf("walked %d types; the walk does not reach the kinds' readers", len(seen))
	}
}

// TestReaderSendsOnlyReads drives every method of a Reader against an
// API server that records what it is sent: only GETs reach it, but for
// DryRunApply's PATCH, which carries dryRun=All.
func TestReaderSendsOnlyReads(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", srv.URL)
	var d net.Dialer
	r, err := NewReader([]byte(kc), d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	get, list := metav1.GetOptions{}, metav1.ListOptions{}
	// Every call's answer is an empty object, which may not decode: only
	// what was sent is looked at.
	calls := []func(){
		func() { r.Nodes().Get(ctx, "n", get) },
		func() { r.Nodes().List(ctx, list) },
		func() {
			if w, err := r.Nodes().Watch(ctx, list); err == nil {
				w.Stop()
			}
		},
		func() { r.Namespaces().Get(ctx, "ns", get) },
		func() { r.Secrets("ns").List(ctx, list) },
		func() { r.ServiceAccounts("ns").Get(ctx, "sa", get) },
		func() { r.Events("ns").List(ctx, list) },
		func() { r.Jobs("ns").Get(ctx, "j", get) },
		func() { r.Deployments("ns").Get(ctx, "d", get) },
		func() { r.Leases("ns").Get(ctx, "l", get) },
		func() { r.ClusterRoles().Get(ctx, "cr", get) },
		func() { r.ClusterRoleBindings().Get(ctx, "crb", get) },
		func() { r.Pods("ns").List(ctx, list) },
		func() { r.Pods("ns").Logs(ctx, "p", &corev1.PodLogOptions{Container: "c"}) },
		func() { r.ServerGroupsAndResources() },
		func() { r.GetPath(ctx, "/readyz/etcd") },
		func() { r.ServerVersion() },
		func() { r.CanI(ctx, "create", "apps", "deployments") },
		func() {
			r.Resource(schema.GroupVersionResource{Group: "g", Version: "v1", Resource: "things"}).List(ctx, list)
		},
		func() {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "g/v1", "kind": "Thing", "metadata": map[string]any{"name": "t", "namespace": "ns"}}}
			r.Resource(schema.GroupVersionResource{Group: "g", Version: "v1", Resource: "things"}).Namespace("ns").DryRunApply(ctx, u, "mgmtctl")
		},
	}
	for _, call := range calls {
		call()
	}
	var patches, reviews int
	for _, s := range sent {
		method, _, _ := strings.Cut(s, " ")
		switch {
		case method == http.MethodGet:
		case method == http.MethodPost && strings.HasPrefix(s, "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews?") && strings.Contains(s, "dryRun=All"):
			reviews++
		case method == http.MethodPatch && strings.Contains(s, "dryRun=All") && strings.Contains(s, "fieldManager=mgmtctl") && strings.Contains(s, "force=true"):
			patches++
		default:
			t.Errorf("a Reader sent %s", s)
		}
	}
	if reviews != 1 {
		t.Errorf("sent %d dry-run access reviews, want 1: %q", reviews, sent)
	}
	if patches != 1 {
		t.Errorf("sent %d dry-run applies, want 1: %q", patches, sent)
	}
	if len(sent) < len(calls) {
		t.Errorf("the server saw %d requests for %d calls: %q", len(sent), len(calls), sent)
	}
}
