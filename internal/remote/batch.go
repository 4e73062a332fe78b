package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/shell"
)

// Batch runs read-only commands in one round trip and returns each one's
// result, so gathering a host's facts costs one session, not one per fact.
// The commands run at the same time (they only read), so a batch takes as
// long as its slowest command, not their sum: `qm` and `k3s --version`
// each take a few hundred milliseconds to start. Each command's stdout and
// exit code are framed by a random marker that its output cannot forge;
// stderr is kept per command too.
func Batch(ctx context.Context, r Looker, sudo bool, queries ...Query) ([]Result, error) {
	cmds := make([]Cmd, len(queries))
	for i, q := range queries {
		cmds[i] = q.c
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	marker := "mgmtctl-" + hex.EncodeToString(raw[:])
	var script strings.Builder
	// Each command writes its stdout, stderr and exit code to files of its
	// own; once all have ended they are printed in order, stderr after its
	// own marker so the streams stay attributable without interleaving.
	script.WriteString("d=$(mktemp -d) || exit 70\n")
	for i, c := range cmds {
		if c.Sudo != sudo {
			return nil, fmt.Errorf("batch: %s differs in sudo from the batch", c.String())
		}
		line, err := shell.Join(c.Args...)
		if err != nil {
			return nil, fmt.Errorf("batch: %w", err)
		}
		fmt.Fprintf(&script, "( { %s; } </dev/null >\"$d/%d\" 2>\"$d/%d.err\"; echo $? >\"$d/%d.rc\" ) &\n", line, i, i, i)
	}
	script.WriteString("wait\n")
	for i := range cmds {
		fmt.Fprintf(&script, "cat -- \"$d/%d\"; printf '\\n%s %d %%s\\n' \"$(cat -- \"$d/%d.rc\")\"; cat -- \"$d/%d.err\"; printf '\\n%s-err %d\\n'\n", i, marker, i, i, i, marker, i)
	}
	script.WriteString("rm -rf -- \"$d\"\n")
	res, err := r.Look(ctx, Query{Cmd{Args: []string{"sh", "-c", script.String()}, Sudo: sudo, ReadOnly: true, Name: "gather facts"}})
	if err != nil {
		return nil, err
	}
	return parseBatch(res.Stdout, marker, len(cmds))
}

func parseBatch(out []byte, marker string, n int) ([]Result, error) {
	results := make([]Result, n)
	rest := out
	for i := 0; i < n; i++ {
		head := []byte("\n" + marker + " " + strconv.Itoa(i) + " ")
		j := bytes.Index(rest, head)
		if j < 0 {
			return nil, fmt.Errorf("batch: output of command %d is missing", i)
		}
		results[i].Stdout = rest[:j]
		rest = rest[j+len(head):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("batch: exit code of command %d is missing", i)
		}
		code, err := strconv.Atoi(string(rest[:nl]))
		if err != nil {
			return nil, fmt.Errorf("batch: exit code of command %d: %w", i, err)
		}
		results[i].ExitCode = code
		rest = rest[nl+1:]
		tailMark := []byte("\n" + marker + "-err " + strconv.Itoa(i) + "\n")
		k := bytes.Index(rest, tailMark)
		if k < 0 {
			return nil, fmt.Errorf("batch: stderr of command %d is missing", i)
		}
		results[i].Stderr = rest[:k]
		rest = rest[k+len(tailMark):]
	}
	return results, nil
}
