package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/mgmtctl/mgmtctl/internal/redact"
)

// Target is a host to connect to.
type Target struct {
	Name string // how messages and the recap call it, e.g. pv1-1
	Addr string // host:port
	User string
	// KnownHosts are the files that vouch for host keys.
	KnownHosts []string
	// Identities are private key files tried after the agent's keys.
	Identities []string
	// LockPath overrides the run lock's path (tests); empty is LockPath.
	LockPath string
	// AcceptNewHostKey trusts an unknown host's key on first contact (a
	// changed key is still refused); LearnedHostKey then returns it.
	AcceptNewHostKey bool
}

// Retry bounds reconnection attempts for transient errors.
type Retry struct {
	Attempts int
	// OnRetry, if set, hears about each failed attempt before the pause.
	OnRetry func(attempt int, err error)
	// Backoff returns the pause before attempt n (n >= 1); nil means
	// exponential from 500ms, capped at 8s.
	Backoff func(n int) time.Duration
}

func (r Retry) pause(n int) time.Duration {
	if r.Backoff != nil {
		return r.Backoff(n)
	}
	return min(500*time.Millisecond<<(n-1), 8*time.Second)
}

// Dialer opens SSH connections. Its zero value is not usable; fill it.
type Dialer struct {
	// AgentSocket is $SSH_AUTH_SOCK, or empty for no agent.
	AgentSocket string
	Retry       Retry
	Log         *slog.Logger
	Redactor    *redact.Redactor
	// Timeout bounds one TCP connect plus handshake; zero is
	// DefaultConnectTimeout.
	Timeout time.Duration
	// KeepAlive watches every connection; zero is DefaultKeepAlive.
	KeepAlive KeepAlive
}

// DefaultConnectTimeout bounds one connection attempt: generous for a
// host on the lab's or the user's network, and short enough that a run's
// attempts at a host that is gone (4, with their pauses) end within a
// minute.
const DefaultConnectTimeout = 10 * time.Second

// Conn is one SSH connection to a host; it runs many sessions and
// reconnects when the connection drops between commands.
type Conn struct {
	d    *Dialer
	t    Target
	mu   sync.Mutex
	link *link
	hk   *hostKeys
	// silence is why the last link was given up, kept until a new
	// connection is made (reconnects that fail leave no link to ask).
	silence *NoAnswerError
}

// link is one SSH connection and its keepalive watch.
type link struct {
	client *ssh.Client
	stop   chan struct{}
	w      *watcher
	// closed is closed once the connection is; err is then why.
	closed chan struct{}
	err    error
}

func newLink(cl *ssh.Client, k KeepAlive) *link {
	l := &link{client: cl, stop: make(chan struct{}), w: newWatcher(k), closed: make(chan struct{})}
	go l.w.run(cl, l.stop)
	go func() {
		l.err = cl.Wait()
		close(l.closed)
	}()
	return l
}

// why is the reason a command on the link was cut off: the keepalive
// watch's verdict, or the kernel's when TCP_USER_TIMEOUT fired first (both
// mean the peer went silent), else what the SSH layer said.
func (l *link) why(sshErr error) error {
	select {
	case <-l.closed:
	case <-time.After(time.Second):
		// The session saw the end before the connection did.
	}
	if dead := l.silent(); dead != nil {
		return dead
	}
	return sshErr
}

// Silent is why the connection was given up, when the host stopped
// answering and no connection has been made since: a *DroppedError
// saying what was under way (what), or nil.
func (c *Conn) Silent(what string) error {
	c.mu.Lock()
	l, dead := c.link, c.silence
	c.mu.Unlock()
	if l != nil {
		dead = l.silent()
	}
	if dead == nil {
		return nil
	}
	return &DroppedError{Host: c.t.Name, Addr: c.t.Addr, Cmd: what, Err: dead}
}

// silent is why the link was given up for silence (the watch's verdict,
// or the kernel's timeout), or nil while it lives or when it ended for
// another reason.
func (l *link) silent() *NoAnswerError {
	if dead := l.w.dead.Load(); dead != nil {
		return dead
	}
	select {
	case <-l.closed:
		if errors.Is(l.err, syscall.ETIMEDOUT) {
			return l.w.silent(l.err)
		}
	default:
	}
	return nil
}

func (l *link) close() error {
	close(l.stop)
	return l.client.Close()
}

var _ Host = (*Conn)(nil)

// Connect dials t, verifying its host key and retrying transient errors.
func (d *Dialer) Connect(ctx context.Context, t Target) (*Conn, error) {
	return d.ConnectWaiting(ctx, t, d.Retry)
}

// ConnectWaiting is Connect for a host that may not answer yet (a VM
// booting): the first connection is tried under first, however patient;
// a later reconnect, after a connection that dropped, under the Dialer's
// own Retry, so a link that goes down mid-run fails the run instead of
// being waited for like a boot.
func (d *Dialer) ConnectWaiting(ctx context.Context, t Target, first Retry) (*Conn, error) {
	hk, err := newHostKeys(t.KnownHosts)
	if err != nil {
		return nil, err
	}
	hk.acceptNew = t.AcceptNewHostKey
	c := &Conn{d: d, t: t, hk: hk}
	if err := c.connect(ctx, first); err != nil {
		return nil, err
	}
	return c, nil
}

// LearnedHostKey is the key accepted on first contact, or nil when the
// host was already known.
func (c *Conn) LearnedHostKey() ssh.PublicKey { return c.hk.learned }

// HostKey is the verified key the host presented.
func (c *Conn) HostKey() ssh.PublicKey { return c.hk.presented }

// Name implements Host.
func (c *Conn) Name() string { return c.t.Name }

// User is the login user.
func (c *Conn) User() string { return c.t.User }

func (c *Conn) log() *slog.Logger {
	if c.d.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.d.Log
}

func (c *Conn) auth() ([]ssh.AuthMethod, func(), error) {
	var signers []ssh.Signer
	closer := func() {}
	if c.d.AgentSocket != "" {
		if sock, err := net.Dial("unix", c.d.AgentSocket); err == nil {
			closer = func() { sock.Close() }
			if s, err := agent.NewClient(sock).Signers(); err == nil {
				signers = append(signers, s...)
			}
		} else {
			c.log().Debug("ssh-agent unavailable", "socket", c.d.AgentSocket, "err", err)
		}
	}
	for _, f := range c.t.Identities {
		pem, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s, err := ssh.ParsePrivateKey(pem)
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			c.log().Info("skipping passphrase-protected key; add it to ssh-agent", "file", f)
			continue
		}
		if err != nil {
			return nil, closer, fmt.Errorf("read private key %s: %w", f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 {
		return nil, closer, fmt.Errorf("no SSH key to log in with: no ssh-agent keys and none of %s", strings.Join(c.t.Identities, ", "))
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, closer, nil
}

// transient reports whether a connection error may go away on its own.
func transient(err error) bool {
	var hk *HostKeyError
	if errors.As(err, &hk) {
		return false
	}
	if strings.Contains(err.Error(), "unable to authenticate") {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "handshake failed: EOF")
}

func (c *Conn) reconnect(ctx context.Context) error { return c.connect(ctx, c.d.Retry) }

func (c *Conn) connect(ctx context.Context, retry Retry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link != nil {
		if why := c.link.silent(); why != nil {
			c.silence = why
		}
		c.link.close()
		c.link = nil
	}
	attempts := max(retry.Attempts, 1)
	var err error
	for n := 1; n <= attempts; n++ {
		if n > 1 {
			select {
			case <-ctx.Done():
				// The last attempt's error says more than the deadline.
				return &UnreachableError{Host: c.t.Name, Addr: c.t.Addr, Attempts: n - 1, Err: err}
			case <-time.After(retry.pause(n - 1)):
			}
		}
		var client *ssh.Client
		client, err = c.dial(ctx)
		if err == nil {
			c.link = newLink(client, c.d.KeepAlive)
			c.silence = nil
			return nil
		}
		c.log().Debug("ssh connect failed", "host", c.t.Name, "addr", c.t.Addr, "attempt", n, "err", err)
		if retry.OnRetry != nil && n < attempts {
			retry.OnRetry(n, err)
		}
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return hk
		}
		if !transient(err) {
			return &UnreachableError{Host: c.t.Name, Addr: c.t.Addr, Attempts: n, Err: err}
		}
	}
	return &UnreachableError{Host: c.t.Name, Addr: c.t.Addr, Attempts: attempts, Err: err}
}

func (c *Conn) dial(ctx context.Context) (*ssh.Client, error) {
	timeout := c.d.Timeout
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// TCP's own keepalive covers an idle link; TCP_USER_TIMEOUT one
	// with data in flight, which TCP otherwise retransmits for minutes.
	nd := &net.Dialer{KeepAlive: 15 * time.Second, Control: userTimeout(c.d.KeepAlive.UserTimeout())}
	nc, err := nd.DialContext(dctx, "tcp", c.t.Addr)
	if err != nil {
		return nil, err
	}
	auth, closeAgent, err := c.auth()
	defer closeAgent()
	if err != nil {
		nc.Close()
		return nil, err
	}
	cfg := &ssh.ClientConfig{
		User:              c.t.User,
		Auth:              auth,
		HostKeyCallback:   c.hk.callback(c.t.Addr),
		HostKeyAlgorithms: c.hk.algorithms(c.t.Addr),
		Timeout:           timeout,
	}
	_ = nc.SetDeadline(time.Now().Add(timeout))
	sc, chans, reqs, err := ssh.NewClientConn(nc, c.t.Addr, cfg)
	if err != nil {
		nc.Close()
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return nil, hk
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("log in as %s: no offered key was accepted (%w)", c.t.User, err)
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

func (c *Conn) current() *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link
}

// Close ends the connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link == nil {
		return nil
	}
	err := c.link.close()
	c.link = nil
	return err
}

// session opens a session, reconnecting once if the connection has dropped
// (nothing has run yet, so this is always safe).
func (c *Conn) session(ctx context.Context) (*ssh.Session, *link, error) {
	if l := c.current(); l != nil {
		s, err := l.client.NewSession()
		if err == nil {
			return s, l, nil
		}
		// The host went silent while the session was being opened: the
		// keepalives have already waited for it, so a new connection
		// would only wait again and then misname the failure as a host
		// that never answered. Nothing has started on the host.
		if lost := (&lostError{err: err, link: l, beforeStart: true}); lost.silent() {
			return nil, nil, lost
		}
		c.log().Debug("ssh session failed; reconnecting", "host", c.t.Name, "err", err)
	}
	if err := c.reconnect(ctx); err != nil {
		return nil, nil, err
	}
	l := c.current()
	s, err := l.client.NewSession()
	return s, l, err
}

// Run implements Runner. A read-only command is killed when ctx ends and
// retried once after a dropped connection; a mutating one runs to its end
// regardless of ctx, so an interrupt never leaves it half-done.
func (c *Conn) Run(ctx context.Context, cmd Cmd) (Result, error) {
	res, err := c.run(ctx, cmd)
	var lost *lostError
	// A read-only command is tried again over a new connection when the
	// old one broke (sshd restarted, a reset); not when the host went
	// silent: the keepalives already waited for it.
	if errors.As(err, &lost) && cmd.ReadOnly && ctx.Err() == nil && !lost.silent() {
		c.log().Debug("connection lost during a read-only command; retrying", "host", c.t.Name, "cmd", c.redact(cmd.String()))
		if rerr := c.reconnect(ctx); rerr != nil {
			return res, rerr
		}
		res, err = c.run(ctx, cmd)
	}
	if errors.As(err, &lost) {
		return res, &DroppedError{Host: c.t.Name, Addr: c.t.Addr, Cmd: c.redact(cmd.Display()), Ran: lost.ran,
			MayBeHalfDone: !cmd.ReadOnly && !lost.beforeStart, Err: lost.cause()}
	}
	return res, err
}

// lostError is a connection that dropped while a command ran.
type lostError struct {
	err  error
	ran  time.Duration
	link *link
	why  error // cause's answer, once asked
	// beforeStart: the connection went before the command's session
	// opened, so nothing of it ran.
	beforeStart bool
}

func (e *lostError) Error() string { return e.err.Error() }

// silent reports whether the connection went because the host stopped
// answering.
func (e *lostError) silent() bool {
	var na *NoAnswerError
	return errors.As(e.cause(), &na)
}

// cause is why the connection went (link.why).
func (e *lostError) cause() error {
	if e.why == nil {
		e.why = e.err
		if e.link != nil {
			e.why = e.link.why(e.err)
		}
	}
	return e.why
}

func (c *Conn) redact(s string) string { return c.d.Redactor.String(s) }

// watchdogScript runs "$@" with a watchdog that kills the session's whole
// process group when stdin closes. sshd makes each session its own process
// group; OpenSSH refuses signal requests for root logins ("session
// signalling requires privilege separation"), so closing stdin is how a
// cancelled read-only command is stopped on every host. After a normal exit
// the watchdog lingers only until sshd closes the channel.
const watchdogScript = `exec 3<&0 </dev/null
{ cat <&3 >/dev/null; kill -TERM 0; } >/dev/null 2>&1 &
"$@"`

func (c *Conn) run(ctx context.Context, cmd Cmd) (Result, error) {
	watched := cmd.ReadOnly && cmd.Stdin == nil
	sent := cmd
	if watched {
		sent.Args = append([]string{"sh", "-c", watchdogScript, "sh"}, cmd.Args...)
	}
	line, err := sent.line(c.t.User == "root")
	if err != nil {
		return Result{}, fmt.Errorf("run %s on %s: %w", c.redact(cmd.Display()), c.t.Name, err)
	}
	if !cmd.ReadOnly {
		ctx = context.WithoutCancel(ctx)
	}
	start := time.Now()
	s, l, err := c.session(ctx)
	if err != nil {
		return Result{}, err
	}
	lost := func(err error) *lostError { return &lostError{err: err, ran: time.Since(start), link: l} }
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	var keepOpen io.WriteCloser
	switch {
	case watched:
		if keepOpen, err = s.StdinPipe(); err != nil {
			return Result{}, lost(err)
		}
	case cmd.Stdin != nil:
		s.Stdin = bytes.NewReader(cmd.Stdin)
	}
	if err := s.Start(line); err != nil {
		return Result{}, lost(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		if keepOpen != nil {
			keepOpen.Close() // the watchdog kills the command's session
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.Close()
		}
		return Result{}, fmt.Errorf("run %s on %s: %w", c.redact(cmd.Display()), c.t.Name, ctx.Err())
	}
	if keepOpen != nil {
		keepOpen.Close()
	}
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitStatus()
	case errors.As(err, &missing), errors.Is(err, io.EOF):
		return res, lost(err)
	default:
		return res, lost(err)
	}
	c.log().Debug("ran", "host", c.t.Name, "cmd", c.redact(cmd.String()), "sudo", cmd.Sudo, "exit", res.ExitCode,
		"ms", time.Since(start).Milliseconds(), "stderr", c.redact(tail(string(res.Stderr), 5)))
	if !cmd.accepts(res.ExitCode) {
		msg := tail(string(res.Stderr), 3)
		if cmd.Sudo && strings.Contains(msg, "sudo: a password is required") {
			msg += fmt.Sprintf(" (user %s needs passwordless sudo)", c.t.User)
		}
		return res, &ExitError{Host: c.t.Name, Cmd: c.redact(cmd.Display()), Code: res.ExitCode, Stderr: c.redact(msg)}
	}
	return res, nil
}

// Look implements Reader.
func (c *Conn) Look(ctx context.Context, q Query) (Result, error) { return c.Run(ctx, q.c) }

// ReadFile implements Host.
func (c *Conn) ReadFile(ctx context.Context, path string, sudo bool) ([]byte, error) {
	return ReadFile(ctx, c, path, sudo)
}

// WriteFile implements Host.
func (c *Conn) WriteFile(ctx context.Context, f File) (bool, error) {
	return WriteFile(ctx, c, f)
}

// Probe implements Reader: a TCP connection from the host's side to addr,
// closed at once.
func (c *Conn) Probe(ctx context.Context, addr netip.AddrPort) error {
	nc, err := c.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return err
	}
	return nc.Close()
}

// DialContext opens a TCP connection from the host's side, so a remote
// port need not be reachable from the laptop: the session's way to the
// Kubernetes API on the VM. It is a method of the connection, not of a
// Reader or Host: what holds one of those cannot dial.
func (c *Conn) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	l := c.current()
	if l == nil {
		if err := c.reconnect(ctx); err != nil {
			return nil, err
		}
		l = c.current()
	}
	return l.client.DialContext(ctx, network, addr)
}
