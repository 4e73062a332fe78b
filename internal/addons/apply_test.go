package addons

import (
	"context"
	"io/fs"
	"reflect"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// absentFiles is a recording host on which no file exists yet.
type absentFiles struct{ *remotetest.Host }

func (absentFiles) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return nil, fs.ErrNotExist
}

// TestManifestWritesThePlan: the HelmChart step's plan writes exactly the
// file its diff shows (path, bytes, mode, owner), on the VM the run
// reached, and carrying it out writes that and nothing else.
func TestManifestWritesThePlan(t *testing.T) {
	h := absentFiles{&remotetest.Host{HostName: "lab-mgmt-1"}}
	s := &Manifest{V: &VM{Name: "lab-mgmt", Host: h}, C: CertManager(config.Chart{Repo: config.DefaultCertManagerRepo, Version: config.DefaultCertManager})}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan: %+v %v", p, err)
	}
	want := []effect.Effect{effect.Write{Host: "lab-mgmt-1", File: remote.File{Path: s.C.Path(), Content: s.C.Render(), Mode: 0o600, Owner: "root:root", Sudo: true}}}
	if !reflect.DeepEqual(p.Changes[0].Effects, want) || p.Changes[0].Diff.After != string(s.C.Render()) {
		t.Errorf("effects %+v do not match the plan's diff", p.Changes[0].Effects)
	}
	if err := step.CarryOut(context.Background(), s, p, steptest.Executor(nil, h)); err != nil {
		t.Fatal(err)
	}
	// Strict: the planned write and nothing else changed the host.
	if got := h.Effects(); !reflect.DeepEqual(got, []string{"write " + s.C.Path()}) {
		t.Errorf("effects %q, want only the planned write", got)
	}
}
