package remote

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestQueryVocabulary lists every read a Query can be, with the command
// line it sends: each changes nothing on its host. A new function of this
// package that returns a Query fails here until it is added below, on
// purpose; one that writes must be a Cmd, run by the Executor from a plan.
func TestQueryVocabulary(t *testing.T) {
	reads := []struct {
		name string
		q    Query
		want string
	}{
		{"QMConfig", QMConfig("110"), "qm config 110"},
		{"QMStatus", QMStatus("110"), "qm status 110 --verbose"},
		{"GuestHostKey", GuestHostKey("110", "ssh-ed25519"), "qm guest exec 110 -- cat /etc/ssh/ssh_host_ed25519_key.pub"},
		{"FileSHA256", FileSHA256("/var/lib/vz/template/iso/x.img"), "sha256sum -- /var/lib/vz/template/iso/x.img"},
		{"FileSHA256AndSize", FileSHA256AndSize("/s/snap"), `sh -c 'sha256sum < "$1" | cut -d'\'' '\'' -f1; stat -c %s -- "$1"' sh /s/snap`},
		{"FileContent", FileContent("/etc/rancher/k3s/config.yaml"), "cat -- /etc/rancher/k3s/config.yaml"},
		{"FileModTime", FileModTime("/etc/rancher/k3s/config.yaml"), "stat -c %.9Y -- /etc/rancher/k3s/config.yaml"},
		{"ServiceActive", ServiceActive("k3s"), "systemctl is-active k3s"},
		{"ServiceStartedAt", ServiceStartedAt("k3s"), "systemctl show -p ActiveEnterTimestamp --value --timestamp=us+utc k3s"},
		{"ServiceFileState", ServiceFileState("k3s"), "systemctl is-enabled k3s"},
		{"ServiceStateUnder", ServiceStateUnder("/run/x.lock", "k3s"), "sh -c 'if [ -e \"$1\" ]; then\n  exec 9<\"$1\"\n  flock -s -w 120 9 || exit 75\nfi\nsystemctl is-active \"$2\"\nsystemctl is-enabled \"$2\"\nexit 0' sh /run/x.lock k3s"},
		{"PackageStatus", PackageStatus("qemu-guest-agent"), `dpkg-query -W '-f=${Status}' qemu-guest-agent`},
		{"K3sVersion", K3sVersion(), `sh -c 'command -v k3s >/dev/null || exit 127; k3s --version'`},
		{"CommandPath", CommandPath("k3s"), `sh -c 'command -v "$1"' sh k3s`},
		{"CloudInitStatus", CloudInitStatus(), "cloud-init status"},
		{"EtcdSnapshots", EtcdSnapshots(), "sh -c '[ ! -r /etc/default/k3s ] || { set -a; . /etc/default/k3s; set +a; }\nexec k3s etcd-snapshot \"$@\"' sh ls"},
		{"ClusterVMs", ClusterVMs(), "pvesh get /cluster/resources --type vm --output-format json"},
		{"CloudInitWait", CloudInitWait(), "cloud-init status --wait"},
		{"PVEVersion", PVEVersion(), "pveversion"},
		{"PVEGet", PVEGet("/nodes/pve/network/vmbr0"), "pvesh get /nodes/pve/network/vmbr0 --output-format json"},
		{"VMConfigFiles", VMConfigFiles("110"), "sh -c 'for f in /etc/pve/nodes/*/qemu-server/\"$1\".conf; do\n  [ -e \"$f\" ] || continue\n  printf '\\''#path %s\\n'\\'' \"$f\"; cat -- \"$f\"\ndone' sh 110"},
	}
	var listed []string
	for _, r := range reads {
		listed = append(listed, r.name)
		if !r.q.c.ReadOnly {
			t.Errorf("%s is not read-only", r.name)
		}
		if got := r.q.c.String(); got != r.want {
			t.Errorf("%s sends %q, want %q", r.name, got, r.want)
		}
	}
	sort.Strings(listed)
	if got := strings.Join(queryConstructors(t), " "); got != strings.Join(listed, " ") {
		t.Errorf("the functions that return a Query are\n  %s\nthe reads listed here are\n  %s\nA Query is only a read: list a new one here, or make it a Cmd the Executor runs from a plan", got, strings.Join(listed, " "))
	}
}

// queryConstructors are this package's exported functions that return a
// Query (methods that derive one query from another, AsRoot and Allow,
// are not constructors).
func queryConstructors(t *testing.T) []string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil {
				continue
			}
			for _, r := range fn.Type.Results.List {
				if id, ok := r.Type.(*ast.Ident); ok && id.Name == "Query" {
					out = append(out, fn.Name.Name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
