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
