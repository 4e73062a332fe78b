package capi

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Namespaces creates the providers' namespaces. mgmtctl never deletes
// them: a namespace holds a provider and whatever clusters it manages.
type Namespaces struct{ C *Cluster }

var _ step.Step = (*Namespaces)(nil)

// ID implements step.Step.
func (s *Namespaces) ID() string { return "namespaces" }

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
			_, err := s.C.API().Typed.CoreV1().Namespaces().Get(ctx, pr.Namespace, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return step.Plan{}, fmt.Errorf("read namespace %s: %w", pr.Namespace, err)
			}
			missing = apierrors.IsNotFound(err)
		}
		if missing {
			p.Changes = append(p.Changes, step.Change{Target: "namespace/" + pr.Namespace, Action: step.Create, Summary: "create namespace " + pr.Namespace,
				Payload: corev1ac.Namespace(pr.Namespace).WithLabels(map[string]string{ManagedBy: "mgmtctl"})})
		}
	}
	if p.Empty() {
		p.Note = "namespaces " + strings.Join(names, ", ") + " exist"
	}
	return p, nil
}

// Apply implements step.Step: it server-side applies the planned
// namespaces.
func (s *Namespaces) Apply(ctx context.Context, p step.Plan) error {
	for _, c := range p.Changes {
		ns := c.Payload.(*corev1ac.NamespaceApplyConfiguration)
		if _, err := s.C.API().Typed.CoreV1().Namespaces().Apply(ctx, ns, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("create namespace %s: %w", *ns.Name, err)
		}
	}
	return nil
}
