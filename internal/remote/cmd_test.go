package remote

import "testing"

func TestCmdLine(t *testing.T) {
	tests := []struct {
		name string
		cmd  Cmd
		root bool
		want string
	}{
		{"plain", QMConfig("110").Cmd(), true, "qm config 110"},
		{"root needs no sudo", Command("qm", "start", "110").AsRoot(), true, "qm start 110"},
		{"non-root becomes root without a prompt", Command("systemctl", "restart", "k3s").AsRoot(), false, "sudo -n -- systemctl restart k3s"},
		{"non-root without sudo", ServiceActive("k3s").Cmd(), false, "systemctl is-active k3s"},
		{"values are quoted", Command("qm", "set", "110", "--name", "lab mgmt; reboot"), true, "qm set 110 --name 'lab mgmt; reboot'"},
		{"script args stay positional", Script("echo", `echo "$1"`, "$(id)").AsRoot(), false, `sudo -n -- sh -c 'echo "$1"' sh '$(id)'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cmd.line(tt.root)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("line = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseBatchRejectsTruncatedOutput(t *testing.T) {
	if _, err := parseBatch([]byte("partial output"), "m", 1); err == nil {
		t.Error("truncated batch output accepted")
	}
}
