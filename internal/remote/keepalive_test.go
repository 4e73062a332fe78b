package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/sshtest"
)

// silentProxy forwards to addr until silenced; from then on it swallows
// what either side sends and keeps the sockets open, as a dropped Wi-Fi
// link or a fenced node does: nothing is refused, nothing answers.
func silentProxy(t *testing.T, addr string) (string, *atomic.Bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var silent atomic.Bool
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				dst.Close()
				return
			}
			if !silent.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					src.Close()
					return
				}
			}
		}
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			t.Cleanup(func() { in.Close(); out.Close() })
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return l.Addr().String(), &silent
}

// connectTo connects straight to s with keepalive k.
func connectTo(t *testing.T, s *sshtest.Server, k remote.KeepAlive) *remote.Conn {
	t.Helper()
	d := dialer()
	d.KeepAlive = k
	c, err := d.Connect(context.Background(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// throughSilentProxy connects to s, with keepalive k, through a proxy
// that can be silenced.
func throughSilentProxy(t *testing.T, s *sshtest.Server, k remote.KeepAlive) (*remote.Conn, *atomic.Bool) {
	t.Helper()
	addr, silent := silentProxy(t, s.Addr)
	d := dialer()
	d.KeepAlive = k
	d.Timeout = time.Second
	d.Retry.Attempts = 1
	c, err := d.Connect(context.Background(), viaProxy(t, s, addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, silent
}

// TestKeepAliveClosesASilentConnection: a link that stops answering in the
// middle of a command fails it within CountMax+1 intervals, with the host,
// its address, the command, how long it ran and that it may be half-done.
func TestKeepAliveClosesASilentConnection(t *testing.T) {
	k := remote.KeepAlive{Interval: 100 * time.Millisecond, CountMax: 3}
	c, silent := throughSilentProxy(t, sshtest.Start(t), k)
	go func() { time.Sleep(300 * time.Millisecond); silent.Store(true) }()
	start := time.Now()
	_, err := c.Run(context.Background(), remote.Command("sleep", "30"))
	took := time.Since(start)
	var dropped *remote.DroppedError
	var noAnswer *remote.NoAnswerError
	if !errors.As(err, &dropped) || !errors.As(err, &noAnswer) {
		t.Fatalf("err = %v (%T), want a DroppedError for no answer", err, err)
	}
	if !dropped.MayBeHalfDone || !remote.IsUnreachable(err) {
		t.Errorf("a mutating command cut off: MayBeHalfDone %v, unreachable %v", dropped.MayBeHalfDone, remote.IsUnreachable(err))
	}
	// Silenced at 0.3 s, given up after 4 unanswered ticks at most.
	if took > 3*time.Second {
		t.Errorf("gave up after %v", took)
	}
	for _, want := range []string{"pv1-1", "127.0.0.1:", "into sleep 30", "no answer from the host for", "(3 keepalives 100ms apart, none answered)", "may have stopped part of the way"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	t.Logf("detected after %v: %v", took, err)
	// The connection stays known as given up, for a wait on the host.
	if err := c.Silent("a wait on pv1-1"); !errors.As(err, &noAnswer) || !strings.Contains(err.Error(), "lost the connection to pv1-1 (127.0.0.1:") ||
		!strings.Contains(err.Error(), "during a wait on pv1-1: no answer from the host") {
		t.Errorf("Silent = %v", err)
	}

	// A read-only query reconnects once, through the same silent link:
	// the handshake times out and the query fails, bounded, too.
	start = time.Now()
	_, err = c.Look(context.Background(), remote.AnyQuery("sleep", "30"))
	if !remote.IsUnreachable(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("query on a silent link: %v after %v", err, time.Since(start))
	}
}

// TestSilentWhileOpeningASession: a link that stops answering as a
// command's session is being opened fails the command once the keepalives
// give up, as a connection lost during it, with nothing of it run (so
// nothing half-done); not, after a second wait, as a host that never
// answered a new connection.
func TestSilentWhileOpeningASession(t *testing.T) {
	k := remote.KeepAlive{Interval: 100 * time.Millisecond, CountMax: 3}
	c, silent := throughSilentProxy(t, sshtest.Start(t), k)
	if _, err := c.Run(context.Background(), remote.Command("true")); err != nil {
		t.Fatal(err)
	}
	silent.Store(true)
	_, err := c.Run(context.Background(), remote.Command("touch", "x"))
	var dropped *remote.DroppedError
	var noAnswer *remote.NoAnswerError
	if !errors.As(err, &dropped) || !errors.As(err, &noAnswer) {
		t.Fatalf("err = %v (%T), want a DroppedError for no answer", err, err)
	}
	if dropped.MayBeHalfDone || dropped.Ran != 0 || !remote.IsUnreachable(err) {
		t.Errorf("a command that never started: MayBeHalfDone %v, ran %v, unreachable %v", dropped.MayBeHalfDone, dropped.Ran, remote.IsUnreachable(err))
	}
	for _, want := range []string{"lost the connection to pv1-1 (127.0.0.1:", "during touch x: no answer from the host for"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
}

// TestKeepAliveKeepsAnAnsweringConnection: a command longer than the
// watch's whole patience (Interval × (CountMax+1), 2.5 s: a watch that
// ignored the answers would give the connection up before the command
// ends) runs to its end while sshd answers the keepalives. sshd may take
// up to that patience to answer, on a machine as busy as it likes: with
// keepalives 50 ms apart and two allowed unanswered, a busy CI machine's
// sshd answered too late (#54).
func TestKeepAliveKeepsAnAnsweringConnection(t *testing.T) {
	t.Parallel()
	c, _ := throughSilentProxy(t, sshtest.Start(t), remote.KeepAlive{Interval: 500 * time.Millisecond, CountMax: 4})
	res, err := c.Run(context.Background(), remote.Command("sh", "-c", "sleep 4; echo done"))
	if err != nil || string(res.Stdout) != "done\n" {
		t.Fatalf("a live connection was given up: %v", err)
	}
	if err := c.Silent("a wait"); err != nil {
		t.Errorf("Silent on a live connection: %v", err)
	}
}

// TestForwardedConnectionFailsWithTheLink: an API connection dialed
// through the host fails once the link is given up, instead of waiting on
// TCP.
func TestForwardedConnectionFailsWithTheLink(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			conn, err := echo.Accept()
			if err != nil {
				return
			}
			go io.Copy(conn, conn)
		}
	}()
	c, silent := throughSilentProxy(t, sshtest.Start(t), remote.KeepAlive{Interval: 100 * time.Millisecond, CountMax: 2})
	fc, err := c.DialContext(context.Background(), "tcp", echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	silent.Store(true)
	start := time.Now()
	fc.Write([]byte("ping"))
	_, err = io.ReadAll(fc)
	if time.Since(start) > 3*time.Second {
		t.Fatalf("the forwarded read ended after %v (%v)", time.Since(start), err)
	}
}

func TestKeepAliveUserTimeout(t *testing.T) {
	for _, tc := range []struct {
		k    remote.KeepAlive
		want time.Duration
	}{
		{remote.KeepAlive{}, 30 * time.Second},
		{remote.KeepAlive{Interval: 5 * time.Second, CountMax: 2}, 10 * time.Second},
		{remote.KeepAlive{Interval: time.Second}, 3 * time.Second},
	} {
		if got := tc.k.UserTimeout(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.k, got, tc.want)
		}
	}
}

// TestLockOfASilentRunIsGivenUp: a run holds the lock and runs a long
// command when its link goes silent. sshd would keep both for hours; the
// lock's holder stops hearing heartbeats, stops what that connection
// still runs on the host, and frees the lock within its lease, so the
// next run gets in and races nothing.
func TestLockOfASilentRunIsGivenUp(t *testing.T) {
	k := remote.KeepAlive{Interval: time.Second, CountMax: 1}
	s := sshtest.Start(t)
	a, silent := throughSilentProxy(t, s, k)
	ctx := context.Background()
	if _, err := a.Lock(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	ran := make(chan error, 1)
	go func() {
		_, err := a.Run(ctx, remote.Command("sh", "-c", `echo $$ > "$1"; exec sleep 60`, "sh", pidFile))
		ran <- err
	}()
	var pid string
	for deadline := time.Now().Add(5 * time.Second); pid == ""; {
		b, _ := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
		if time.Now().After(deadline) {
			t.Fatal("the long command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	silent.Store(true)

	b := connectTo(t, s, k)
	start := time.Now()
	for {
		release, err := b.Lock(ctx, "bob")
		if err == nil {
			release()
			break
		}
		var le *remote.LockedError
		if !errors.As(err, &le) || time.Since(start) > 10*time.Second {
			t.Fatalf("the silent run's lock is still held after %v: %v", time.Since(start), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("lock free %v after the link went silent", time.Since(start).Round(100*time.Millisecond))
	if running(pid) {
		t.Errorf("the silent run's command (pid %s) still runs on the host", pid)
	}
	if err := <-ran; !remote.IsUnreachable(err) {
		t.Errorf("the cut-off command: %v", err)
	}
}

// running reports whether pid runs (a zombie has ended: its parent, sshd,
// just has not reaped it yet).
func running(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestPatienceIsForTheFirstConnection: a host that may still be booting
// is tried many times on the first connection; once it answered, a
// connection that drops is tried again under the dialer's own retry, so a
// link gone down mid-run is reported, not waited for like a boot.
func TestPatienceIsForTheFirstConnection(t *testing.T) {
	s := sshtest.Start(t)
	addr, seen := flakyProxy(t, s.Addr, 3)
	tg := viaProxy(t, s, addr)
	d := dialer()
	d.Retry.Attempts = 1
	patient := remote.Retry{Attempts: 10, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}
	c, err := d.ConnectWaiting(context.Background(), tg, patient)
	if err != nil {
		t.Fatalf("the first connection, patiently: %v", err)
	}
	defer c.Close()
	if seen.Load() != 4 {
		t.Errorf("connections = %d, want 4 (3 dropped, then in)", seen.Load())
	}
	c.Close()        // the link drops...
	seen.Store(-100) // ...and the proxy now drops every connection
	_, err = c.Look(context.Background(), remote.AnyQuery("true"))
	var u *remote.UnreachableError
	if !errors.As(err, &u) || u.Attempts != 1 {
		t.Fatalf("a reconnect after the drop: %v, want one attempt", err)
	}
}
