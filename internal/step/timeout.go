package step

import (
	"fmt"
	"time"
)

// TimeoutError is a wait that ran out of its bound, in the waiter's own
// words: what it waited for, for how long, and what it saw last. It
// unwraps to the context's error, so errors.Is(err,
// context.DeadlineExceeded) holds; the engine adds nothing to it.
type TimeoutError struct {
	Bound time.Duration
	// Msg is the waiter's account; it names the bound.
	Msg string
	// Err is the context's error.
	Err error
}

func (e *TimeoutError) Error() string { return e.Msg }

func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout is a TimeoutError for a wait bound by bound whose context ended
// with err; the message is format's, and names the bound itself.
func Timeout(bound time.Duration, err error, format string, args ...any) *TimeoutError {
	return &TimeoutError{Bound: bound, Msg: fmt.Sprintf(format, args...), Err: err}
}
