package remote

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ExitError is a command that exited with a code it was not allowed to.
type ExitError struct {
	Host   string
	Cmd    string
	Code   int
	Stderr string // the last lines, for the message
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s exited %d", e.Cmd, e.Code)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// tail keeps the last n lines of s, trimmed.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// UnreachableError is a host that could not be connected to after retries,
// or whose login failed.
type UnreachableError struct {
	Host     string
	Addr     string
	Attempts int
	Err      error
}

func (e *UnreachableError) Error() string {
	if e.Attempts > 1 {
		return fmt.Sprintf("connect to %s (%s): %v (after %d attempts)", e.Host, e.Addr, e.Err, e.Attempts)
	}
	return fmt.Sprintf("connect to %s (%s): %v", e.Host, e.Addr, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// DroppedError is a connection that dropped while a command ran on it.
type DroppedError struct {
	Host string
	Addr string // host:port
	Cmd  string // what was running, redacted
	Ran  time.Duration
	// MayBeHalfDone is set for a command that changes the host: it may
	// have been cut off part of the way (mgmtctl's steps are written so
	// that the next run finds and finishes such work).
	MayBeHalfDone bool
	Err           error // why: a *NoAnswerError, or what the SSH layer said
}

func (e *DroppedError) Error() string {
	msg := fmt.Sprintf("lost the connection to %s (%s) %s into %s: %v", e.Host, e.Addr, roundDuration(e.Ran), e.Cmd, e.Err)
	if e.Ran == 0 {
		// Nothing of mgmtctl's was running there: a wait, an API request.
		msg = fmt.Sprintf("lost the connection to %s (%s) during %s: %v", e.Host, e.Addr, e.Cmd, e.Err)
	}
	if e.MayBeHalfDone {
		msg += "; the command may have stopped part of the way on the host"
	}
	return msg
}

func (e *DroppedError) Unwrap() error { return e.Err }

// HostKeyError is a host key that known_hosts does not vouch for.
type HostKeyError struct {
	Host        string // as written in known_hosts ([host]:port when not 22)
	Addr        string
	Fingerprint string // SHA256:... of the key the host presented
	KeyType     string
	// Known are the fingerprints known_hosts has for this host; empty
	// means the host is unknown, otherwise its key changed.
	Known      []string
	KnownHosts string // the file(s) checked
	Hint       string // how to accept a legitimate key
}

// Changed reports whether the host was known with another key.
func (e *HostKeyError) Changed() bool { return len(e.Known) > 0 }

func (e *HostKeyError) Error() string {
	if e.Changed() {
		return fmt.Sprintf("host key of %s CHANGED: it presented %s %s but %s has %s; this may be an attack, or the host was reinstalled. Verify on the host's console, then %s",
			e.Host, e.KeyType, e.Fingerprint, e.KnownHosts, strings.Join(e.Known, ", "), e.Hint)
	}
	return fmt.Sprintf("host key of %s is unknown: it presented %s %s, which is not in %s. Verify it on the host's console (ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub), then %s",
		e.Host, e.KeyType, e.Fingerprint, e.KnownHosts, keyFileName(e.KeyType), e.Hint)
}

// HostKeyFile is where OpenSSH keeps a host's public key of keyType.
func HostKeyFile(keyType string) string {
	return "/etc/ssh/ssh_host_" + keyFileName(keyType) + "_key.pub"
}

func keyFileName(keyType string) string {
	switch {
	case strings.Contains(keyType, "ed25519"):
		return "ed25519"
	case strings.Contains(keyType, "ecdsa"):
		return "ecdsa"
	}
	return "rsa"
}

// LockedError is a host locked by another run.
type LockedError struct {
	Host   string
	Path   string
	Holder string // who holds it and since when, as the holder wrote it
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s is locked by another mgmtctl run (%s, lock %s); wait for it to finish", e.Host, e.Holder, e.Path)
}

// IsUnreachable reports whether err means the host could not be reached or
// refused us (connection, host key or login), as opposed to a command
// failing on it.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	var k *HostKeyError
	var d *DroppedError
	return errors.As(err, &u) || errors.As(err, &k) || errors.As(err, &d)
}

// IsHostKeyError reports whether err is a host key that did not match or
// is not known: never passed over as a host merely unreachable.
func IsHostKeyError(err error) bool {
	var k *HostKeyError
	return errors.As(err, &k)
}
