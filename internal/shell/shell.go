// Package shell builds POSIX shell command lines from argv.
//
// It is the one place where values become shell text: every argument that
// mgmtctl sends to a remote shell passes through Quote or Join. Values that no
// quoting can carry safely (a NUL byte ends a C string, so the remote side
// would silently truncate the argument) are rejected instead of mangled.
package shell

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsafe is returned for a value that cannot be passed to a shell intact.
var ErrUnsafe = errors.New("value cannot be passed to a shell safely")

// safe reports whether s needs no quoting: it is non-empty and made only of
// characters that no POSIX shell treats specially in any position.
func safe(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("@%+=:,./-_", r):
		default:
			return false
		}
	}
	// A leading '=' or '%' is harmless, but a word starting with '-' is
	// still an option to the command: that is the caller's business (use
	// "--"), not quoting's.
	return true
}

// Quote returns s as one shell word. Single quotes make every byte literal;
// an embedded single quote is closed, escaped and reopened.
func Quote(s string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", fmt.Errorf("%w: contains a NUL byte", ErrUnsafe)
	}
	if safe(s) {
		return s, nil
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'", nil
}

// Join quotes each argument and joins them with spaces, so that the remote
// shell sees exactly args as its argv.
func Join(args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("empty command")
	}
	words := make([]string, len(args))
	for i, a := range args {
		q, err := Quote(a)
		if err != nil {
			return "", fmt.Errorf("argument %d: %w", i, err)
		}
		words[i] = q
	}
	return strings.Join(words, " "), nil
}

// Script returns a command line that runs a fixed script with args as its
// positional parameters ($1, $2, ...). Values are never spliced into the
// script text, so the script can be reviewed as a constant.
func Script(script string, args ...string) (string, error) {
	return Join(append([]string{"sh", "-c", script, "sh"}, args...)...)
}
