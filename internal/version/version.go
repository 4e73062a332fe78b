// Package version is the one ordering of the version strings mgmtctl
// compares: Proxmox VE's ("8.3.5"), the pins' ("v1.12.11", "0.28.0") and
// k3s's release tags ("v1.35.7+k3s1", whose k3s build counts after the
// patch).
package version

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Numbers are v's dotted numbers (a leading v dropped, a pre-release
// "-rc.1" ignored) and then a build's number, what follows the last
// letter of its "+" suffix ("+k3s2": 2). A part that is not a number
// ends them.
func Numbers(v string) []int {
	core, build, _ := strings.Cut(strings.TrimPrefix(v, "v"), "+")
	core, _, _ = strings.Cut(core, "-")
	var out []int
	for _, p := range strings.Split(core, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return out
		}
		out = append(out, n)
	}
	if i := strings.LastIndexFunc(build, func(r rune) bool { return r < '0' || r > '9' }); build != "" {
		if n, err := strconv.Atoi(build[i+1:]); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Compare is -1, 0 or +1 as a is older than, the same as or newer than
// b, number by number, a missing number counting as 0 ("8.4" is
// "8.4.0").
func Compare(a, b string) int {
	x, y := Numbers(a), Numbers(b)
	for i := range max(len(x), len(y)) {
		var m, n int
		if i < len(x) {
			m = x[i]
		}
		if i < len(y) {
			n = y[i]
		}
		if c := cmp.Compare(m, n); c != 0 {
			return c
		}
	}
	return 0
}

// Less reports whether a is older than b.
func Less(a, b string) bool { return Compare(a, b) < 0 }

// Line is v's "major.minor".
func Line(v string) (string, bool) {
	n := Numbers(v)
	if len(n) < 2 {
		return "", false
	}
	return fmt.Sprintf("%d.%d", n[0], n[1]), true
}
