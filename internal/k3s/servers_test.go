package k3s

import (
	"context"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
)

func TestWhoFoundsAndWhomTheyJoin(t *testing.T) {
	joined := &remotetest.Host{HostName: "s1", Files: map[string][]byte{ConfigPath: []byte("server: https://192.0.2.60:6443\ntoken-file: /etc/rancher/k3s/cluster-token\n")}}
	founding := &remotetest.Host{HostName: "s1", Files: map[string][]byte{ConfigPath: []byte("cluster-init: true\n")}}
	vm := func(name, installed string, h *remotetest.Host) *VM {
		v := &VM{Spec: Spec{Name: name}, Installed: installed}
		if h != nil {
			v.Host = h
		}
		return v
	}
	for _, c := range []struct {
		name      string
		vms       []*VM
		joins     bool
		seedIndex int
	}{
		{"a fresh cluster: the first founds it", []*VM{vm("s1", "", nil), vm("s2", "", nil), vm("s3", "", nil)}, false, 0},
		{"the first runs k3s: it stays the founder", []*VM{vm("s1", "v1.35.7+k3s1", founding), vm("s2", "v1.35.7+k3s1", nil), vm("s3", "", nil)}, false, 0},
		{"the first re-created while others run: it joins the second", []*VM{vm("s1", "", nil), vm("s2", "v1.35.7+k3s1", nil), vm("s3", "v1.35.7+k3s1", nil)}, true, 1},
		{"the first re-created, only the third runs", []*VM{vm("s1", "", nil), vm("s2", "", nil), vm("s3", "v1.35.7+k3s1", nil)}, true, 2},
		{"the first joined once already: it stays joined", []*VM{vm("s1", "v1.35.7+k3s1", joined), vm("s2", "v1.35.7+k3s1", nil), vm("s3", "v1.35.7+k3s1", nil)}, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			joins, err := FirstServerJoins(context.Background(), c.vms)
			if err != nil || joins != c.joins {
				t.Fatalf("joins %v %v, want %v", joins, err, c.joins)
			}
			if joins {
				c.vms[0].Spec.Join = "https://192.0.2.60:6443"
			}
			if got := Seed(c.vms); got != c.vms[c.seedIndex] {
				t.Errorf("seed %s, want %s", got.Name(), c.vms[c.seedIndex].Name())
			}
		})
	}
}
