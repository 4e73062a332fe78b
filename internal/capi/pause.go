package capi

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// A snapshot of a management cluster restored later is an older state of
// the Clusters it manages: their controllers, waking up to it, would act
// on Machines that no longer match Proxmox (kubernetes-sigs/cluster-api
// #5957, #3770). So mgmtctl pauses every Cluster (spec.paused, which each
// Cluster API controller honours) just for the snapshot: the snapshot
// holds them paused, and a restored cluster wakes up paused, until the
// user says to resume. The pause is server-side apply with mgmtctl's
// field manager: resuming applies the Cluster without those fields, which
// removes them, and leaves every field another manager set as it is.
const (
	// PausedByAnnotation marks a Cluster paused by mgmtctl for a backup.
	PausedByAnnotation = "mgmtctl.io/paused-for-backup"
	// HeldAnnotation marks a Cluster a restore brought back paused, held
	// so until `mgmtctl restore --resume`; its value is the backup.
	HeldAnnotation = "mgmtctl.io/held-since-restore"
)

// ClusterGroup is Cluster API's API group.
const ClusterGroup = "cluster.x-k8s.io"

// Clusters reads the Clusters of the management cluster.
type Clusters struct {
	Name string // the host the steps are shown on
	API  func(ctx context.Context) (*kube.Reader, error)
}

// clusterVersions are the versions of Cluster API's Cluster, newest
// first: v1beta2 since Cluster API v1.11, v1beta1 before (and still
// served beside it).
var clusterVersions = []string{"v1beta2", "v1beta1"}

// list is every Cluster, at the newest version the server serves; none
// where Cluster API is not installed (yet).
func (c *Clusters) list(ctx context.Context) (schema.GroupVersionResource, []unstructured.Unstructured, error) {
	cl, err := c.API(ctx)
	if err != nil || cl == nil {
		return schema.GroupVersionResource{}, nil, err
	}
	return listServed(ctx, cl, ClusterGroup, "clusters", clusterVersions)
}

func ref(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

func paused(u *unstructured.Unstructured) bool {
	p, _, _ := unstructured.NestedBool(u.Object, "spec", "paused")
	return p
}

// pauseObject is what mgmtctl applies to hold a Cluster paused, with its
// annotations.
func pauseObject(gvr schema.GroupVersionResource, u *unstructured.Unstructured, annotations map[string]string) *unstructured.Unstructured {
	o := bareObject(gvr, u)
	o.SetAnnotations(annotations)
	_ = unstructured.SetNestedField(o.Object, true, "spec", "paused")
	return o
}

// bareObject is the Cluster with none of mgmtctl's fields: applied, it
// removes those mgmtctl set.
func bareObject(gvr schema.GroupVersionResource, u *unstructured.Unstructured) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(gvr.GroupVersion().String())
	o.SetKind("Cluster")
	o.SetNamespace(u.GetNamespace())
	o.SetName(u.GetName())
	return o
}

func change(gvr schema.GroupVersionResource, u *unstructured.Unstructured, summary string, obj *unstructured.Unstructured) step.Change {
	return step.Change{Target: "cluster/" + ref(u), Action: step.Update, Summary: summary,
		Effects: []effect.Effect{effect.Apply{Resource: gvr, Object: obj}}}
}

// Pause pauses, for a backup, every Cluster that is not paused. One
// already paused by its owner is left alone (and stays paused after);
// one an interrupted backup paused is this backup's to resume.
type Pause struct{ C *Clusters }

var _ step.Step = (*Pause)(nil)

// ID implements step.Step.
func (s *Pause) ID() string { return "pause-clusters" }

// Host implements step.Step.
func (s *Pause) Host() string { return s.C.Name }

// Check implements step.Step.
func (s *Pause) Check(ctx context.Context) (step.Plan, error) {
	gvr, all, err := s.C.list(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	var p step.Plan
	var held []string
	for i := range all {
		u := &all[i]
		switch {
		case u.GetAnnotations()[HeldAnnotation] != "":
			held = append(held, ref(u))
		case paused(u):
		default:
			p.Changes = append(p.Changes, change(gvr, u, "pause Cluster "+ref(u)+" for the snapshot",
				pauseObject(gvr, u, map[string]string{PausedByAnnotation: "true"})))
		}
	}
	if len(held) > 0 {
		// A Cluster held since a restore is in the snapshot held as it is.
		p.Note = fmt.Sprintf("Cluster %s held paused since a restore (mgmtctl restore --resume)", strings.Join(held, ", "))
	} else if len(p.Changes) == 0 {
		p.Note = fmt.Sprintf("%d Cluster(s), none to pause", len(all))
	}
	return p, nil
}

// Resume unpauses the Clusters mgmtctl paused for a backup: after the
// snapshot, and in every apply, which so completes a backup that stopped
// between the two. With Held, it also resumes those a restore holds
// (restore --resume): only when the user says so.
type Resume struct {
	C    *Clusters
	Held bool
}

var _ step.Step = (*Resume)(nil)

// ID implements step.Step.
func (s *Resume) ID() string { return "resume-clusters" }

// Host implements step.Step.
func (s *Resume) Host() string { return s.C.Name }

// Check implements step.Step.
func (s *Resume) Check(ctx context.Context) (step.Plan, error) {
	gvr, all, err := s.C.list(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	var p step.Plan
	var held []string
	for i := range all {
		u := &all[i]
		a := u.GetAnnotations()
		switch {
		case a[HeldAnnotation] != "" && s.Held:
			p.Changes = append(p.Changes, change(gvr, u, "resume Cluster "+ref(u)+", held paused since the restore of "+a[HeldAnnotation], bareObject(gvr, u)))
		case a[HeldAnnotation] != "":
			held = append(held, ref(u))
		case a[PausedByAnnotation] != "":
			p.Changes = append(p.Changes, change(gvr, u, "resume Cluster "+ref(u)+", paused for a backup", bareObject(gvr, u)))
		}
	}
	switch {
	case len(held) > 0:
		p.Note = fmt.Sprintf("Cluster %s held paused since a restore: mgmtctl restore --resume resumes it once you have checked it", strings.Join(held, ", "))
	case len(p.Changes) == 0:
		p.Note = "no Cluster paused by mgmtctl"
	}
	return p, nil
}

// Hold holds every Cluster of a restored snapshot paused, until restore
// --resume: those the snapshot holds paused for a backup are marked held
// since this restore, and those it holds running (a snapshot k3s took on
// its schedule, or one from before mgmtctl paused for backups) are paused
// and marked so, before any provider's manager runs again (k3s.HoldPath).
// A Cluster its owner paused is left as it is: its owner resumes it. It
// runs before the phases that follow a restore, whose apply would
// otherwise resume them.
type Hold struct {
	C      *Clusters
	Backup string // the backup restored, for the annotation
}

var _ step.Step = (*Hold)(nil)

// ID implements step.Step.
func (s *Hold) ID() string { return "hold-clusters" }

// Host implements step.Step.
func (s *Hold) Host() string { return s.C.Name }

// Check implements step.Step.
func (s *Hold) Check(ctx context.Context) (step.Plan, error) {
	gvr, all, err := s.C.list(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	var p step.Plan
	held := map[string]string{PausedByAnnotation: "true", HeldAnnotation: s.Backup}
	for i := range all {
		u := &all[i]
		a := u.GetAnnotations()
		switch {
		case a[HeldAnnotation] != "":
		case a[PausedByAnnotation] != "":
			p.Changes = append(p.Changes, change(gvr, u, "hold Cluster "+ref(u)+" paused until mgmtctl restore --resume", pauseObject(gvr, u, held)))
		case paused(u):
			// Its owner's pause.
		default:
			p.Changes = append(p.Changes, change(gvr, u, "pause Cluster "+ref(u)+" and hold it so until mgmtctl restore --resume: the restored state is older than what Proxmox has", pauseObject(gvr, u, held)))
		}
	}
	if len(p.Changes) == 0 {
		p.Note = fmt.Sprintf("%d Cluster(s), none to hold", len(all))
	}
	return p, nil
}
