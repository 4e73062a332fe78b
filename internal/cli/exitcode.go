package cli

import (
	"errors"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/pvelock"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Exit codes, one per class of outcome. Only the CLI maps errors to them.
const (
	ExitOK          = 0
	ExitFailed      = 1   // a step failed
	ExitUsage       = 2   // invalid config or usage
	ExitChanges     = 3   // changes made or pending, with --detailed-exitcode
	ExitUnreachable = 4   // a host unreachable, its host key refused, or locked
	ExitInterrupted = 130 // stopped by a signal
)

// usageError is a command line the user must fix.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode maps an error to its class.
func exitCode(err error) int {
	var cfg config.Errors
	var usage usageError
	var locked *remote.LockedError
	var apiLocked *pvelock.LockedError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, engine.ErrInterrupted):
		return ExitInterrupted
	case errors.As(err, &cfg), errors.As(err, &usage):
		return ExitUsage
	case remote.IsUnreachable(err), errors.As(err, &locked), errors.As(err, &apiLocked):
		return ExitUnreachable
	}
	return ExitFailed
}
