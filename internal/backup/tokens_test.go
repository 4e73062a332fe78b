package backup

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
)

// TestTokenAt: a snapshot restores under the token the cluster had when
// it was taken: the newest recorded at or before its time.
func TestTokenAt(t *testing.T) {
	t1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(48 * time.Hour)
	known := []KnownToken{{Token: "K10old", Since: t1}, {Token: "K10new", Since: t2}}
	for _, tc := range []struct {
		name string
		want string // "" for none
	}{
		{"etcd-snapshot-lab-mgmt-" + itoa(t1.Add(-time.Hour)), ""},
		{"etcd-snapshot-lab-mgmt-" + itoa(t1), "K10old"},
		{"etcd-snapshot-lab-mgmt-" + itoa(t2.Add(-time.Second)), "K10old"},
		{"etcd-snapshot-lab-mgmt-2-" + itoa(t2.Add(time.Hour)), "K10new"},
	} {
		at, ok := SnapshotTime(tc.name)
		if !ok {
			t.Fatalf("SnapshotTime(%q) found none", tc.name)
		}
		k, ok := TokenAt(known, at)
		if got := map[bool]string{true: k.Token}[ok]; got != tc.want {
			t.Errorf("%s: token %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, ok := SnapshotTime("on-demand"); ok {
		t.Error("a name without a time has one")
	}
}

func itoa(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// TestKeepToken: the cluster's token is recorded once, a new cluster's
// appended, the file written 0600 by a plan that shows no token.
func TestKeepToken(t *testing.T) {
	dir := t.TempDir()
	h := &remotetest.Host{HostName: "lab-mgmt", Files: map[string][]byte{TokenPath: []byte("K10first::server:abc\n")}}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := &KeepToken{Dir: dir, Now: func() time.Time { return now }, Server: func() *VM { return &VM{Name: "lab-mgmt", Host: h} }}
	write := func() {
		t.Helper()
		p, err := s.Check(context.Background())
		if err != nil || len(p.Changes) != 1 {
			t.Fatalf("plan %+v, %v", p, err)
		}
		if strings.Contains(p.Changes[0].Summary, "K10") {
			t.Errorf("the plan shows the token: %s", p.Changes[0].Summary)
		}
		w := p.Changes[0].Effects[0].(effect.WriteLocal)
		os.WriteFile(w.Path, w.Content, 0o600)
	}
	write()
	if p, err := s.Check(context.Background()); err != nil || !p.Empty() {
		t.Errorf("second check: %+v, %v", p, err)
	}
	h.Files[TokenPath] = []byte("K10second::server:def\n")
	now = now.Add(time.Hour)
	write()
	known, err := ReadTokens(dir)
	if err != nil || len(known) != 2 || known[0].Token != "K10first::server:abc" || known[1].Token != "K10second::server:def" || !known[1].Since.Equal(now) {
		t.Errorf("recorded %+v, %v", known, err)
	}
	if p, _ := (&KeepToken{Dir: dir, Server: func() *VM { return &VM{Name: "lab-mgmt"} }}).Check(context.Background()); p.Skip == "" {
		t.Errorf("no VM yet: %+v", p)
	}
	if _, err := os.Stat(filepath.Join(dir, TokensFile)); err != nil {
		t.Fatal(err)
	}
}
