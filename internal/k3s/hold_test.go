package k3s

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestHold: the drop-in names the restore it holds for; Release plans its
// removal and k3s's restart only while it is there; the config step of
// apply refuses a server a restore cut short still holds, naming the
// restore to run again.
func TestHold(t *testing.T) {
	ctx := context.Background()
	hold := RenderHold("s3:etcd-snapshot-lab-mgmt-1765090860")
	if got := HeldBy(hold); got != "s3:etcd-snapshot-lab-mgmt-1765090860" {
		t.Errorf("HeldBy = %q", got)
	}
	for _, want := range []string{"\ndisable-agent: true\n", "\nkube-apiserver-arg+:\n  - disable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook\n"} {
		if !strings.Contains(string(hold), want) {
			t.Errorf("the drop-in lacks %q:\n%s", want, hold)
		}
	}

	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  []string
	}{
		{"held", map[string][]byte{HoldPath: hold}, []string{"on srv1: remove " + HoldPath + " and restart k3s (as root)"}},
		{"not held", map[string][]byte{}, nil},
	} {
		v := &VM{Spec: Spec{Name: "srv1"}, Host: &remotetest.Host{HostName: "srv1", Files: tc.files}}
		p, err := (&Release{V: v}).Check(ctx)
		if err != nil || strings.Join(steptest.Effects(p), "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s: %q, %v", tc.name, steptest.Effects(p), err)
		}
		if tc.want != nil && (p.Changes[0].Action != step.Delete || !strings.Contains(p.Changes[0].Summary, "s3:etcd-snapshot-lab-mgmt-1765090860")) {
			t.Errorf("%s: %+v", tc.name, p.Changes[0])
		}
	}

	v := &VM{Spec: Spec{Name: "srv1"}, Host: &remotetest.Host{HostName: "srv1", Files: map[string][]byte{}}, Hold: hold}
	_, err := (&Config{V: v}).Check(ctx)
	var held *HeldError
	if !errors.As(err, &held) || held.Server != "srv1" || !strings.Contains(err.Error(), "mgmtctl restore --from s3:etcd-snapshot-lab-mgmt-1765090860") {
		t.Errorf("config step on a held server: %v", err)
	}
}
