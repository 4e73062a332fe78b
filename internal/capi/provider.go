package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// ProviderTimeout is the default bound of the wait for one provider.
const ProviderTimeout = 10 * time.Minute

// OperatorNamespace and OperatorDeployment are where the addons phase
// installs cluster-api-operator.
const (
	OperatorNamespace  = "capi-operator-system"
	OperatorDeployment = "cluster-api-operator"
)

// terminalPreflight are preflight reasons the operator will not get past
// by itself: waiting on them only delays the error.
var terminalPreflight = map[string]bool{
	"IncorrectVersionFormat": true, "UnsupportedProviderDowngradeReason": true, "IncorrectCoreProviderNameReason": true,
	"FetchConfigValidationError": true, "MoreThanOneExists": true, "InvalidGithubTokenError": true,
}

// ProviderStep applies one provider CR with server-side apply and waits
// until the operator reports it Ready at its pinned version. The steps run
// core first, each waiting before the next, which is upstream's upgrade
// order when several versions change.
type ProviderStep struct {
	C *Cluster
	P Provider
}

var _ step.Waiter = (*ProviderStep)(nil)

// ID implements step.Step: provider-core, provider-control-plane, ...
func (s *ProviderStep) ID() string { return "provider-" + s.P.Kind.Prefix }

// Independent implements step.Independent: its Check reads the cluster (a dry-run included),
// nothing an earlier step left.
func (s *ProviderStep) Independent() {}

// Host implements step.Step.
func (s *ProviderStep) Host() string { return s.C.Name }

func (s *ProviderStep) client() kube.Resource {
	return s.C.API().Resource(s.P.Kind.GVR()).Namespace(s.P.Namespace)
}

// comparable is what mgmtctl owns of a provider: its spec and labels.
func comparable(u *unstructured.Unstructured) string {
	if u == nil {
		return ""
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	b, _ := json.Marshal(map[string]any{"spec": spec, "labels": u.GetLabels()})
	return string(b)
}

func specYAML(u *unstructured.Unstructured) string {
	if u == nil {
		return ""
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	b, _ := yaml.Marshal(map[string]any{"spec": spec})
	return string(b)
}

// Check implements step.Step: the provider CR to server-side apply, when
// what the server would make of it differs from what is there (the wait
// for Ready is the engine's, through Observe and Wait).
func (s *ProviderStep) Check(ctx context.Context) (step.Plan, error) {
	want := s.C.Desired(s.P)
	if s.C.API() == nil {
		return s.plan(step.Create, nil, want, want), nil
	}
	cur, err := s.client().Get(ctx, s.P.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return s.plan(step.Create, nil, want, want), nil
	}
	if err != nil {
		return step.Plan{}, fmt.Errorf("read %s: %w", s.P.Ref(), err)
	}
	// What the server would make of our apply (defaults, other managers'
	// fields kept), compared with what is there.
	dry, err := s.client().DryRunApply(ctx, want, FieldManager)
	if err != nil {
		return step.Plan{}, fmt.Errorf("server-side dry-run of %s: %w", s.P.Ref(), err)
	}
	if comparable(dry) != comparable(cur) {
		return s.plan(step.Update, cur, dry, want), nil
	}
	return step.Plan{Note: s.note()}, nil
}

// Observe implements step.Waiter.
func (s *ProviderStep) Observe(ctx context.Context) (bool, string, error) {
	if s.C.API() == nil {
		return false, "the cluster does not exist yet", nil
	}
	_, ok, why, err := s.observe(ctx)
	if !ok && why != "" {
		why = s.P.Ref() + " not Ready: " + why
	}
	return ok, why, err
}

// Bound implements step.Waiter: the cluster's wait timeout.
func (s *ProviderStep) Bound() time.Duration { return s.C.timeout() }

// Wait implements step.Waiter: until Ready at the pin.
func (s *ProviderStep) Wait(ctx context.Context) error { return s.wait(ctx) }

func (s *ProviderStep) note() string {
	return fmt.Sprintf("%s Ready at %s", s.P.Ref(), s.P.Version)
}

func (s *ProviderStep) target() string {
	return strings.ToLower(s.P.Kind.Kind) + "/" + s.P.Namespace + "/" + s.P.Name
}

// plan is the change to a provider CR: shown is what the server would
// store (for --diff), apply the object the Apply effect sends as it is.
func (s *ProviderStep) plan(a step.Action, cur, shown, apply *unstructured.Unstructured) step.Plan {
	summary := fmt.Sprintf("create %s %s", s.P.Ref(), s.P.Version)
	if a == step.Update {
		old, _, _ := unstructured.NestedString(cur.Object, "spec", "version")
		if old != s.P.Version {
			summary = fmt.Sprintf("upgrade %s from %s to %s", s.P.Ref(), old, s.P.Version)
		} else {
			summary = fmt.Sprintf("update %s", s.P.Ref())
			oldSecret, _, _ := unstructured.NestedString(cur.Object, "spec", "configSecret", "name")
			newSecret, _, _ := unstructured.NestedString(shown.Object, "spec", "configSecret", "name")
			if oldSecret != newSecret {
				summary += fmt.Sprintf(": configSecret %s -> %s", oldSecret, newSecret)
			}
		}
	}
	return step.Plan{Changes: []step.Change{{Target: s.target(), Action: a, Summary: summary,
		Diff:    &step.Diff{Path: s.target(), Before: specYAML(cur), After: specYAML(shown)},
		Effects: []effect.Effect{effect.Apply{Resource: s.P.Kind.GVR(), Object: apply}}}}}
}

// observe reads the provider and says whether it is Ready at its pin, and
// if not why. A preflight failure the operator cannot get past is an
// error.
func (s *ProviderStep) observe(ctx context.Context) (*unstructured.Unstructured, bool, string, error) {
	u, err := s.client().Get(ctx, s.P.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Deleted while waited for (by hand, or by a restore): the wait
		// goes on, and its deadline says this was the last thing seen.
		return nil, false, s.P.Ref() + " does not exist", nil
	}
	if err != nil {
		return nil, false, "", fmt.Errorf("read %s: %w", s.P.Ref(), err)
	}
	st := ReadStatus(u)
	if c, ok := st.Conditions["PreflightCheckPassed"]; ok && c.Status == "False" && terminalPreflight[c.Reason] && st.about(c, u.GetGeneration()) {
		return u, false, "", fmt.Errorf("%s: preflight failed: %s: %s", s.P.Ref(), c.Reason, c.Message)
	}
	if st.ObservedGeneration < u.GetGeneration() {
		// The operator records a failed reconcile in the condition of
		// the phase that failed (its own observedGeneration is the
		// CR's), and observedGeneration only once a reconcile succeeds:
		// while it retries, that condition is what holds it up.
		if t, c, ok := st.FailingAt(u.GetGeneration()); ok {
			return u, false, fmt.Sprintf("%s=%s (%s: %s)", t, c.Status, c.Reason, c.Message), nil
		}
		return u, false, fmt.Sprintf("the operator has not reconciled generation %d yet", u.GetGeneration()), nil
	}
	if st.Ready() && st.InstalledVersion == s.P.Version {
		return u, true, "", nil
	}
	return u, false, st.Summary(), nil
}

func (s *ProviderStep) wait(ctx context.Context) error {
	last := "not reconciled yet"
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", s.P.Name).String()}
	err := kube.Until(ctx, []kube.WatchFunc{func(ctx context.Context) (watch.Interface, error) { return s.client().Watch(ctx, sel) }},
		func(ctx context.Context) (bool, error) {
			_, ok, why, err := s.observe(ctx)
			if why != "" && why != last {
				step.Progress(ctx, s.P.Ref()+": "+why)
				last = why
			}
			return ok, err
		})
	if err == nil || ctx.Err() == nil {
		return err
	}
	// Timed out: say what the operator says, and how it fares.
	bg, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel2()
	return step.Timeout(s.C.timeout(), ctx.Err(), "%s", s.diagnose(bg, last))
}

func (s *ProviderStep) diagnose(ctx context.Context, last string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s not Ready at %s after %s: %s", s.P.Ref(), s.P.Version, s.C.timeout(), last)
	if u, err := s.client().Get(ctx, s.P.Name, metav1.GetOptions{}); err == nil {
		st := ReadStatus(u)
		b.WriteString("\nconditions:")
		for _, t := range []string{"PreflightCheckPassed", "ProviderInstalled", "ProviderUpgraded", "Ready"} {
			if c, ok := st.Conditions[t]; ok {
				fmt.Fprintf(&b, "\n  %s=%s %s: %s", t, c.Status, c.Reason, c.Message)
			}
		}
	}
	evs, _ := s.C.API().Events(s.P.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", s.P.Name).String()})
	if evs != nil && len(evs.Items) > 0 {
		b.WriteString("\nevents:")
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "\n  %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	// The provider's own Deployment: the operator's Ready follows its
	// Available condition by status alone (healthcheck_controller.go), so
	// its reason can be stale while the Deployment says why.
	if list, err := s.C.API().Deployments(s.P.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "cluster.x-k8s.io/provider"}); err == nil {
		for _, d := range list.Items {
			fmt.Fprintf(&b, "\nprovider Deployment %s/%s: %d/%d available", d.Namespace, d.Name, d.Status.AvailableReplicas, d.Status.Replicas)
			for _, c := range d.Status.Conditions {
				if c.Type == "Available" {
					fmt.Fprintf(&b, ", Available=%s (%s: %s)", c.Status, c.Reason, c.Message)
				}
			}
			// Its pods say why it is not available: a manager that exits
			// at start leaves its last words in its container's status.
			if d.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				continue
			}
			if pods, err := s.C.API().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()}); err == nil {
				for i := range pods.Items {
					fmt.Fprintf(&b, "\n  pod %s: %s", pods.Items[i].Name, PodState(&pods.Items[i]))
				}
			}
		}
	}
	if d, err := s.C.API().Deployments(OperatorNamespace).Get(ctx, OperatorDeployment, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "\noperator Deployment %s/%s: %d/%d available", OperatorNamespace, OperatorDeployment, d.Status.AvailableReplicas, d.Status.Replicas)
		for _, c := range d.Status.Conditions {
			if c.Type == "Available" {
				fmt.Fprintf(&b, ", Available=%s (%s)", c.Status, c.Reason)
			}
		}
	} else {
		fmt.Fprintf(&b, "\noperator Deployment %s/%s: %v", OperatorNamespace, OperatorDeployment, err)
	}
	b.WriteString("\nnext: kubectl -n " + OperatorNamespace + " logs deploy/" + OperatorDeployment + "; see docs/troubleshooting.md")
	return b.String()
}

// PodState says how a pod fares, as kubectl get pods and describe would:
// its phase or its container's waiting reason, whether it is ready, its
// restarts, and its container's last exit with its last words.
func PodState(p *corev1.Pod) string {
	state := string(p.Status.Phase)
	var parts []string
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			state = w.Reason
		}
		if !cs.Ready {
			parts = append(parts, "not ready")
		}
		if cs.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%d restarts", cs.RestartCount))
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			last := fmt.Sprintf("last exit %d (%s)", t.ExitCode, t.Reason)
			if msg := strings.TrimSpace(t.Message); msg != "" {
				if lines := strings.Split(msg, "\n"); len(lines) > 3 {
					msg = strings.Join(lines[len(lines)-3:], "\n")
				}
				last += ": " + msg
			}
			parts = append(parts, last)
		}
		break // the first container: the manager
	}
	if len(parts) == 0 {
		return state
	}
	return state + ", " + strings.Join(parts, ", ")
}

// Condition is one of a provider's status conditions.
type Condition struct {
	Status, Reason, Message string
	// ObservedGeneration is the generation the condition was set for.
	ObservedGeneration int64
}

// Status is what the operator reports on a provider CR.
type Status struct {
	InstalledVersion   string
	ObservedGeneration int64
	Conditions         map[string]Condition
}

// ReadStatus reads a provider CR's status.
func ReadStatus(u *unstructured.Unstructured) Status {
	st := Status{Conditions: map[string]Condition{}}
	st.InstalledVersion, _, _ = unstructured.NestedString(u.Object, "status", "installedVersion")
	st.ObservedGeneration, _, _ = unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		var cd Condition
		cd.Status, _ = m["status"].(string)
		cd.Reason, _ = m["reason"].(string)
		cd.Message, _ = m["message"].(string)
		cd.ObservedGeneration, _, _ = unstructured.NestedInt64(m, "observedGeneration")
		st.Conditions[t] = cd
	}
	return st
}

// about reports whether condition c speaks of generation gen: its own
// observedGeneration says so, or, without one, the status's. A refusal of
// an earlier spec (a downgrade since undone) is not this spec's.
func (st Status) about(c Condition, gen int64) bool {
	if c.ObservedGeneration != 0 {
		return c.ObservedGeneration == gen
	}
	return st.ObservedGeneration >= gen
}

// FailingAt is the first of the operator's phase conditions that is False
// for generation gen.
func (st Status) FailingAt(gen int64) (string, Condition, bool) {
	for _, t := range []string{"PreflightCheckPassed", "ProviderInstalled", "ProviderUpgraded"} {
		if c, ok := st.Conditions[t]; ok && c.Status == "False" && st.about(c, gen) {
			return t, c, true
		}
	}
	return "", Condition{}, false
}

// Ready reports the Ready condition.
func (st Status) Ready() bool { return st.Conditions["Ready"].Status == "True" }

// Summary is a one-line account of a provider not (yet) as wanted.
func (st Status) Summary() string {
	for _, t := range []string{"PreflightCheckPassed", "ProviderInstalled", "Ready"} {
		c, ok := st.Conditions[t]
		if !ok {
			return t + " not reported yet"
		}
		if c.Status != "True" {
			return fmt.Sprintf("%s=%s (%s: %s)", t, c.Status, c.Reason, c.Message)
		}
	}
	if st.InstalledVersion == "" {
		return "no installedVersion yet"
	}
	return "installedVersion " + st.InstalledVersion
}

// VersionChange says which provider apply will move to another version
// ("before moving CoreProvider capi-system/cluster-api from v1.12.10 to
// v1.12.11"), or "" when none: a risky change, which apply takes a
// snapshot before. A provider not created yet is no change.
func (c *Cluster) VersionChange(ctx context.Context) (string, error) {
	cl := c.API()
	if cl == nil {
		return "", nil
	}
	for _, p := range c.Providers() {
		u, err := cl.Resource(p.Kind.GVR()).Namespace(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", p.Ref(), err)
		}
		if cur, _, _ := unstructured.NestedString(u.Object, "spec", "version"); cur != "" && cur != p.Version {
			return fmt.Sprintf("before moving %s from %s to %s", p.Ref(), cur, p.Version), nil
		}
	}
	return "", nil
}
