package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// A k3s snapshot restores only under the server token of the cluster
// that took it: the cluster's CAs are sealed with it in the snapshot's
// bootstrap data (docs.k3s.io cli/etcd-snapshot, "Restoring To New
// Hosts": "you must keep the server token"). A laptop backup holds its
// token; a snapshot k3s uploads to S3 does not. So, with spec.backup.s3,
// the laptop keeps every token the cluster has had, each with the time
// mgmtctl first saw it, and a restore from S3 takes the one the cluster
// had when the snapshot was taken: after the loss of every server and a
// new cluster (with a new token) built by apply, too.

// TokensFile, in the cluster's backup directory, records its tokens.
const TokensFile = "cluster-tokens.json"

// KnownToken is one token the cluster has had.
type KnownToken struct {
	Token string    `json:"token"`
	Since time.Time `json:"since"`
}

// ReadTokens reads the record in dir, oldest first; none is no error.
func ReadTokens(dir string) ([]KnownToken, error) {
	b, err := os.ReadFile(filepath.Join(dir, TokensFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ts []KnownToken
	if err := json.Unmarshal(b, &ts); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, TokensFile), err)
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Since.Before(ts[j].Since) })
	return ts, nil
}

// TokenAt is the token the cluster had at t: the newest seen at or
// before it. ok is false when none was seen by then.
func TokenAt(ts []KnownToken, t time.Time) (KnownToken, bool) {
	var found KnownToken
	ok := false
	for _, k := range ts {
		if !k.Since.After(t) {
			found, ok = k, true
		}
	}
	return found, ok
}

// SnapshotTime is when k3s took a snapshot, from its name's last field
// (<name>-<node>-<unix time>, k3s pkg/etcd/snapshot.go).
func SnapshotTime(name string) (time.Time, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// KeepToken records the cluster's server token on the laptop when it is
// not the newest recorded (a new cluster, or the first run with S3).
type KeepToken struct {
	Dir string
	// Server is the server the cluster was initialised on, as the run
	// found it (its Host nil before the VM exists).
	Server func() *VM
	Now    func() time.Time
	// Redact registers the token with the run's redactor.
	Redact func(values ...string)
}

var _ step.Step = (*KeepToken)(nil)

// ID implements step.Step.
func (s *KeepToken) ID() string { return "keep-token" }

// Host implements step.Step.
func (s *KeepToken) Host() string { return "laptop" }

// Check implements step.Step.
func (s *KeepToken) Check(ctx context.Context) (step.Plan, error) {
	v := s.Server()
	if v == nil || v.Host == nil {
		return step.Plan{Skip: "k3s has made no cluster token yet"}, nil
	}
	b, err := ReadToken(ctx, v.Host, s.Redact)
	if err != nil {
		return step.Plan{}, fmt.Errorf("read the cluster token on %s: %w", v.Name, err)
	}
	if len(b) == 0 {
		return step.Plan{Skip: "k3s has made no cluster token yet on " + v.Name}, nil
	}
	token := string(b)
	known, err := ReadTokens(s.Dir)
	if err != nil {
		return step.Plan{}, err
	}
	path := filepath.Join(s.Dir, TokensFile)
	if n := len(known); n > 0 && known[n-1].Token == token {
		return step.Plan{Note: fmt.Sprintf("%s holds the cluster token (since %s)", path, known[n-1].Since.Format(time.RFC3339))}, nil
	}
	known = append(known, KnownToken{Token: token, Since: s.Now().UTC().Truncate(time.Second)})
	out, err := json.MarshalIndent(known, "", "  ")
	if err != nil {
		return step.Plan{}, err
	}
	action := step.Create
	if len(known) > 1 {
		action = step.Update
	}
	return step.Plan{Changes: []step.Change{{Target: path, Action: action,
		Summary: fmt.Sprintf("record %s's cluster token in %s (0600; %d token(s)): a snapshot in S3 restores only under it", v.Name, path, len(known)),
		Effects: []effect.Effect{effect.WriteLocal{Path: path, Content: append(out, '\n')}}}}}, nil
}

// ReadToken reads the server token on a server (empty when k3s has made
// none yet), registered with redact.
func ReadToken(ctx context.Context, h remote.Reader, redact func(...string)) ([]byte, error) {
	b, err := h.ReadFile(ctx, TokenPath, true)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && redact != nil {
		redact(string(b))
	}
	return b, nil
}
