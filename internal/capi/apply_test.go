package capi

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// recorder answers every request and keeps it, so a test sees exactly what
// Apply sent, whether or not a real server would take it.
type recorder struct{ actions []k8stesting.Action }

func (r *recorder) react(a k8stesting.Action) (bool, runtime.Object, error) {
	r.actions = append(r.actions, a)
	return true, nil, nil
}

// reactDynamic is react for the dynamic client, which wants an object back.
func (r *recorder) reactDynamic(a k8stesting.Action) (bool, runtime.Object, error) {
	r.actions = append(r.actions, a)
	return true, &unstructured.Unstructured{Object: map[string]any{}}, nil
}

// sent is what each request named: its verb, namespace and name, and for
// an apply its object.
func (r *recorder) sent() []string {
	var out []string
	for _, a := range r.actions {
		line := a.GetVerb() + " " + a.GetNamespace()
		switch a := a.(type) {
		case k8stesting.PatchAction:
			line += "/" + a.GetName() + " " + string(a.GetPatch())
		case k8stesting.DeleteAction:
			line += "/" + a.GetName()
		}
		out = append(out, line)
	}
	return out
}

// TestApplyRunsThePlan: the capi steps' Apply sends exactly the payload of
// its plan: each payload is replaced after Check (on a cluster that does
// not exist yet, so everything is planned), and the replacement is sent.
func TestApplyRunsThePlan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		step   func(c *Cluster) step.Step
		tamper func(c *step.Change)
		want   string
	}{
		{"namespaces", func(c *Cluster) step.Step { return &Namespaces{C: c} },
			func(c *step.Change) { c.Payload = corev1ac.Namespace("planned") }, `patch /planned {"kind":"Namespace","apiVersion":"v1","metadata":{"name":"planned"}}`},
		{"variables", func(c *Cluster) step.Step { return &Variables{C: c} },
			func(c *step.Change) {
				c.Payload = corev1ac.Secret("planned", "ns").WithStringData(map[string]string{"K": "v"})
			},
			`patch ns/planned {"kind":"Secret","apiVersion":"v1","metadata":{"name":"planned","namespace":"ns"},"stringData":{"K":"v"}}`},
		{"provider", func(c *Cluster) step.Step { return &ProviderStep{C: c, P: c.Providers()[0]} },
			func(c *step.Change) {
				u := c.Payload.(*unstructured.Unstructured).DeepCopy()
				u.SetName("planned")
				unstructured.SetNestedField(u.Object, "v9.9.9", "spec", "version")
				c.Payload = u
			}, `"name":"planned"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			var api *kube.Cluster
			c.API = func() *kube.Cluster { return api }
			s := tc.step(c)
			p, err := s.Check(context.Background())
			if err != nil || p.Empty() {
				t.Fatalf("plan: %+v %v", p, err)
			}
			for i := range p.Changes {
				tc.tamper(&p.Changes[i])
			}
			var rec recorder
			typed := fake.NewClientset()
			typed.PrependReactor("*", "*", rec.react)
			dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
			dyn.PrependReactor("*", "*", rec.reactDynamic)
			api = &kube.Cluster{Typed: typed, Dynamic: dyn}
			if err := s.Apply(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			got := rec.sent()
			if len(got) != len(p.Changes) {
				t.Fatalf("sent %q for %d changes", got, len(p.Changes))
			}
			for _, g := range got {
				if !strings.Contains(g, tc.want) {
					t.Errorf("sent %q, want the planned %q", g, tc.want)
				}
			}
		})
	}

	// Prune deletes exactly the Secrets its plan names.
	c := cluster()
	var rec recorder
	typed := fake.NewClientset()
	typed.PrependReactor("*", "*", rec.react)
	c.API = func() *kube.Cluster { return &kube.Cluster{Typed: typed} }
	p := step.Plan{Changes: []step.Change{{Target: "secret/ns/old", Action: step.Delete, Payload: types.NamespacedName{Namespace: "ns", Name: "planned"}}}}
	if err := (&Prune{C: c}).Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := rec.sent(); len(got) != 1 || got[0] != "delete ns/planned" {
		t.Errorf("prune sent %q", got)
	}
}
