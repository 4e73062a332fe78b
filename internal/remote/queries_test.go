package remote

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
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
		{"FileSHA256AndSize", FileSHA256AndSize("/s/snap"), `sh -c 'sha256sum < "$1" | cut -d'\'' '\'' -f1; stat -c %s -- "$1"' sh /s/snap`},
		{"VerifiedSHA256", VerifiedSHA256("/i.img"), "sh -c 'if read -r sum size mtime < \"$1.sha256\" 2>/dev/null &&\n  [ \"$(stat -c '\\''%s %.9Y'\\'' -- \"$1\" 2>/dev/null)\" = \"$size $mtime\" ]; then\n  echo \"$sum\"\nelif [ -e \"$1\" ]; then\n  sha256sum < \"$1\" | cut -d'\\'' '\\'' -f1\nfi' sh /i.img"},
		{"EncryptionConfigSummary", EncryptionConfigSummary("/c.json"), "sh -c '[ -e \"$1\" ] || exit 0\nsum=$(sha256sum < \"$1\" | cut -d'\\'' '\\'' -f1) || exit 1\nfirst=$(grep -o '\\''\"providers\":\\[{\"[a-z]*\"'\\'' \"$1\" | head -n 1 | sed '\\''s/.*{\"//; s/\"$//'\\'')\necho \"$sum ${first:-unknown}\"' sh /c.json"},
		{"FileContent", FileContent("/etc/rancher/k3s/config.yaml"), "cat -- /etc/rancher/k3s/config.yaml"},
		{"FileModTime", FileModTime("/etc/rancher/k3s/config.yaml"), "stat -c %.9Y -- /etc/rancher/k3s/config.yaml"},
		{"ServiceActive", ServiceActive("k3s"), "systemctl is-active k3s"},
		{"ServiceStartedAt", ServiceStartedAt("k3s"), "systemctl show -p ActiveEnterTimestamp --value --timestamp=us+utc k3s"},
		{"ServiceFileState", ServiceFileState("k3s"), "systemctl is-enabled k3s"},
		{"ServiceStateUnder", ServiceStateUnder("/run/x.lock", "k3s"), "sh -c 'if [ -e \"$1\" ]; then\n  exec 9<\"$1\"\n  flock -s -w 120 9 || exit 75\nfi\nsystemctl is-active \"$2\"\nsystemctl is-enabled \"$2\"\nexit 0' sh /run/x.lock k3s"},
		{"PathExists", PathExists("/var/lib/rancher/k3s/server/tls"), "test -e /var/lib/rancher/k3s/server/tls"},
		{"PackageStatus", PackageStatus("qemu-guest-agent"), `dpkg-query -W '-f=${Status}' qemu-guest-agent`},
		{"K3sVersion", K3sVersion(), "sh -c 'bin=$(command -v k3s) || exit 127\nif read -r v size mtime < \"$1\" 2>/dev/null && [ \"$(stat -L -c '\\''%s %.9Y'\\'' -- \"$bin\")\" = \"$size $mtime\" ]; then\n  echo \"k3s version $v\"\nelse\n  exec k3s --version\nfi' sh /var/lib/mgmtctl/k3s-version"},
		{"CommandPath", CommandPath("k3s"), `sh -c 'command -v "$1"' sh k3s`},
		{"CloudInitStatus", CloudInitStatus(), "cloud-init status"},
		{"EtcdSnapshots", EtcdSnapshots(), "sh -c '[ ! -r /etc/default/k3s ] || { set -a; . /etc/default/k3s; set +a; }\nexec k3s etcd-snapshot \"$@\"' sh ls"},
		{"EtcdSnapshotsUnder", EtcdSnapshotsUnder("k3s/mgmt"), "sh -c '[ ! -r /etc/default/k3s ] || { set -a; . /etc/default/k3s; set +a; }\nexec k3s etcd-snapshot \"$@\"' sh ls --etcd-s3-folder=k3s/mgmt"},
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

// TestVerifiedSHA256: the recorded sum while the file is as it was
// recorded, the file's own sum once it changed or without a record, and
// nothing for a file that is not there; SHA256Record writes the record it
// reads.
func TestVerifiedSHA256(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "noble.img")
	sum := func() string {
		t.Helper()
		c := VerifiedSHA256(img).c
		out, err := exec.Command(c.Args[0], c.Args[1:]...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := sum(); got != "" {
		t.Errorf("no file: %q", got)
	}
	os.WriteFile(img, []byte("image"), 0o644)
	const real = "6105d6cc76af400325e94d588ce511be5bfdbb73b437dc51eca43917d7a43e3d" // sha256 of "image"
	if got := sum(); got != real {
		t.Errorf("no record: %q", got)
	}
	// A record as the download writes it, with a sum that is not the
	// file's: read from the record, the file is not hashed.
	const recorded = "0000000000000000000000000000000000000000000000000000000000000000"
	if out, err := exec.Command("sh", "-c", "want=$1 dst=$2\n"+SHA256Record, "sh", recorded, img).CombinedOutput(); err != nil {
		t.Fatalf("record: %v %s", err, out)
	}
	if got := sum(); got != recorded {
		t.Errorf("recorded: %q", got)
	}
	// The file changed since (its modification time moved): hashed.
	later := time.Now().Add(time.Minute)
	os.Chtimes(img, later, later)
	if got := sum(); got != real {
		t.Errorf("changed since the record: %q", got)
	}
}

// TestK3sVersion: the recorded version while the binary is as recorded,
// k3s --version once it changed or without a record, exit 127 without k3s.
func TestK3sVersion(t *testing.T) {
	dir := t.TempDir()
	bin, rec := filepath.Join(dir, "k3s"), filepath.Join(dir, "record")
	read := func() (string, int) {
		t.Helper()
		c := K3sVersion().c
		args := append(append([]string(nil), c.Args[:len(c.Args)-1]...), rec)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin")
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return strings.TrimSpace(string(out)), code
	}
	if _, code := read(); code != 127 {
		t.Errorf("no k3s: exit %d", code)
	}
	os.WriteFile(bin, []byte("#!/bin/sh\necho 'k3s version v1.35.7+k3s1 (b261d34e)'\n"), 0o755)
	if got, _ := read(); got != "k3s version v1.35.7+k3s1 (b261d34e)" {
		t.Errorf("no record: %q", got)
	}
	fi, _ := os.Stat(bin)
	os.WriteFile(rec, []byte(fmt.Sprintf("v1.35.6+k3s1 %d %d.%09d\n", fi.Size(), fi.ModTime().Unix(), fi.ModTime().Nanosecond())), 0o644)
	if got, _ := read(); got != "k3s version v1.35.6+k3s1" {
		t.Errorf("recorded: %q", got)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(bin, later, later)
	if got, _ := read(); got != "k3s version v1.35.7+k3s1 (b261d34e)" {
		t.Errorf("the binary changed since the record: %q", got)
	}
}
