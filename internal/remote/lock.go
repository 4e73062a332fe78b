package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LockPath is the default run lock on every host mgmtctl changes. It is under /run
// (a tmpfs), so a reboot clears it, and flock(1) releases it when the
// holding process dies, so a killed run never leaves a stale lock.
const LockPath = "/run/mgmtctl.lock"

// lockScript takes an exclusive flock on $1 and holds it while the run's
// heartbeats arrive on stdin, a line every few seconds; the holder line
// ($2) is written into the file for whoever finds it busy, and each
// heartbeat touches the file.
//
// A "release" line is a run that ended. Input that ends without one is a
// run whose connection went (killed, or its link given up), and silence
// for $3 seconds is a run whose link went down: sshd may not notice that
// for hours (its keepalive is TCP's, two hours by default), and when it
// does it leaves a session's processes running. Either way the holder
// stops what that run's SSH connection still runs here (every process
// whose SSH_CONNECTION is this session's: the client's address and port
// make it unique) before it gives the lock up, so the next run does not
// race a half-done command (every step is written to be redone); it
// dates the file to the epoch first, so a contender arriving during that
// clean-up sees a lease that has run out. A contender waits $5 seconds
// for a busy lock (the holder of a run killed a moment ago is still
// noticing); if it is still held and the heartbeats are older than $4
// seconds, it waits up to $3 for that lease to run out instead of
// refusing.
const lockScript = `path=$1 holder=$2 lease=$3 stale=$4 grace=$5
exec 9>>"$path" || exit 70
if ! flock -w "$grace" 9; then
  age=$(( $(date +%s) - $(stat -c %Y -- "$path") ))
  if [ "$age" -lt "$stale" ] || ! flock -w "$lease" 9; then
    printf 'BUSY '
    cat -- "$path"
    exit 75
  fi
fi
printf '%s\n' "$holder" > "$path"
echo LOCKED
while :; do
  line=$(timeout "$lease" head -n 1) || break
  case $line in
  release) exit 0 ;;
  '') break ;;
  esac
  touch -- "$path"
done
touch -d @0 -- "$path"
conn=${SSH_CONNECTION:-$(tr '\0' '\n' < "/proc/$PPID/environ" | sed -n 's/^SSH_CONNECTION=//p')}
[ -n "$conn" ] || exit 0
mine=$(ps -o pgid= -p $$ | tr -d ' ')
for env in $(grep -lzxF "SSH_CONNECTION=$conn" /proc/[0-9]*/environ 2>/dev/null); do
  pid=${env#/proc/}
  pgid=$(ps -o pgid= -p "${pid%/environ}" | tr -d ' ')
  [ -n "$pgid" ] && [ "$pgid" != "$mine" ] && kill -TERM "-$pgid" 2>/dev/null
done
exit 0`

// Lock holds the run lock on c until the returned release is called (or the
// connection ends). A lock held by another run fails at once with a
// LockedError naming the holder and since when.
func (c *Conn) Lock(ctx context.Context, holder string) (release func(), err error) {
	s, _, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	var stderr strings.Builder
	s.Stderr = &stderr
	path := c.t.LockPath
	if path == "" {
		path = LockPath
	}
	// The lease is as long as the client's own patience with a silent
	// link: the lock goes about when the run gives the link up.
	k := c.d.KeepAlive.orDefault()
	lease := k.Interval * time.Duration(k.CountMax+1)
	cmd := Script("take the lock "+path, lockScript, path, fmt.Sprintf("%s since %s", holder, time.Now().UTC().Format(time.RFC3339)),
		seconds(lease), seconds(2*k.Interval), seconds(lockGrace)).AsRoot()
	line, err := cmd.line(c.t.User == "root")
	if err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Start(line); err != nil {
		s.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	first, err := bufio.NewReader(stdout).ReadString('\n')
	first = strings.TrimSpace(first)
	switch {
	case first == "LOCKED":
		stop := make(chan struct{})
		go heartbeat(stdin, k.Interval, stop)
		var once sync.Once
		return func() {
			once.Do(func() {
				close(stop)
				_, _ = stdin.Write([]byte("release\n"))
				stdin.Close()
				_ = s.Wait()
				s.Close()
			})
		}, nil
	case strings.HasPrefix(first, "BUSY"):
		_ = s.Wait()
		s.Close()
		return nil, &LockedError{Host: c.t.Name, Path: path, Holder: strings.TrimSpace(strings.TrimPrefix(first, "BUSY"))}
	}
	werr := s.Wait()
	s.Close()
	if err == nil || errors.Is(err, io.EOF) {
		err = werr
	}
	return nil, fmt.Errorf("lock %s: %v: %s", path, err, tail(stderr.String(), 3))
}

// heartbeat tells the lock's holder the run is alive, every interval,
// until stop.
func heartbeat(w io.Writer, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := w.Write([]byte(".\n")); err != nil {
				return
			}
		}
	}
}

// lockGrace is how long a contender waits on a busy lock before it
// looks closer: a run killed a moment ago has a holder that is still
// noticing its connection closed (sshd sees the FIN within moments), and
// the user who reruns at once must get in rather than be told to wait.
const lockGrace = 2 * time.Second

// seconds is d in whole seconds for a shell, at least 1.
func seconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
