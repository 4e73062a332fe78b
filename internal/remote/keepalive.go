package remote

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// KeepAlive is how a connection is watched, as OpenSSH's client watches
// one with ServerAliveInterval and ServerAliveCountMax (ssh_config(5)):
// every Interval a keepalive@openssh.com request that wants a reply, and
// when more than CountMax in a row go unanswered the connection is closed,
// so everything riding on it (commands, file transfers, forwarded API
// connections) fails at once instead of waiting for TCP to give up, which
// Linux does after about 15 minutes of retransmissions.
type KeepAlive struct {
	Interval time.Duration
	CountMax int
}

// DefaultKeepAlive is what mgmtctl uses unless the config says otherwise:
// a dead link is noticed 30 to 40 s after it drops.
var DefaultKeepAlive = KeepAlive{Interval: 10 * time.Second, CountMax: 3}

func (k KeepAlive) orDefault() KeepAlive {
	if k.Interval <= 0 {
		k.Interval = DefaultKeepAlive.Interval
	}
	if k.CountMax <= 0 {
		k.CountMax = DefaultKeepAlive.CountMax
	}
	return k
}

// UserTimeout is the TCP_USER_TIMEOUT that matches: data left unacknowledged
// this long makes the kernel drop the connection, about when the
// keepalives would.
func (k KeepAlive) UserTimeout() time.Duration {
	k = k.orDefault()
	return k.Interval * time.Duration(k.CountMax)
}

// String is the setting as a user reads it.
func (k KeepAlive) String() string {
	k = k.orDefault()
	return fmt.Sprintf("%d keepalives %s apart", k.CountMax, k.Interval)
}

// NoAnswerError is a connection given up because the peer went silent.
type NoAnswerError struct {
	KeepAlive KeepAlive
	Since     time.Duration // since the last answer
	Err       error         // the kernel's timeout, when it gave up first
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("no answer from the host for %s (%s, none answered)", roundDuration(e.Since), e.KeepAlive)
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// roundDuration keeps a tenth of a second under 10 s, whole seconds above.
func roundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// watcher sends keepalives on one connection.
type watcher struct {
	k        KeepAlive
	missed   atomic.Int32
	answered atomic.Int64 // unix nanoseconds of the last answer
	// dead says why the watch gave the connection up, once it has.
	dead atomic.Pointer[NoAnswerError]
}

func newWatcher(k KeepAlive) *watcher {
	w := &watcher{k: k.orDefault()}
	w.answered.Store(time.Now().UnixNano())
	return w
}

func (w *watcher) sinceAnswer() time.Duration {
	return time.Since(time.Unix(0, w.answered.Load()))
}

// silent is the verdict when the kernel timed the connection out first.
func (w *watcher) silent(err error) *NoAnswerError {
	return &NoAnswerError{KeepAlive: w.k, Since: w.sinceAnswer(), Err: err}
}

// run sends keepalives on cl until stop is closed or the connection is
// given up, in which case it records why and closes cl.
func (w *watcher) run(cl *ssh.Client, stop <-chan struct{}) {
	t := time.NewTicker(w.k.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// As OpenSSH's server_alive_check: count first, give up past
		// the maximum, else ask again; any reply (OpenSSH's sshd
		// answers this request with a failure) resets the count.
		if int(w.missed.Add(1)) > w.k.CountMax {
			w.dead.Store(&NoAnswerError{KeepAlive: w.k, Since: w.sinceAnswer()})
			cl.Close()
			return
		}
		go func() {
			if _, _, err := cl.SendRequest("keepalive@openssh.com", true, nil); err == nil {
				w.missed.Store(0)
				w.answered.Store(time.Now().UnixNano())
			}
		}()
	}
}
