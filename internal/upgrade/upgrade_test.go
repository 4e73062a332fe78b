package upgrade

import (
	"bytes"
	"strings"
	"testing"
)

func TestNewestInLine(t *testing.T) {
	tests := []struct {
		pinned string
		vs     []string
		want   string
	}{
		{"v1.35.7+k3s1", []string{"v1.35.7+k3s1", "v1.35.8+k3s1", "v1.36.3+k3s1", "v1.35.8+k3s2", "v1.35.9-rc1+k3s1"}, "v1.35.8+k3s2"},
		{"v1.21.1", []string{"v1.21.2", "v1.21.10", "v1.22.0", "v1.21.3-alpha.1"}, "v1.21.10"},
		{"0.28.0", []string{"0.27.0", "0.28.0", "0.28.1"}, "0.28.1"},
		{"v0.9.1", []string{"v0.8.0", "v1.0.0"}, ""},
	}
	for _, tt := range tests {
		if got := NewestInLine(tt.pinned, tt.vs); got != tt.want {
			t.Errorf("NewestInLine(%s) = %q, want %q", tt.pinned, got, tt.want)
		}
	}
}

func TestWriteText(t *testing.T) {
	p := Plan{Components: []Component{
		{Name: "k3s", Running: "v1.35.7+k3s1", Pinned: "v1.35.8+k3s1", Newest: "v1.35.8+k3s1", Action: Upgrade},
		{Name: "cert-manager", Running: "v1.21.2", Pinned: "v1.21.2", Action: None, Note: "its newest release was not looked up"},
	}, Order: []string{"take a snapshot, then upgrade k3s"}, K3s: "one at a time", Contracts: []string{"cluster-api v1beta2"}}
	var b bytes.Buffer
	if err := WriteText(&b, p); err != nil {
		t.Fatal(err)
	}
	want := `COMPONENT     RUNNING       PINNED        NEWEST IN LINE  ACTION
k3s           v1.35.7+k3s1  v1.35.8+k3s1  v1.35.8+k3s1    upgrade
cert-manager  v1.21.2       v1.21.2       ?               none

notes:
  cert-manager: its newest release was not looked up

apply will, in this order:
  1. take a snapshot, then upgrade k3s

k3s: one at a time
contracts: cluster-api v1beta2
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	if p.Changes() != 1 || p.Refusals() != 0 {
		t.Errorf("changes %d refusals %d", p.Changes(), p.Refusals())
	}
	b.Reset()
	WriteJSON(&b, p)
	if !strings.Contains(b.String(), `"action": "upgrade"`) {
		t.Errorf("json: %s", b.String())
	}
}
