package capi

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Namespaces creates the providers' namespaces. mgmtctl never deletes
// them: a namespace holds a provider and whatever clusters it manages.
type Namespaces struct{ C *Cluster }

var _ step.Step = (*Namespaces)(nil)

// ID implements step.Step.
func (s *Namespaces) ID() string { return "namespaces" }

// Independent implements step.Independent: its Check reads the cluster,
// nothing an earlier step left.
func (s *Namespaces) Independent() {}

// Host implements step.Step.
func (s *Namespaces) Host() string { return s.C.Name }

// Check implements step.Step.
func (s *Namespaces) Check(ctx context.Context) (step.Plan, error) {
	var p step.Plan
	var names []string
	for _, pr := range s.C.Providers() {
		names = append(names, pr.Namespace)
		missing := s.C.API() == nil
		if !missing {
			_, err := s.C.API().Namespaces().Get(ctx, pr.Namespace, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return step.Plan{}, fmt.Errorf("read namespace %s: %w", pr.Namespace, err)
			}
			missing = apierrors.IsNotFound(err)
		}
		if missing {
			apply, err := effect.ApplyOf(namespaces, corev1ac.Namespace(pr.Namespace).WithLabels(map[string]string{ManagedBy: "mgmtctl"}))
			if err != nil {
				return step.Plan{}, err
			}
			p.Changes = append(p.Changes, step.Change{Target: "namespace/" + pr.Namespace, Action: step.Create, Summary: "create namespace " + pr.Namespace,
				Effects: []effect.Effect{apply}})
		}
	}
	if p.Empty() {
		p.Note = "namespaces " + strings.Join(names, ", ") + " exist"
	}
	return p, nil
}

// The core resources the capi phase writes.
var (
	namespaces = corev1.SchemeGroupVersion.WithResource("namespaces")
	secrets    = corev1.SchemeGroupVersion.WithResource("secrets")
)
