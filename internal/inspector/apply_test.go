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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestRBACAppliesThePlan: on a cluster without the inspector's objects,
// the plan applies the ServiceAccount, the ClusterRole derived from
// discovery and the binding; carrying it out sends exactly those three
// server-side applies, in order, and no other request (a create, a
// delete, a get the plan did not need).
func TestRBACAppliesThePlan(t *testing.T) {
	cs := fake.NewClientset()
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Verbs: []string{"get", "list"}}}}}
	s := &RBAC{Name: "lab-mgmt-ro", Client: func() *kube.Reader { return kube.ReaderOf(cs, nil) }}
	p, err := s.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"server-side apply serviceaccounts/kube-system/lab-mgmt-ro", "server-side apply clusterroles/lab-mgmt-ro", "server-side apply clusterrolebindings/lab-mgmt-ro"}
	if got := steptest.Effects(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	var sent []string
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		line := a.GetVerb() + " " + a.GetResource().Resource
		if pa, ok := a.(k8stesting.PatchAction); ok {
			line += "/" + pa.GetName() + " " + string(pa.GetPatch())
		}
		sent = append(sent, line)
		return true, &unstructured.Unstructured{Object: map[string]any{}}, nil
	})
	if err := step.CarryOut(context.Background(), s, p, steptest.Executor(&kube.Cluster{Typed: cs, Dynamic: dyn})); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 3 || !strings.HasPrefix(sent[0], `patch serviceaccounts/lab-mgmt-ro {"apiVersion":"v1","kind":"ServiceAccount"`) ||
		!strings.HasPrefix(sent[1], `patch clusterroles/lab-mgmt-ro `) || !strings.Contains(sent[1], `"resources":["pods"]`) ||
		!strings.HasPrefix(sent[2], `patch clusterrolebindings/lab-mgmt-ro `) {
		t.Errorf("sent %q", sent)
	}
}

// TestKubeconfigFileMintsThePlan: the plan mints (with the server and CA
// it saw) a token of the step's TTL into the kubeconfig; carrying it out
// sends one TokenRequest and no other request, writes the kubeconfig
// 0600, and hands the token to the redactor.
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
	s := &KubeconfigFile{Name: "lab-mgmt-ro", Path: path, TTL: 2 * time.Hour,
		Cluster: func() (string, []byte, *kube.Reader, error) {
			return "https://192.0.2.50:6443", []byte("CA"), kube.ReaderOf(cs, nil), nil
		}}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan: %+v %v", p, err)
	}
	want := []effect.Effect{effect.TokenKubeconfig{ServiceAccount: types.NamespacedName{Namespace: "kube-system", Name: "lab-mgmt-ro"}, TTL: 2 * time.Hour,
		Name: "lab-mgmt-ro", Server: "https://192.0.2.50:6443", CA: []byte("CA"), Path: path}}
	if !reflect.DeepEqual(p.Changes[0].Effects, want) {
		t.Errorf("effects %+v", p.Changes[0].Effects)
	}
	requests = nil
	var minted []string
	x := steptest.Executor(&kube.Cluster{Typed: cs})
	x.Redact = func(v ...string) { minted = append(minted, v...) }
	if err := step.CarryOut(context.Background(), s, p, x); err != nil {
		t.Fatal(err)
	}
	// Strict: one TokenRequest, no other API request.
	if want := []string{"create serviceaccounts/token"}; !reflect.DeepEqual(requests, want) {
		t.Errorf("API requests %q, want %q", requests, want)
	}
	b, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if !strings.Contains(string(b), "server: https://192.0.2.50:6443") || !strings.Contains(string(b), "token: minted-token") || fi.Mode().Perm() != 0o600 || ttl != 7200 {
		t.Errorf("wrote (ttl %d, mode %v):\n%s", ttl, fi.Mode(), b)
	}
	if len(minted) != 1 || minted[0] != "minted-token" {
		t.Errorf("minted tokens not handed for redaction: %v", minted)
	}
}
