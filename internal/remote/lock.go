package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// LockPath is the default run lock on every host mgmtctl changes. It is under /run
// (a tmpfs), so a reboot clears it, and flock(1) releases it when the
// holding process dies, so a killed run never leaves a stale lock.
const LockPath = "/run/mgmtctl.lock"

// lockScript takes an exclusive flock on $1 and holds it until stdin
// closes, which happens when the SSH session ends for any reason. The holder
// line ($2) is written into the file for whoever finds it busy.
const lockScript = `exec 9>>"$1" || exit 70
if flock -n 9; then
  printf '%s\n' "$2" > "$1"
  echo LOCKED
  exec cat > /dev/null
fi
printf 'BUSY '
cat -- "$1"
exit 75`

// Lock holds the run lock on c until the returned release is called (or the
// connection ends). A lock held by another run fails at once with a
// LockedError naming the holder and since when.
func (c *Conn) Lock(ctx context.Context, holder string) (release func(), err error) {
	s, err := c.session(ctx)
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
	cmd := Script("take the lock "+path, lockScript, path, fmt.Sprintf("%s since %s", holder, time.Now().UTC().Format(time.RFC3339))).AsRoot()
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
		return func() {
			stdin.Close()
			_ = s.Wait()
			s.Close()
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
