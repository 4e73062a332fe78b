// Package remote runs commands on hosts over SSH: one connection per host
// per run, many sessions over it, sudo for non-root users, atomic file
// writes, a per-host run lock, and Readers: a host seen through what only
// reads it, which is all the steps hold.
//
// Every command is built as argv and turned into shell text by package
// shell, in one place (Cmd.line).
package remote

import (
	"bytes"
	"context"
	"fmt"

	"io/fs"
	"net/netip"

	"github.com/mgmtctl/mgmtctl/internal/shell"
)

// Cmd is one remote command.
type Cmd struct {
	// Args is the argv; it is quoted by package shell, never spliced.
	Args []string
	// Stdin, if set, is fed to the command; secrets travel here, never in
	// Args (which show up in process lists and logs).
	Stdin []byte
	// Sudo runs the command as root (via sudo -n for a non-root user).
	Sudo bool
	// ReadOnly declares that the command changes nothing on the host (a
	// Query's are): only read-only commands are retried after a dropped
	// connection or cancelled mid-flight.
	ReadOnly bool
	// OKCodes are exit codes other than 0 that are results, not failures
	// (for example 1 from grep, or a code a script uses to say "absent").
	OKCodes []int
	// Name says what the command does ("download https://…"), for errors
	// and progress; a script's text is for the debug log, not for the
	// user. Empty means the command line itself.
	Name string
}

// Query is a command that changes nothing on its host: the one kind a
// Reader runs. It is a type of its own, so code that holds only a Reader
// (a step's Check) cannot hand it a command that writes: that does not
// compile. And it is built only from the named reads of queries.go, a
// closed vocabulary, so no code outside this package can label a write a
// query.
type Query struct{ c Cmd }

// look returns a read-only command: only the named reads of queries.go
// call it.
func look(args ...string) Query { return Query{Cmd{Args: args, ReadOnly: true}} }

// lookScript returns a read-only command running a fixed sh script with
// args as $1..., as Script does.
func lookScript(name, script string, args ...string) Query {
	c := Script(name, script, args...)
	c.ReadOnly = true
	return Query{c}
}

// Cmd is the query as a command, for a Runner.
func (q Query) Cmd() Cmd { return q.c }

// AsRoot returns q run with sudo.
func (q Query) AsRoot() Query { q.c.Sudo = true; return q }

// Allow returns q with more exit codes accepted as results.
func (q Query) Allow(codes ...int) Query { q.c = q.c.Allow(codes...); return q }

// Command returns a command that may change the host.
func Command(args ...string) Cmd { return Cmd{Args: args} }

// Script returns a command running a fixed sh script with args as $1...; a
// script may use only values passed this way. name says what it does.
func Script(name, script string, args ...string) Cmd {
	return Cmd{Args: append([]string{"sh", "-c", script, "sh"}, args...), Name: name}
}

// AsRoot returns c run with sudo.
func (c Cmd) AsRoot() Cmd { c.Sudo = true; return c }

// WithStdin returns c fed with data.
func (c Cmd) WithStdin(data []byte) Cmd { c.Stdin = data; return c }

// Allow returns c with more exit codes accepted as results.
func (c Cmd) Allow(codes ...int) Cmd {
	c.OKCodes = append(append([]int(nil), c.OKCodes...), codes...)
	return c
}

// line renders the command as the shell text sent to the host. A non-root
// user becomes root with sudo -n, which fails instead of prompting.
func (c Cmd) line(root bool) (string, error) {
	args := c.Args
	if c.Sudo && !root {
		args = append([]string{"sudo", "-n", "--"}, args...)
	}
	return shell.Join(args...)
}

// Display is the command as errors show it: its name, or its command
// line.
func (c Cmd) Display() string {
	if c.Name != "" {
		return c.Name
	}
	return c.String()
}

// String is the command line as the debug log shows it (before
// redaction).
func (c Cmd) String() string {
	s, err := shell.Join(c.Args...)
	if err != nil {
		return fmt.Sprintf("%q", c.Args)
	}
	return s
}

func (c Cmd) accepts(code int) bool {
	if code == 0 {
		return true
	}
	for _, ok := range c.OKCodes {
		if ok == code {
			return true
		}
	}
	return false
}

// Result is what a command printed and how it exited.
type Result struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Runner runs commands on one host.
type Runner interface {
	Run(ctx context.Context, c Cmd) (Result, error)
}

// Looker runs queries on one host.
type Looker interface {
	Look(ctx context.Context, q Query) (Result, error)
}

// Reader is a connected machine seen through what only reads it: queries,
// file reads, and a probe of a port from its side. It has no method that
// writes, and none that hands out a connection: a connection from the VM
// to its API server, with the k3s.yaml a sudo read returns, would be
// admin access to the cluster. Steps hold Readers, and the
// effect.Executor alone holds the Hosts behind them; the session, which
// builds the steps' kube.Reader, dials through the *Conn itself.
type Reader interface {
	Looker
	Name() string
	ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error)
	// Probe opens a TCP connection from the host's side to addr and
	// closes it at once: whether something answers there, and nothing
	// more (the VIP's check).
	Probe(ctx context.Context, addr netip.AddrPort) error
}

// Host is a connected machine: a Reader that also runs commands and
// writes files.
type Host interface {
	Reader
	Runner
	WriteFile(ctx context.Context, f File) (changed bool, err error)
}

// File is a file to be written atomically.
type File struct {
	Path    string
	Content []byte
	Mode    fs.FileMode
	// Owner is user:group; empty leaves the owner to the writer (root
	// with Sudo).
	Owner string
	Sudo  bool
}

// readScript prints the file, or exits 44 when it does not exist, so a
// missing file is told apart from an unreadable one.
const readScript = `if [ -e "$1" ]; then exec cat -- "$1"; fi; exit 44`

const exitAbsent = 44

// ReadFile reads path on h with cat; a missing file is fs.ErrNotExist.
func ReadFile(ctx context.Context, r Looker, path string, sudo bool) ([]byte, error) {
	q := lookScript("read "+path, readScript, path).Allow(exitAbsent)
	q.c.Sudo = sudo
	res, err := r.Look(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if res.ExitCode == exitAbsent {
		return nil, fmt.Errorf("read %s: %w", path, fs.ErrNotExist)
	}
	return res.Stdout, nil
}

// writeScript replaces $1 atomically with stdin unless it already has the
// content (sha256 $4), mode ($2) and owner ($3). The temporary file is
// created by mktemp (mode 0600) next to the target, so the rename is atomic
// and a secret is never readable by others, even half-written.
const writeScript = `set -eu
p=$1 mode=$2 owner=$3 want=$4
if [ -f "$p" ] && [ "$(sha256sum < "$p" | cut -d' ' -f1)" = "$want" ] && [ "$(stat -c %a -- "$p")" = "$mode" ] &&
   { [ -z "$owner" ] || [ "$(stat -c %U:%G -- "$p")" = "$owner" ]; }; then
  cat > /dev/null
  echo unchanged
  exit 0
fi
d=$(dirname -- "$p")
mkdir -p -- "$d"
tmp=$(mktemp "$d/.mgmtctl.XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
# A signal ends the script through exit, so the EXIT trap still runs.
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
cat > "$tmp"
chmod "$mode" "$tmp"
if [ -n "$owner" ]; then chown "$owner" "$tmp"; fi
sync -- "$tmp" 2>/dev/null || true
mv -f -- "$tmp" "$p"
trap - EXIT
echo changed`

// WriteFile writes f on r in one round trip, changing nothing when the file
// already has f's content, mode and owner.
func WriteFile(ctx context.Context, r Runner, f File) (bool, error) {
	sum := sha256Hex(f.Content)
	c := Script("write "+f.Path, writeScript, f.Path, fmt.Sprintf("%o", f.Mode.Perm()), f.Owner, sum).WithStdin(f.Content)
	c.Sudo = f.Sudo
	res, err := r.Run(ctx, c)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", f.Path, err)
	}
	switch out := string(bytes.TrimSpace(res.Stdout)); out {
	case "changed":
		return true, nil
	case "unchanged":
		return false, nil
	default:
		return false, fmt.Errorf("write %s: unexpected output %q", f.Path, out)
	}
}
