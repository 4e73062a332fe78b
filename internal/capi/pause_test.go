package capi

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// clusterAPI serves Cluster API's Clusters at v1beta2 (404 at any other
// path, as an API server without the resource answers).
func clusterAPI(t *testing.T, items []map[string]any) func(context.Context) (*kube.Reader, error) {
	lists := map[string][]map[string]any{}
	if items != nil {
		lists["/apis/cluster.x-k8s.io/v1beta2/clusters"] = items
	}
	return apiServing(t, lists)
}

func testCluster(name string, paused bool, annotations map[string]any) map[string]any {
	return map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": name, "namespace": "default", "annotations": annotations},
		"spec":     map[string]any{"paused": paused, "clusterNetwork": map[string]any{"serviceDomain": "cluster.local"}}}
}

func summaries(p step.Plan) []string {
	var out []string
	for _, c := range p.Changes {
		out = append(out, c.Summary)
	}
	return out
}

// TestPauseResumeHold: what each step plans for a running Cluster, one
// its owner paused, one a backup left paused and one a restore holds.
func TestPauseResumeHold(t *testing.T) {
	api := clusterAPI(t, []map[string]any{
		testCluster("running", false, nil),
		testCluster("owners", true, nil),
		testCluster("left", true, map[string]any{PausedByAnnotation: "true"}),
		testCluster("held", true, map[string]any{PausedByAnnotation: "true", HeldAnnotation: "20261206T050000Z"}),
	})
	c := &Clusters{Name: "srv1", API: api}
	ctx := context.Background()
	for _, tc := range []struct {
		step step.Step
		want []string
		note string
	}{
		{&Pause{C: c}, []string{"pause Cluster default/running for the snapshot"}, ""},
		{&Resume{C: c}, []string{"resume Cluster default/left, paused for a backup"},
			""},
		{&Resume{C: c, Held: true}, []string{"resume Cluster default/held, held paused since the restore of 20261206T050000Z", "resume Cluster default/left, paused for a backup"}, ""},
		// The restored running Cluster is paused and held too (a snapshot
		// k3s took on its schedule pauses nothing); the owner's is left.
		{&Hold{C: c, Backup: "20261206T060000Z"}, []string{"hold Cluster default/left paused until mgmtctl restore --resume",
			"pause Cluster default/running and hold it so until mgmtctl restore --resume: the restored state is older than what Proxmox has"}, ""},
	} {
		p, err := tc.step.Check(ctx)
		if err != nil || !reflect.DeepEqual(summaries(p), tc.want) {
			t.Errorf("%s: %v, %v", tc.step.ID(), summaries(p), err)
		}
	}

	// The pause is mgmtctl's fields only; the resume applies none, so
	// server-side apply removes them.
	p, _ := (&Pause{C: c}).Check(ctx)
	a := p.Changes[0].Effects[0].(effect.Apply)
	if paused, _, _ := unstructured.NestedBool(a.Object.Object, "spec", "paused"); !paused || a.Object.GetAnnotations()[PausedByAnnotation] != "true" ||
		len(a.Object.Object["spec"].(map[string]any)) != 1 || a.Resource.Version != "v1beta2" {
		t.Errorf("pause applies %v at %v", a.Object.Object, a.Resource)
	}
	p, _ = (&Resume{C: c}).Check(ctx)
	if a := p.Changes[0].Effects[0].(effect.Apply); a.Object.Object["spec"] != nil || a.Object.GetAnnotations() != nil || a.Object.GetName() != "left" {
		t.Errorf("resume applies %v", a.Object.Object)
	}
	// The hold of a running Cluster pauses it with both annotations, so
	// that restore --resume resumes it.
	p, _ = (&Hold{C: c, Backup: "s3:etcd-snapshot-x"}).Check(ctx)
	if a := p.Changes[1].Effects[0].(effect.Apply); a.Object.GetName() != "running" || a.Object.GetAnnotations()[HeldAnnotation] != "s3:etcd-snapshot-x" ||
		a.Object.GetAnnotations()[PausedByAnnotation] != "true" || a.Object.Object["spec"].(map[string]any)["paused"] != true {
		t.Errorf("hold applies %v", a.Object.Object)
	}
	// A Cluster a restore holds is only said by a plain resume.
	if p, _ := (&Resume{C: c}).Check(ctx); p.Note == "" {
		t.Errorf("resume says nothing of the held Cluster: %+v", p)
	}
}

// TestNoClusterAPI: before Cluster API is installed, nothing to pause.
func TestNoClusterAPI(t *testing.T) {
	c := &Clusters{Name: "srv1", API: clusterAPI(t, nil)}
	for _, s := range []step.Step{&Pause{C: c}, &Resume{C: c}, &Hold{C: c}} {
		if p, err := s.Check(context.Background()); err != nil || !p.Empty() {
			t.Errorf("%s: %+v, %v", s.ID(), p, err)
		}
	}
}
