package layering

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mgmtctl/mgmtctl/"

// domain are the phases' packages: each knows the vocabulary below it and
// none of the others (addons reads capi's names of the operator's API).
var domain = []string{"proxmox", "k3s", "addons", "capi", "kubeconfig", "inspector"}

// below is what every domain package may use. Only addons, capi and k3s
// read config's vocabulary (a chart pin, a provider, a k3s release); the
// others take an input struct of their own, which phase fills from the
// config.
var below = []string{"step", "effect", "remote", "kube", "shell", "pveaccess", "pve", "s3layout", "version"}

// allowed is, for every package of the tool, the packages of the tool it
// may import (not counting tests). A package missing here fails the test:
// a new package takes a place in the layering when it is written.
var allowed = map[string][]string{
	"cmd/mgmtctl": {"cli"},
	"cli":         {"phase", "session", "statuscheck", "engine", "ui", "runlog", "config", "redact", "remote", "step", "health", "kubeconfig", "backup", "localfile", "pveaccess", "pve", "pvelock", "preflight", "upgrade"},
	"phase":       append(append([]string{"session", "config", "laptop", "backup", "preflight", "upgrade"}, domain...), below...),
	// The run's connections, host keys, the VM record and its way to the
	// cluster: it knows the domain packages whose facts it keeps (the
	// VM record wait-ssh reads, k3s's kubeconfig and etcd health).
	"session": {"config", "effect", "kube", "kubeconfig", "proxmox", "k3s", "remote", "step", "pve", "pveaccess", "pvelock"},
	// What only status looks at, beside health.
	"statuscheck": {"session", "health", "inspector", "k3s", "kube", "step"},
	"proxmox":     below,
	"k3s":         append([]string{"config"}, below...), // the K3sRelease type
	"addons":      append([]string{"capi", "config"}, below...),
	"capi":        append([]string{"config"}, below...),
	"kubeconfig":  below,
	"laptop":      below,
	"backup":      below,
	"inspector":   append([]string{"kubeconfig"}, below...),
	"health":      {"engine", "step"},
	"engine":      {"step"},
	"ui":          {"engine", "step", "diff", "redact"},
	"runlog":      {"engine", "redact"},
	"remote":      {"shell", "redact", "localfile"},
	"step":        {"effect", "remote"},
	"effect":      {"remote", "kube", "localfile", "pve"},
	"config":      {"version"},
	"kube":        nil,
	"shell":       nil,
	// Where a cluster's snapshots go in the bucket.
	"s3layout": nil,
	// The checks before a run's first change: a runner and the laptop's
	// record of releases found; phase builds them.
	"preflight": nil,
	// upgrade plan's report: its rows, the order, rendering.
	"upgrade": {"version"},
	// The one ordering of versions: Proxmox VE's, the pins', k3s's.
	"version": nil,
	// Proxmox VE's privileges: what a token needs, pveum, the check.
	"pveaccess": {"shell"},
	// The Proxmox VE API's client (api access): calls, tasks, reads.
	"pve": nil,
	// api access's run lock on Proxmox, a generation of pools.
	"pvelock":    nil,
	"redact":     nil,
	"diff":       nil,
	"localfile":  nil,
	"layering":   nil,
	"standalone": nil,
	// A developer's tool: summarises go test -json (docs/testing.md).
	"hack/testtimes": nil,
	// Test helpers.
	"steptest":          {"step", "effect", "remote", "kube"},
	"remote/sshtest":    nil,
	"remote/remotetest": {"remote"},
}

// TestImportsPointOneWay reads every package's imports from its source
// (build tags of this platform) and fails on one the layering forbids.
func TestImportsPointOneWay(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		// The lab is its own module; testdata and dot-dirs hold no packages.
		if rel == "lab" || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && rel != ".") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(p, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		name := strings.TrimPrefix(rel, "internal/")
		may, known := allowed[name]
		if !known {
			t.Errorf("package %s has no place in the layering: add it to allowed (and to ARCHITECTURE.md)", rel)
			return nil
		}
		seen[name] = true
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module+"lab") {
				t.Errorf("%s imports the lab (%s): the tool never imports its simulator", rel, imp)
				continue
			}
			own, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			own = strings.TrimPrefix(own, "internal/")
			if !slices.Contains(may, own) {
				t.Errorf("%s imports %s, against the layering in ARCHITECTURE.md (it may import: %s)", rel, own, strings.Join(may, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range allowed {
		if !seen[name] {
			t.Errorf("allowed lists %s, which is no package any more", name)
		}
	}
}
