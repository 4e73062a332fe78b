package capi

import (
	"context"
	"reflect"
	"testing"

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

// TestApplyRunsThePlan: the capi steps' plans (on a cluster that does not
// exist yet, so everything is planned) apply exactly the objects they
// show, and carrying them out as a run does sends exactly one
// server-side apply of each planned object, with mgmtctl's field manager,
// and nothing else.
func TestApplyRunsThePlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		step func(c *Cluster) step.Step
		plan []string
	}{
		{"namespaces", func(c *Cluster) step.Step { return &Namespaces{C: c} },
			[]string{"server-side apply namespaces/capi-system", "server-side apply namespaces/capmox-system", "server-side apply namespaces/capi-ipam-in-cluster-system"}},
		{"variables", func(c *Cluster) step.Step { return &Variables{C: c} },
			[]string{"server-side apply secrets/capmox-system/proxmox-variables-33b179de2d"}},
		{"provider", func(c *Cluster) step.Step { return &ProviderStep{C: c, P: c.Providers()[0]} },
			[]string{"server-side apply coreproviders/capi-system/cluster-api"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			var api *kube.Cluster
			c.API = func() *kube.Reader {
				if api == nil {
					return nil
				}
				return kube.ReaderOf(api.Typed, api.Dynamic)
			}
			s := tc.step(c)
			p, err := s.Check(context.Background())
			if err != nil || p.Empty() {
				t.Fatalf("plan: %+v %v", p, err)
			}
			if got := steptest.Effects(p); !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan %q, want %q", got, tc.plan)
			}
			var want []string
			for _, c := range p.Changes {
				for _, e := range c.Effects {
					a := e.(effect.Apply)
					b, _ := a.Object.MarshalJSON()
					want = append(want, "patch "+a.Object.GetNamespace()+"/"+a.Object.GetName()+" "+string(b))
				}
			}
			var rec recorder
			typed := fake.NewClientset()
			typed.PrependReactor("*", "*", rec.react)
			dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
			dyn.PrependReactor("*", "*", rec.reactDynamic)
			api = &kube.Cluster{Typed: typed, Dynamic: dyn}
			if err := step.CarryOut(context.Background(), s, p, steptest.Executor(api)); err != nil {
				t.Fatal(err)
			}
			if got := rec.sent(); !reflect.DeepEqual(got, want) {
				t.Errorf("sent\n%q\nwant\n%q", got, want)
			}
			for _, a := range rec.actions {
				if pa, ok := a.(k8stesting.PatchActionImpl); ok && pa.GetPatchType() != types.ApplyPatchType {
					t.Errorf("%s: patch type %s", pa.GetName(), pa.GetPatchType())
				}
			}
		})
	}

	// Prune deletes exactly the Secrets its plan names.
	var rec recorder
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", rec.reactDynamic)
	p := step.Plan{Changes: []step.Change{{Target: "secret/ns/old", Action: step.Delete,
		Effects: []effect.Effect{effect.Delete{Resource: secrets, Object: types.NamespacedName{Namespace: "ns", Name: "planned"}}}}}}
	if err := step.CarryOut(context.Background(), &Prune{C: cluster()}, p, steptest.Executor(&kube.Cluster{Dynamic: dyn})); err != nil {
		t.Fatal(err)
	}
	if got := rec.sent(); len(got) != 1 || got[0] != "delete ns/planned" {
		t.Errorf("prune sent %q", got)
	}
}
