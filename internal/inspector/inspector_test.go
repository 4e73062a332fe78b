package inspector

import (
	"github.com/mgmtctl/mgmtctl/internal/effect"

	"encoding/base64"
	"fmt"
	"reflect"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRules(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Verbs: []string{"get", "list", "watch", "create"}},
			{Name: "pods/exec", Verbs: []string{"create", "get"}},
			{Name: "pods/log", Verbs: []string{"get"}},
			{Name: "secrets", Verbs: []string{"get", "list"}},
			{Name: "serviceaccounts/token", Verbs: []string{"create"}},
			{Name: "bindings", Verbs: []string{"create"}},
			{Name: "namespaces", Verbs: []string{"get", "list"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Verbs: []string{"list"}}}},
		{GroupVersion: "operator.cluster.x-k8s.io/v1alpha2", APIResources: []metav1.APIResource{{Name: "coreproviders", Verbs: []string{"list"}}}},
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces", "pods"}, Verbs: readVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: readVerbs},
		{APIGroups: []string{"operator.cluster.x-k8s.io"}, Resources: []string{"coreproviders"}, Verbs: readVerbs},
	}
	if got := Rules(lists); !reflect.DeepEqual(got, want) {
		t.Errorf("Rules =\n%v\nwant\n%v", got, want)
	}
}

func jwt(exp int64) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d}`, exp))) + ".sig"
}

func TestFresh(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ttl := 168 * time.Hour
	ca := []byte("CA")
	mk := func(exp time.Time, server string) []byte {
		b, err := effect.TokenKubeconfigBytes("ro", server, ca, jwt(exp.Unix()))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		cur  []byte
		want bool
	}{
		{"just minted", mk(now.Add(ttl), "https://192.0.2.50:6443"), true},
		{"half left", mk(now.Add(ttl/2), "https://192.0.2.50:6443"), true},
		{"under a quarter left", mk(now.Add(ttl/4-time.Minute), "https://192.0.2.50:6443"), false},
		{"expired", mk(now.Add(-time.Hour), "https://192.0.2.50:6443"), false},
		{"other server", mk(now.Add(ttl), "https://192.0.2.51:6443"), false},
		{"garbage", []byte("not yaml: ["), false},
	}
	for _, tt := range tests {
		if got := Fresh(tt.cur, "ro", "https://192.0.2.50:6443", ca, ttl, now); got != tt.want {
			t.Errorf("%s: Fresh = %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, ok := TokenExpiry("a.b"); ok {
		t.Error("malformed token has an expiry")
	}
}
