package proxmox

import "testing"

func TestMissingVM(t *testing.T) {
	for _, c := range []struct {
		stderr string
		want   bool
	}{
		{"Configuration file 'nodes/pve/qemu-server/110.conf' does not exist\n", true},
		{"", false},
		{"VM 110 is running - destroy failed\n", false},
		{"storage 'local-lvm' does not exist\n", false},
	} {
		if got := missingVM([]byte(c.stderr)); got != c.want {
			t.Errorf("%q: %v, want %v", c.stderr, got, c.want)
		}
	}
}
