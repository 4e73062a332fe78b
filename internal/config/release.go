package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/version"
)

// K3sRelease is a k3s release tag, v1.35.7+k3s1, parsed: Kubernetes'
// major.minor.patch and k3s's own build number.
type K3sRelease struct {
	Major, Minor, Patch, Build int
}

// ParseK3sRelease reads "vMAJOR.MINOR.PATCH+k3sBUILD".
func ParseK3sRelease(s string) (K3sRelease, error) {
	if !k3sVersion.MatchString(s) {
		return K3sRelease{}, fmt.Errorf("%q is not a k3s release tag like v1.35.7+k3s1", s)
	}
	kube, build, _ := strings.Cut(strings.TrimPrefix(s, "v"), "+k3s")
	parts := strings.Split(kube, ".")
	var r K3sRelease
	for i, p := range []*int{&r.Major, &r.Minor, &r.Patch} {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return K3sRelease{}, fmt.Errorf("%q: %w", s, err)
		}
		*p = n
	}
	n, err := strconv.Atoi(build)
	if err != nil {
		return K3sRelease{}, fmt.Errorf("%q: %w", s, err)
	}
	r.Build = n
	return r, nil
}

// String is the release tag.
func (r K3sRelease) String() string {
	return fmt.Sprintf("v%d.%d.%d+k3s%d", r.Major, r.Minor, r.Patch, r.Build)
}

// Compare orders releases: -1, 0 or +1 as r is older, the same or newer
// (package version's one ordering: Kubernetes' numbers, then k3s's
// build).
func (r K3sRelease) Compare(o K3sRelease) int {
	return version.Compare(r.String(), o.String())
}
