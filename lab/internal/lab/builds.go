package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// BuildsFile, in the lab's directory, names the directory labsim and
// upstream's builds are in (labsim up writes it).
const BuildsFile = "builds"

// upstreamBuilds are the names of upstream's builds the lab's kubelet runs
// (cluster-api-operator-<version>, cert-manager-<version> and the links
// to it that name each component).
var upstreamBuilds = []string{"cluster-api-operator-v*", "cert-manager-*", "versitygw"}

// syncBuilds brings into the lab's bin/ each of upstream's builds in
// builds (the node's copy of an image, which the kubelet runs): every one
// with replace (labsim up: the newest builds), else those it does not
// have yet. A link to a build not there yet is left for later.
func (l *Lab) syncBuilds(builds string, replace bool) (added []string, err error) {
	for _, pattern := range upstreamBuilds {
		found, _ := filepath.Glob(filepath.Join(builds, pattern))
		for _, src := range found {
			dst := l.path("bin", filepath.Base(src))
			if _, err := os.Stat(src); err != nil || (exists(dst) && !replace) {
				continue
			}
			if err := linkOrCopy(src, dst); err != nil {
				return added, err
			}
			added = append(added, filepath.Base(src))
		}
	}
	return added, nil
}

// watchBuilds syncs the builds each time a file is renamed into or
// written in builds, until ctx ends: make demo builds upstream's binaries
// while the lab starts, and the kubelet, which retries a container whose
// image it cannot pull yet, finds each in the lab's bin/ once it is built
// (hack/build.sh renames a first build into place, so a build has its
// name only when it is whole).
func (l *Lab) watchBuilds(ctx context.Context, builds string, logf func(format string, args ...any)) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	if _, err := unix.InotifyAddWatch(fd, builds, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_CREATE); err != nil {
		f.Close()
		return fmt.Errorf("watch %s: %w", builds, err)
	}
	go func() {
		<-ctx.Done()
		f.Close() // ends the Read below
	}()
	go func() {
		buf := make([]byte, 64*1024)
		for {
			// An event's content does not matter: any change is a reason
			// to look again, and syncBuilds looks at everything.
			if _, err := f.Read(buf); err != nil {
				return
			}
			added, err := l.syncBuilds(builds, false)
			if err != nil {
				logf("sync upstream's builds from %s: %v", builds, err)
			}
			if len(added) > 0 {
				logf("upstream's builds now in the lab: %s", strings.Join(added, ", "))
			}
		}
	}()
	return nil
}
