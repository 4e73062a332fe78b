// Package remotetest is a hand-written remote.Host that records what is
// run and written on it, so a unit test can assert that carrying out a
// plan did exactly the plan's effects. Tests that need a real SSH server
// use remote/sshtest.
package remotetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"regexp"
	"strings"
	"sync"

	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Host records commands and writes; Answer, if set, gives each command's
// result (the zero Result otherwise).
type Host struct {
	HostName string
	Answer   func(remote.Cmd) (remote.Result, error)
	// Files, when set, are the files ReadFile finds; any other path does
	// not exist.
	Files map[string][]byte

	mu      sync.Mutex
	ran     []remote.Cmd
	wrote   []remote.File
	events  []string
	effects []string
}

var _ remote.Host = (*Host)(nil)

// Name implements remote.Host.
func (h *Host) Name() string { return h.HostName }

// Run implements remote.Host.
func (h *Host) Run(ctx context.Context, c remote.Cmd) (remote.Result, error) {
	h.mu.Lock()
	h.ran = append(h.ran, c)
	h.events = append(h.events, "run "+c.String())
	if !c.ReadOnly {
		h.effects = append(h.effects, "run "+c.String())
	}
	h.mu.Unlock()
	if path, ok := strings.CutPrefix(c.Name, "read "); ok && h.Files != nil {
		// remote.ReadFile's script, as a read-only gate runs it: the
		// file's bytes, or its exit code for a missing file (44).
		if b, ok := h.Files[path]; ok {
			return remote.Result{Stdout: b}, nil
		}
		return remote.Result{ExitCode: 44}, nil
	}
	if h.Answer != nil {
		return h.Answer(c)
	}
	return remote.Result{}, nil
}

// Look implements remote.Reader: a query runs as Run runs it.
func (h *Host) Look(ctx context.Context, q remote.Query) (remote.Result, error) {
	return h.Run(ctx, q.Cmd())
}

// ReadFile implements remote.Host: Files, or nothing to read.
func (h *Host) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	if h.Files == nil {
		return nil, errors.New("remotetest: no files to read")
	}
	if b, ok := h.Files[path]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("read %s: %w", path, fs.ErrNotExist)
}

// WriteFile implements remote.Host.
func (h *Host) WriteFile(ctx context.Context, f remote.File) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wrote = append(h.wrote, f)
	h.events = append(h.events, "write "+f.Path)
	h.effects = append(h.effects, "write "+f.Path)
	return true, nil
}

// Probe implements remote.Reader: nothing answers.
func (h *Host) Probe(ctx context.Context, addr netip.AddrPort) error {
	return errors.New("remotetest: no network")
}

// Ran is every command run so far, in order.
func (h *Host) Ran() []remote.Cmd {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]remote.Cmd(nil), h.ran...)
}

// Wrote is every file written so far, in order.
func (h *Host) Wrote() []remote.File {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]remote.File(nil), h.wrote...)
}

// Events is what happened, in order: "run <cmd>" and "write <path>".
func (h *Host) Events() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

// Effects is what changed the host, in order: every write, and every
// command not marked read-only (remote.Query, a read-only gate's); the
// reads a step makes to learn where it stands are not among them.
func (h *Host) Effects() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.effects...)
}

var batchMarker = regexp.MustCompile(`printf '\\nmgmtctl-([0-9a-f]{16}) ([0-9]+) %s\\n'`)

// EmptyBatch answers a remote.Batch as if each of its commands printed
// nothing and exited 0, and any other command with the zero Result: the
// answer of a host with nothing on it, for steps that gather facts again
// after they act.
func EmptyBatch(c remote.Cmd) (remote.Result, error) {
	if len(c.Args) != 3 || c.Args[0] != "sh" {
		return remote.Result{}, nil
	}
	var out strings.Builder
	for _, m := range batchMarker.FindAllStringSubmatch(c.Args[2], -1) {
		fmt.Fprintf(&out, "\nmgmtctl-%s %s 0\n\nmgmtctl-%s-err %s\n", m[1], m[2], m[1], m[2])
	}
	return remote.Result{Stdout: []byte(out.String())}, nil
}

var batchLine = regexp.MustCompile(`(?s)\( \{ (.*?); \} </dev/null >"\$d/([0-9]+)"`)

// Batch answers a remote.Batch as a host would whose commands print the
// stdout of the first entry of outs their command line starts with (and
// nothing otherwise), each exiting 0; any other command gets the zero
// Result.
func Batch(outs map[string]string) func(remote.Cmd) (remote.Result, error) {
	return func(c remote.Cmd) (remote.Result, error) {
		if len(c.Args) != 3 || c.Args[0] != "sh" {
			return remote.Result{}, nil
		}
		lines := map[string]string{}
		for _, m := range batchLine.FindAllStringSubmatch(c.Args[2], -1) {
			lines[m[2]] = m[1]
		}
		var out strings.Builder
		for _, m := range batchMarker.FindAllStringSubmatch(c.Args[2], -1) {
			for prefix, o := range outs {
				if strings.HasPrefix(lines[m[2]], prefix) {
					out.WriteString(o)
					break
				}
			}
			fmt.Fprintf(&out, "\nmgmtctl-%s %s 0\n\nmgmtctl-%s-err %s\n", m[1], m[2], m[1], m[2])
		}
		return remote.Result{Stdout: []byte(out.String())}, nil
	}
}
