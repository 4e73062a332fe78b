package k3s

import (
	"strings"
	"sync/atomic"
	_ "unsafe" // go:linkname
)

// dynamicGitVersion is the version component-base's version.Get() reports,
// which /version and the apiserver's effective version read. Upstream k3s
// stamps it with -ldflags at build time; the lab builds one binary and
// "releases" it under several versions (the trailer), so it is set at
// start instead. component-base's own SetDynamicVersion refuses a version
// whose major.minor.patch differs from the build's, hence the linkname.
//
//go:linkname dynamicGitVersion k8s.io/component-base/version.dynamicGitVersion
var dynamicGitVersion atomic.Value

// reportReleaseVersion makes the API server report the release this binary
// was installed as ("v1.35.7+k3s1"), as real k3s does: /version's
// gitVersion, and major/minor with it, since the apiserver derives its
// binary version from it. It returns the API server flag that makes it
// emulate that minor release too (the emulation version was fixed at the
// build's minor when the flags were registered, and must not exceed the
// binary version). An unreleased build keeps the version it was built
// with, and needs no flag.
func reportReleaseVersion(v string) []string {
	if v == "" || strings.HasPrefix(v, "v0.0.0") {
		return nil
	}
	major, rest, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	dynamicGitVersion.Store(v)
	return []string{"--emulated-version=" + major + "." + minor}
}
