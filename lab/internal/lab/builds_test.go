package lab

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchBuilds: a build renamed into the builds directory after the
// lab is up (as hack/build.sh installs a first build) comes into the
// lab's bin/ with the links that name it; a link to a build not there
// yet does not, and a build already in the lab is left as it is.
func TestWatchBuilds(t *testing.T) {
	builds := t.TempDir()
	l := &Lab{Dir: t.TempDir()}
	os.MkdirAll(l.path("bin"), 0o755)
	os.WriteFile(filepath.Join(builds, "cluster-api-operator-v0.28.0"), []byte("new"), 0o755)
	os.WriteFile(l.path("bin", "cluster-api-operator-v0.28.0"), []byte("lab's"), 0o755)
	os.Symlink("cert-manager-v1.21.2", filepath.Join(builds, "cert-manager-webhook-v1.21.2"))
	if added, err := l.syncBuilds(builds, false); err != nil || len(added) != 0 {
		t.Fatalf("before the build: %v, %v", added, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan string, 10)
	if err := l.watchBuilds(ctx, builds, func(format string, args ...any) { events <- format }); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(builds, ".cert-manager-v1.21.2.part")
	os.WriteFile(part, []byte("build"), 0o755)
	if err := os.Rename(part, filepath.Join(builds, "cert-manager-v1.21.2")); err != nil {
		t.Fatal(err)
	}
	for !exists(l.path("bin", "cert-manager-webhook-v1.21.2")) {
		select {
		case <-events:
		case <-time.After(10 * time.Second):
			t.Fatal("the build never came into the lab")
		}
	}
	if b, err := os.ReadFile(l.path("bin", "cert-manager-webhook-v1.21.2")); err != nil || string(b) != "build" {
		t.Errorf("the component's link: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(l.path("bin", "cluster-api-operator-v0.28.0")); string(b) != "lab's" {
		t.Errorf("the lab's own copy was replaced: %q", b)
	}
}
