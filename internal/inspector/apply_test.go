package inspector

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// TestRBACAppliesThePlan: Apply server-side applies exactly the objects of
// its plan, nothing recomputed from discovery.
func TestRBACAppliesThePlan(t *testing.T) {
	cs := fake.NewClientset()
	var sent, other []string
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if pa, ok := a.(k8stesting.PatchAction); ok {
			sent = append(sent, a.GetResource().Resource+"/"+pa.GetName()+" "+string(pa.GetPatch()))
		} else {
			// Strict: any other request (a create, a delete, a get
			// the plan did not need) is an effect outside the plan.
			other = append(other, a.GetVerb()+" "+a.GetResource().Resource)
		}
		return true, nil, nil
	})
	s := &RBAC{Name: "lab-mgmt-ro", Client: func() kubernetes.Interface { return cs }}
	planned := rbacv1ac.ClusterRole("planned").WithRules(rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods").WithVerbs("get"))
	p := step.Plan{Changes: []step.Change{{Target: "clusterrole/lab-mgmt-ro", Action: step.Update, Payload: planned}}}
	if err := s.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || !strings.HasPrefix(sent[0], `clusterroles/planned {"kind":"ClusterRole"`) || !strings.Contains(sent[0], `"resources":["pods"]`) {
		t.Errorf("sent %q", sent)
	}
	if len(other) != 0 {
		t.Errorf("requests beyond the plan: %q", other)
	}
}

// TestKubeconfigFileMintsThePlan: the plan says mint (with the server and
// CA it saw); Apply mints a token of the planned TTL and writes the
// kubeconfig around the planned server, 0600.
func TestKubeconfigFileMintsThePlan(t *testing.T) {
	cs := fake.NewClientset()
	var ttl int64
	var requests []string
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenRequest)
		ttl = *tr.Spec.ExpirationSeconds
		return true, &authv1.TokenRequest{Status: authv1.TokenRequestStatus{Token: "minted-token"}}, nil
	})
	// Every request, before any reactor answers it.
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		requests = append(requests, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		return false, nil, nil
	})
	path := filepath.Join(t.TempDir(), "ro.kubeconfig")
	var minted []string
	s := &KubeconfigFile{Name: "lab-mgmt-ro", Path: path, TTL: time.Hour,
		Cluster: func() (string, []byte, kubernetes.Interface, error) {
			return "https://192.0.2.50:6443", []byte("CA"), cs, nil
		},
		Minted: func(tok string) { minted = append(minted, tok) }}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan: %+v %v", p, err)
	}
	m := p.Changes[0].Payload.(Mint)
	m.Server, m.TTL = "https://planned:6443", 2*time.Hour
	p.Changes[0].Payload = m
	requests = nil
	if err := s.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	// Strict: one TokenRequest, no other API request.
	if want := []string{"create serviceaccounts/token"}; !reflect.DeepEqual(requests, want) {
		t.Errorf("Apply's API requests %q, want %q", requests, want)
	}
	b, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if !strings.Contains(string(b), "server: https://planned:6443") || !strings.Contains(string(b), "token: minted-token") || fi.Mode().Perm() != 0o600 || ttl != 7200 {
		t.Errorf("wrote (ttl %d, mode %v):\n%s", ttl, fi.Mode(), b)
	}
	if len(minted) != 1 || minted[0] != "minted-token" {
		t.Errorf("minted tokens not handed for redaction: %v", minted)
	}
}
