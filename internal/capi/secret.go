package capi

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Variables writes each provider's variables Secret. Its name carries a
// hash of its content, so an existing Secret of that name already holds
// the wanted values: the step creates, it never updates.
type Variables struct{ C *Cluster }

var _ step.Step = (*Variables)(nil)

// ID implements step.Step.
func (s *Variables) ID() string { return "variables" }

// Independent implements step.Independent: its Check reads the cluster,
// nothing an earlier step left.
func (s *Variables) Independent() {}

// Host implements step.Step.
func (s *Variables) Host() string { return s.C.Name }

// Redacted renders a variables Secret for --diff with every value of a
// secret key masked; the run's redactor masks the token secret too.
func Redacted(vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := vars[k]
		if strings.Contains(k, "SECRET") || strings.Contains(k, "PASSWORD") || strings.Contains(k, "TOKEN") && k != "PROXMOX_TOKEN" {
			v = "(redacted)"
		}
		fmt.Fprintf(&b, "%s: %s\n", k, v)
	}
	return b.String()
}

// Check implements step.Step.
func (s *Variables) Check(ctx context.Context) (step.Plan, error) {
	var p step.Plan
	var names []string
	for _, pr := range s.C.Providers() {
		vars := s.C.Variables(pr)
		if vars == nil {
			continue
		}
		name := SecretName(pr, vars)
		names = append(names, pr.Namespace+"/"+name)
		if s.C.API() != nil {
			_, err := s.C.API().Secrets(pr.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				continue
			}
			if !apierrors.IsNotFound(err) {
				return step.Plan{}, fmt.Errorf("read Secret %s/%s: %w", pr.Namespace, name, err)
			}
		}
		target := "secret/" + pr.Namespace + "/" + name
		apply, err := effect.ApplyOf(secrets, corev1ac.Secret(name, pr.Namespace).
			WithLabels(map[string]string{ManagedBy: "mgmtctl", VariablesFor: variablesFor(pr)}).
			WithType("Opaque").WithStringData(vars))
		if err != nil {
			return step.Plan{}, err
		}
		p.Changes = append(p.Changes, step.Change{Target: target, Action: step.Create,
			Summary: fmt.Sprintf("create Secret %s/%s with the variables of %s", pr.Namespace, name, pr.Ref()),
			Diff:    &step.Diff{Path: target, After: Redacted(vars)}, Effects: []effect.Effect{apply}})
	}
	if p.Empty() {
		p.Note = "variables Secrets " + strings.Join(names, ", ") + " exist"
	}
	return p, nil
}

// Prune deletes the variables Secrets that no provider points at any more
// (after a rotation, once the provider is Ready on the new one).
type Prune struct{ C *Cluster }

var _ step.Step = (*Prune)(nil)

// ID implements step.Step.
func (s *Prune) ID() string { return "prune-variables" }

// Independent implements step.Independent: its Check reads the cluster,
// nothing an earlier step left.
func (s *Prune) Independent() {}

// Host implements step.Step.
func (s *Prune) Host() string { return s.C.Name }

// Check implements step.Step.
func (s *Prune) Check(ctx context.Context) (step.Plan, error) {
	var p step.Plan
	if s.C.API() == nil {
		return step.Plan{Note: "no cluster yet"}, nil
	}
	for _, pr := range s.C.Providers() {
		current := ""
		if vars := s.C.Variables(pr); vars != nil {
			current = SecretName(pr, vars)
		}
		list, err := s.C.API().Secrets(pr.Namespace).List(ctx, metav1.ListOptions{LabelSelector: VariablesFor + "=" + variablesFor(pr) + "," + ManagedBy + "=mgmtctl"})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return step.Plan{}, fmt.Errorf("list variables Secrets in %s: %w", pr.Namespace, err)
		}
		for _, sec := range list.Items {
			if sec.Name == current {
				continue
			}
			p.Changes = append(p.Changes, step.Change{Target: "secret/" + pr.Namespace + "/" + sec.Name, Action: step.Delete,
				Summary: fmt.Sprintf("delete Secret %s/%s, replaced by %s", pr.Namespace, sec.Name, current),
				Effects: []effect.Effect{effect.Delete{Resource: secrets, Object: types.NamespacedName{Namespace: pr.Namespace, Name: sec.Name}}}})
		}
	}
	if p.Empty() {
		p.Note = "no stale variables Secrets"
	}
	return p, nil
}
