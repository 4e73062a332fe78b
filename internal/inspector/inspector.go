// Package inspector makes the read-only identity of the management cluster:
// a ServiceAccount, a ClusterRole that reads everything but Secrets (get,
// list, watch; no exec, attach, port-forward, proxy or token requests, which
// are subresources it never lists), its binding, and a time-limited token.
package inspector

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Namespace holds the inspector's ServiceAccount.
const Namespace = "kube-system"

// FieldManager is mgmtctl's server-side apply identity.
const FieldManager = "mgmtctl"

// readVerbs are all the inspector may do.
var readVerbs = []string{"get", "list", "watch"}

// Rules derives the ClusterRole's rules from the API's resources: every
// listable resource of every group, except Secrets; subresources (exec,
// attach, portforward, proxy, token) are never included.
func Rules(lists []*metav1.APIResourceList) []rbacv1.PolicyRule {
	byGroup := map[string]map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !contains(r.Verbs, "list") {
				continue
			}
			if gv.Group == "" && r.Name == "secrets" {
				continue
			}
			if byGroup[gv.Group] == nil {
				byGroup[gv.Group] = map[string]bool{}
			}
			byGroup[gv.Group][r.Name] = true
		}
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var rules []rbacv1.PolicyRule
	for _, g := range groups {
		var res []string
		for r := range byGroup[g] {
			res = append(res, r)
		}
		sort.Strings(res)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: res, Verbs: readVerbs})
	}
	return rules
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// RBAC keeps the ServiceAccount, ClusterRole and binding.
type RBAC struct {
	Name     string // inspector.name
	HostName string
	// Client is the cluster's client, nil while the cluster does not exist
	// (a check run on a fresh lab).
	Client func() *kube.Reader
}

var _ step.Step = (*RBAC)(nil)

// ID implements step.Step.
func (s *RBAC) ID() string { return "rbac" }

// Host implements step.Step.
func (s *RBAC) Host() string { return s.HostName }

func (s *RBAC) desiredRules(ctx context.Context) ([]rbacv1.PolicyRule, error) {
	_, lists, err := s.Client().ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discover API resources: %w", err)
	}
	return Rules(lists), nil
}

// Check implements step.Step.
func (s *RBAC) Check(ctx context.Context) (step.Plan, error) {
	if s.Client() == nil {
		return step.Plan{Changes: []step.Change{{Target: "inspector " + s.Name, Action: step.Create, Summary: "create ServiceAccount, ClusterRole and ClusterRoleBinding " + s.Name + " once the cluster exists"}}}, nil
	}
	cs := s.Client()
	rules, err := s.desiredRules(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	sa, cr, crb := s.desired(rules)
	applies, err := applyEach(sa, cr, crb)
	if err != nil {
		return step.Plan{}, err
	}
	var p step.Plan
	add := func(target string, a step.Action, summary string, apply effect.Apply) {
		p.Changes = append(p.Changes, step.Change{Target: target, Action: a, Summary: summary, Effects: []effect.Effect{apply}})
	}
	if _, err := cs.ServiceAccounts(Namespace).Get(ctx, s.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		add("serviceaccount/"+s.Name, step.Create, "create ServiceAccount "+Namespace+"/"+s.Name, applies[0])
	} else if err != nil {
		return step.Plan{}, err
	}
	cur, err := cs.ClusterRoles().Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		add("clusterrole/"+s.Name, step.Create, "create ClusterRole "+s.Name+" (read all but Secrets)", applies[1])
	case err != nil:
		return step.Plan{}, err
	case !reflect.DeepEqual(cur.Rules, rules):
		add("clusterrole/"+s.Name, step.Update, "update ClusterRole "+s.Name+" to the API's current resources", applies[1])
	}
	curB, err := cs.ClusterRoleBindings().Get(ctx, s.Name, metav1.GetOptions{})
	wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: s.Name, Namespace: Namespace}}
	switch {
	case apierrors.IsNotFound(err):
		add("clusterrolebinding/"+s.Name, step.Create, "create ClusterRoleBinding "+s.Name, applies[2])
	case err != nil:
		return step.Plan{}, err
	case !reflect.DeepEqual(curB.Subjects, wantSubj) || curB.RoleRef.Name != s.Name || curB.RoleRef.Kind != "ClusterRole":
		add("clusterrolebinding/"+s.Name, step.Update, "update ClusterRoleBinding "+s.Name, applies[2])
	}
	if p.Empty() {
		p.Note = "ServiceAccount, ClusterRole and binding " + s.Name + " as desired"
	}
	return p, nil
}

// desired are the three objects, as server-side apply configurations.
func (s *RBAC) desired(rules []rbacv1.PolicyRule) (*corev1ac.ServiceAccountApplyConfiguration, *rbacv1ac.ClusterRoleApplyConfiguration, *rbacv1ac.ClusterRoleBindingApplyConfiguration) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "mgmtctl"}
	sa := corev1ac.ServiceAccount(s.Name, Namespace).WithLabels(labels)
	cr := rbacv1ac.ClusterRole(s.Name).WithLabels(labels)
	for _, r := range rules {
		cr.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	crb := rbacv1ac.ClusterRoleBinding(s.Name).WithLabels(labels).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(s.Name)).
		WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(s.Name).WithNamespace(Namespace))
	return sa, cr, crb
}

// applyEach is the Apply effect of the ServiceAccount, the ClusterRole
// and the binding, in that order.
func applyEach(sa *corev1ac.ServiceAccountApplyConfiguration, cr *rbacv1ac.ClusterRoleApplyConfiguration, crb *rbacv1ac.ClusterRoleBindingApplyConfiguration) ([]effect.Apply, error) {
	var out []effect.Apply
	for _, o := range []struct {
		r   schema.GroupVersionResource
		obj any
	}{
		{corev1.SchemeGroupVersion.WithResource("serviceaccounts"), sa},
		{rbacv1.SchemeGroupVersion.WithResource("clusterroles"), cr},
		{rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"), crb},
	} {
		a, err := effect.ApplyOf(o.r, o.obj)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// TokenExpiry reads a JWT's exp claim (the token is not verified: it is
// ours, read back from our own file).
func TokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// Fresh reports whether an existing inspector kubeconfig can stay: same
// server and CA, and a token with more than a quarter of ttl left.
func Fresh(cur []byte, name, server string, ca []byte, ttl time.Duration, now time.Time) bool {
	c, err := clientcmd.Load(cur)
	if err != nil {
		return false
	}
	cl, ai := c.Clusters[name], c.AuthInfos[name]
	if cl == nil || ai == nil || cl.Server != server || string(cl.CertificateAuthorityData) != string(ca) || c.CurrentContext != name {
		return false
	}
	exp, ok := TokenExpiry(ai.Token)
	return ok && exp.Sub(now) > ttl/4
}
