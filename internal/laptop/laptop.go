// Package laptop holds the steps that act on the files mgmtctl keeps on
// the laptop itself (kubeconfigs, known_hosts entries, records), for the
// destroy command.
package laptop

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/crypto/ssh"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Host is the recap's name for the laptop.
const Host = "laptop"

// RemoveFile removes a file mgmtctl wrote on the laptop; an absent file is
// already removed.
type RemoveFile struct {
	StepID string
	Path   string
	What   string // "admin kubeconfig"
}

var _ step.Step = (*RemoveFile)(nil)

// ID implements step.Step.
func (s *RemoveFile) ID() string { return s.StepID }

// Host implements step.Step.
func (s *RemoveFile) Host() string { return Host }

// Check implements step.Step.
func (s *RemoveFile) Check(ctx context.Context) (step.Plan, error) {
	_, err := os.Lstat(s.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return step.Plan{Note: s.Path + " does not exist"}, nil
	case err != nil:
		return step.Plan{}, err
	}
	return step.Plan{Changes: []step.Change{{Target: s.Path, Action: step.Delete,
		Summary: fmt.Sprintf("remove %s %s", s.What, s.Path), Effects: []effect.Effect{effect.RemoveLocal{Path: s.Path}}}}}, nil
}

// ForgetHostKey removes a host's entry from a known_hosts file mgmtctl
// keeps (the VM's, once the VM is gone).
type ForgetHostKey struct {
	StepID string
	File   string
	Addr   string // host:port
}

var _ step.Step = (*ForgetHostKey)(nil)

// ID implements step.Step.
func (s *ForgetHostKey) ID() string { return s.StepID }

// Host implements step.Step.
func (s *ForgetHostKey) Host() string { return Host }

// Check implements step.Step.
func (s *ForgetHostKey) Check(ctx context.Context) (step.Plan, error) {
	known, err := remote.KnowsHost(s.File, s.Addr)
	if err != nil {
		return step.Plan{}, err
	}
	if !known {
		return step.Plan{Note: s.File + " has no entry for " + s.Addr}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: s.File, Action: step.Delete,
		Summary: fmt.Sprintf("remove the host key of %s from %s", s.Addr, s.File), Effects: []effect.Effect{effect.ForgetHostKey{File: s.File, Addr: s.Addr}}}}}, nil
}

// RecordHostKey keeps the laptop's trust in a VM mgmtctl created: once the
// run has reached it and accepted the key it presented on first contact,
// the plan records that key in the known_hosts file and removes the
// record that the VM was never reached (after which its key must match).
// A run cut short between the two completes it: a key already recorded
// leaves only the record to remove.
type RecordHostKey struct {
	// VM names the VM, for the recap.
	VM         string
	File, Addr string
	// Marker is the record that mgmtctl created the VM and has not reached
	// it yet.
	Marker string
	// Learned is the key this run accepted on first contact with the VM,
	// nil when it has not reached it or knew its key already.
	Learned func() ssh.PublicKey
}

var _ step.Step = (*RecordHostKey)(nil)

// ID implements step.Step.
func (s *RecordHostKey) ID() string { return "record-host-key" }

// Host implements step.Step.
func (s *RecordHostKey) Host() string { return s.VM }

// Check implements step.Step.
func (s *RecordHostKey) Check(ctx context.Context) (step.Plan, error) {
	if _, err := os.Stat(s.Marker); errors.Is(err, fs.ErrNotExist) {
		// Not a VM mgmtctl created and has not reached: nothing to learn.
		return step.Plan{Note: "no new VM's host key to record"}, nil
	} else if err != nil {
		return step.Plan{}, err
	}
	done := effect.RemoveLocal{Path: s.Marker}
	if key := s.Learned(); key != nil {
		return step.Plan{Changes: []step.Change{{Target: s.File, Action: step.Update,
			Summary: fmt.Sprintf("record %s's host key %s, learned on first contact, in %s; remove %s", s.Addr, ssh.FingerprintSHA256(key), s.File, s.Marker),
			Effects: []effect.Effect{effect.RememberHostKey{File: s.File, Addr: s.Addr, Key: key}, done}}}}, nil
	}
	known, err := remote.KnowsHost(s.File, s.Addr)
	if err != nil {
		return step.Plan{}, err
	}
	if known {
		return step.Plan{Changes: []step.Change{{Target: s.Marker, Action: step.Delete,
			Summary: fmt.Sprintf("remove %s: %s's host key is in %s already", s.Marker, s.Addr, s.File), Effects: []effect.Effect{done}}}}, nil
	}
	return step.Plan{Note: "the VM has not been reached yet: its host key is learned on first contact"}, nil
}
