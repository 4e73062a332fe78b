package addons

import (
	"context"
	"io/fs"
	"reflect"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
)

// absentFiles is a recording host on which no file exists yet.
type absentFiles struct{ *remotetest.Host }

func (absentFiles) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return nil, fs.ErrNotExist
}

// TestManifestWritesThePlan: the HelmChart step writes exactly the file
// its plan carries (path, bytes, mode, owner); the payload is replaced
// after Check and the replacement is written.
func TestManifestWritesThePlan(t *testing.T) {
	h := absentFiles{&remotetest.Host{HostName: "lab-mgmt"}}
	s := &Manifest{V: &VM{Name: "lab-mgmt", Host: h}, C: CertManager(config.Chart{Repo: config.DefaultCertManagerRepo, Version: config.DefaultCertManager})}
	p, err := s.Check(context.Background())
	if err != nil || len(p.Changes) != 1 {
		t.Fatalf("plan: %+v %v", p, err)
	}
	f := p.Changes[0].Payload.(remote.File)
	if f.Path != s.C.Path() || string(f.Content) != string(s.C.Render()) || f.Mode != 0o600 || f.Owner != "root:root" || !f.Sudo || p.Changes[0].Diff.After != string(f.Content) {
		t.Errorf("payload %+v does not match the plan's diff", f)
	}
	planned := remote.File{Path: "/planned.yaml", Content: []byte("planned\n"), Mode: 0o600}
	p.Changes[0].Payload = planned
	if err := s.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if w := h.Wrote(); len(w) != 1 || w[0].Path != planned.Path || string(w[0].Content) != "planned\n" {
		t.Errorf("wrote %+v, want the planned file", w)
	}
	// Strict: the planned write and nothing else changed the host.
	if got := h.Effects(); !reflect.DeepEqual(got, []string{"write /planned.yaml"}) {
		t.Errorf("effects %q, want only the planned write", got)
	}
}
