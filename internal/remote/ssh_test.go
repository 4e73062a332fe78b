package remote_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/sshtest"
)

func target(s *sshtest.Server) remote.Target {
	return remote.Target{Name: "pv1-1", Addr: s.Addr, User: s.User, KnownHosts: []string{s.KnownHosts},
		Identities: []string{s.ClientKey}, LockPath: filepath.Join(s.Dir, "mgmtctl.lock")}
}

func dialer() *remote.Dialer {
	return &remote.Dialer{Retry: remote.Retry{Attempts: 3, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}}
}

func connect(t *testing.T, s *sshtest.Server) *remote.Conn {
	t.Helper()
	c, err := dialer().Connect(context.Background(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRun(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	ctx := context.Background()

	res, err := c.Look(ctx, remote.AnyQuery("sh", "-c", "echo out; echo err >&2"))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 0 {
		t.Errorf("res = %+v", res)
	}

	_, err = c.Run(ctx, remote.Command("sh", "-c", "echo 'VM 110 already running' >&2; exit 255"))
	var ee *remote.ExitError
	if !errors.As(err, &ee) || ee.Code != 255 || ee.Host != "pv1-1" || ee.Stderr != "VM 110 already running" {
		t.Fatalf("err = %#v", err)
	}
	// The host is in the error's data; the engine names it in the message,
	// once, with the step.
	if want := "sh -c 'echo '\\''VM 110 already running'\\'' >&2; exit 255' exited 255: VM 110 already running"; err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}

	// A script fails with what it was doing and its own message; the
	// script's text is for the debug log only.
	var log bytes.Buffer
	d := dialer()
	d.Log = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc, err := d.Connect(ctx, target(s))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	_, err = sc.Run(ctx, remote.Script("download https://mirror.example/x.img", "set -eu\necho 'curl: (56) Recv failure: Connection reset by peer' >&2\nexit 56", "x"))
	if want := "download https://mirror.example/x.img exited 56: curl: (56) Recv failure: Connection reset by peer"; err == nil || err.Error() != want {
		t.Errorf("script error:\n got %v\nwant %s", err, want)
	}
	if !strings.Contains(log.String(), "set -eu") {
		t.Errorf("the debug log lacks the script:\n%s", log.String())
	}

	res, err = c.Look(ctx, remote.AnyQuery("sh", "-c", "exit 3").Allow(3))
	if err != nil || res.ExitCode != 3 {
		t.Errorf("allowed exit code: res=%+v err=%v", res, err)
	}

	res, err = c.Run(ctx, remote.AnyQuery("cat").Cmd().WithStdin([]byte("from stdin")))
	if err != nil || string(res.Stdout) != "from stdin" {
		t.Errorf("stdin: %q %v", res.Stdout, err)
	}
}

func TestHostileArgumentsArriveIntact(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	for _, v := range []string{"$(touch /tmp/pwned)", "`id`", "a'b", "; rm -rf /", "a\nb", "*", "${HOME}", "--", ""} {
		res, err := c.Look(context.Background(), remote.AnyQuery("printf", "%s", v))
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != v {
			t.Errorf("sent %q, host saw %q", v, res.Stdout)
		}
	}
	if _, err := c.Look(context.Background(), remote.AnyQuery("echo", "a\x00b")); err == nil {
		t.Error("a NUL byte must be rejected, not sent")
	}
}

func TestReadWriteFile(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "etc", "rancher", "k3s", "config.yaml")

	if _, err := c.ReadFile(ctx, p, true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
	f := remote.File{Path: p, Content: []byte("tls-san:\n- 192.0.2.50\n"), Mode: 0o600, Sudo: true}
	steps := []struct {
		name    string
		change  func()
		changed bool
	}{
		{"create", func() {}, true},
		{"same again", func() {}, false},
		{"mode differs", func() { f.Mode = 0o644 }, true},
		{"content differs", func() { f.Content = []byte("tls-san:\n- 192.0.2.51\n") }, true},
		{"owner given and equal", func() { f.Owner = "root:root" }, false},
		{"converged", func() {}, false},
	}
	for _, st := range steps {
		st.change()
		changed, err := c.WriteFile(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if changed != st.changed {
			t.Errorf("%s: changed = %v, want %v", st.name, changed, st.changed)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, f.Content) {
			t.Errorf("%s: content %q, %v", st.name, got, err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != f.Mode {
			t.Errorf("%s: mode %v, want %v", st.name, fi.Mode().Perm(), f.Mode)
		}
	}
	read, err := c.ReadFile(ctx, p, false)
	if err != nil || !bytes.Equal(read, f.Content) {
		t.Errorf("ReadFile = %q, %v", read, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

// TestWriteFileFailureLeavesTargetAlone: a write that fails half-way (here:
// chown to a user that does not exist) leaves the old file and no
// temporary file.
func TestWriteFileFailureLeavesTargetAlone(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	dir := t.TempDir()
	p := filepath.Join(dir, "k3s.yaml")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := c.WriteFile(context.Background(), remote.File{Path: p, Content: []byte("new"), Mode: 0o600, Owner: "no-such-user:no-such-group"})
	if err == nil {
		t.Fatal("want an error")
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("target changed to %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary file left behind: %v", entries)
	}
}

// TestReadOnlyGate: a Reader over a connection runs queries and reads, and
// nothing behind it is a Host or a Runner: a step holding it cannot write
// (a call to Run or WriteFile does not compile; an assertion fails).
func TestReadOnlyGate(t *testing.T) {
	s := sshtest.Start(t)
	h := remote.ReadOnly(connect(t, s))
	ctx := context.Background()
	if _, ok := h.(remote.Host); ok {
		t.Error("a Reader asserts to a Host")
	}
	if _, ok := h.(remote.Runner); ok {
		t.Error("a Reader asserts to a Runner")
	}
	if res, err := h.Look(ctx, remote.AnyQuery("echo", "hi")); err != nil || string(res.Stdout) != "hi\n" {
		t.Errorf("query blocked: %v", err)
	}
	if _, err := h.ReadFile(ctx, s.KnownHosts, false); err != nil {
		t.Errorf("read blocked: %v", err)
	}
}

func TestBatch(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	res, err := remote.Batch(context.Background(), c, false,
		remote.AnyQuery("echo", "first"),
		remote.AnyQuery("sh", "-c", "echo partial; echo oops >&2; exit 2"),
		remote.AnyQuery("printf", "no newline"),
		remote.AnyQuery("cat"), // stdin is /dev/null inside a batch: must not hang
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []remote.Result{
		{Stdout: []byte("first\n"), Stderr: []byte{}},
		{Stdout: []byte("partial\n"), Stderr: []byte("oops\n"), ExitCode: 2},
		{Stdout: []byte("no newline"), Stderr: []byte{}},
		{Stdout: []byte{}, Stderr: []byte{}},
	}
	for i := range want {
		if string(res[i].Stdout) != string(want[i].Stdout) || string(res[i].Stderr) != string(want[i].Stderr) || res[i].ExitCode != want[i].ExitCode {
			t.Errorf("result %d = {%q %q %d}, want {%q %q %d}", i, res[i].Stdout, res[i].Stderr, res[i].ExitCode, want[i].Stdout, want[i].Stderr, want[i].ExitCode)
		}
	}
	// A mutating command cannot join a batch: Batch takes Queries, and
	// remote.Command makes a Cmd (a compile error).
}

// TestBatchRunsConcurrently: the commands of a batch run at the same time,
// so the first can see what the second does; run one after the other, the
// first would give up after its bound.
func TestBatchRunsConcurrently(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	flag := filepath.Join(t.TempDir(), "second-ran")
	res, err := remote.Batch(context.Background(), c, false,
		remote.AnyQuery("timeout", "20", "sh", "-c", `until [ -e "$1" ]; do sleep 0.01; done; echo saw the second`, "sh", flag),
		remote.AnyQuery("sh", "-c", `: > "$1"; echo second`, "sh", flag),
	)
	if err != nil {
		t.Fatal(err)
	}
	if string(res[0].Stdout) != "saw the second\n" || res[0].ExitCode != 0 || string(res[1].Stdout) != "second\n" {
		t.Errorf("results: {%q %d} {%q %d}", res[0].Stdout, res[0].ExitCode, res[1].Stdout, res[1].ExitCode)
	}
}

func TestUnknownHostKey(t *testing.T) {
	s := sshtest.Start(t)
	tg := target(s)
	tg.KnownHosts = []string{filepath.Join(t.TempDir(), "known_hosts")} // does not exist
	_, err := dialer().Connect(context.Background(), tg)
	var hk *remote.HostKeyError
	if !errors.As(err, &hk) || hk.Changed() {
		t.Fatalf("err = %v", err)
	}
	if !remote.IsUnreachable(err) {
		t.Error("a refused host key must map to the unreachable class")
	}
	fp := ssh.FingerprintSHA256(s.HostKey)
	for _, want := range []string{"host key of [127.0.0.1]:", "is unknown", fp, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub", "ssh-keyscan -t ed25519 -p "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
}

func TestChangedHostKey(t *testing.T) {
	s := sshtest.Start(t)
	other := sshtest.Start(t) // another host key
	tg := target(s)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, other.HostKey) + "\n"
	if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	tg.KnownHosts = []string{kh}
	_, err := dialer().Connect(context.Background(), tg)
	var hk *remote.HostKeyError
	if !errors.As(err, &hk) || !hk.Changed() {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"CHANGED", ssh.FingerprintSHA256(s.HostKey), ssh.FingerprintSHA256(other.HostKey), "ssh-keygen -R"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
}

// viaProxy is s's target reached through a proxy at addr: known_hosts
// names the proxy's address with the server's key.
func viaProxy(t *testing.T, s *sshtest.Server, addr string) remote.Target {
	t.Helper()
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, s.HostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := target(s)
	tg.Addr, tg.KnownHosts = addr, []string{kh}
	return tg
}

// flakyProxy forwards to addr but drops the first n connections at once.
func flakyProxy(t *testing.T, addr string, n int32) (string, *atomic.Int32) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var seen atomic.Int32
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			if seen.Add(1) <= n {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return l.Addr().String(), &seen
}

func TestRetryTransient(t *testing.T) {
	s := sshtest.Start(t)
	addr, seen := flakyProxy(t, s.Addr, 2)
	tg := viaProxy(t, s, addr)

	c, err := dialer().Connect(context.Background(), tg)
	if err != nil {
		t.Fatalf("3 attempts should ride over 2 drops: %v", err)
	}
	c.Close()
	if seen.Load() != 3 {
		t.Errorf("connections = %d, want 3", seen.Load())
	}

	addr2, _ := flakyProxy(t, s.Addr, 5)
	_, err = dialer().Connect(context.Background(), viaProxy(t, s, addr2))
	var u *remote.UnreachableError
	if !errors.As(err, &u) || u.Attempts != 3 || !strings.Contains(err.Error(), "pv1-1") || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	s := sshtest.Start(t)
	tg := target(s)
	tg.Addr = addr
	_, err := dialer().Connect(context.Background(), tg)
	if !remote.IsUnreachable(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v", err)
	}
}

func TestAuthFailureIsNotRetried(t *testing.T) {
	s := sshtest.Start(t)
	other := sshtest.Start(t)
	tg := target(s)
	tg.Identities = []string{other.ClientKey} // not authorized on s
	_, err := dialer().Connect(context.Background(), tg)
	var u *remote.UnreachableError
	if !errors.As(err, &u) || u.Attempts != 1 || !strings.Contains(err.Error(), "log in as root: no offered key was accepted") {
		t.Fatalf("err = %v", err)
	}
}

func TestReconnectBetweenCommands(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	c.Close() // the connection drops between two commands
	if res, err := c.Look(context.Background(), remote.AnyQuery("echo", "back")); err != nil || string(res.Stdout) != "back\n" {
		t.Fatalf("no reconnect: %v", err)
	}
}

func TestCancelKillsQueryButNotCommand(t *testing.T) {
	s := sshtest.Start(t)
	c := connect(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-time.After(200 * time.Millisecond); cancel() }()
	start := time.Now()
	_, err := c.Look(ctx, remote.AnyQuery("sleep", "30"))
	if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
		t.Fatalf("query not cancelled: %v after %v", err, time.Since(start))
	}

	marker := filepath.Join(t.TempDir(), "done")
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := c.Run(ctx, remote.Command("sh", "-c", "sleep 0.3; touch \"$1\"", "sh", marker)); err != nil {
		t.Fatalf("mutating command aborted by a cancelled context: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the mutating command did not run to its end")
	}
}

func TestLock(t *testing.T) {
	s := sshtest.Start(t)
	a, b := connect(t, s), connect(t, s)
	ctx := context.Background()
	release, err := a.Lock(ctx, "alice@laptop pid 1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Lock(ctx, "bob@laptop pid 2")
	var le *remote.LockedError
	if !errors.As(err, &le) || !strings.HasPrefix(le.Holder, "alice@laptop pid 1 since 20") {
		t.Fatalf("err = %v", err)
	}
	release()
	release2, err := b.Lock(ctx, "bob@laptop pid 2")
	if err != nil {
		t.Fatalf("lock not released: %v", err)
	}
	// A run that dies without releasing: its connection drops, and the
	// lock goes with it.
	b.Close()
	_ = release2
	// The user who reruns at once gets in on the first try: the contender
	// gives a holder that is still noticing the drop a moment.
	c := connect(t, s)
	release3, err := c.Lock(ctx, "carol")
	if err != nil {
		t.Fatalf("lock of a dead run still held: %v", err)
	}
	release3()
}

func TestRedactedErrors(t *testing.T) {
	s := sshtest.Start(t)
	var x redact.Redactor
	secret := "5e9a1f7c-0000-4000-8000-123456789abc"
	x.Add(secret)
	d := dialer()
	d.Redactor = &x
	c, err := d.Connect(context.Background(), target(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Run(context.Background(), remote.Command("sh", "-c", "echo \"bad token $0\" >&2; exit 1", secret))
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), redact.Mask) {
		t.Fatalf("err = %v", err)
	}
}

// TestAgentAuth logs in with a key held only by a real ssh-agent.
func TestAgentAuth(t *testing.T) {
	s := sshtest.Start(t)
	agentBin, err := exec.LookPath("ssh-agent")
	if err != nil {
		t.Skip("ssh-agent not installed (openssh-client)")
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agent := exec.Command(agentBin, "-D", "-a", sock)
	stdout, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { agent.Process.Kill(); agent.Wait() }()
	// The agent prints its environment lines once its socket listens.
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("ssh-agent did not start: %v", err)
	}
	add := exec.Command("ssh-add", s.ClientKey)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v %s", err, out)
	}
	tg := target(s)
	tg.Identities = nil
	d := dialer()
	d.AgentSocket = sock
	c, err := d.Connect(context.Background(), tg)
	if err != nil {
		t.Fatalf("agent login: %v", err)
	}
	c.Close()
	tg.Identities = nil
	d.AgentSocket = ""
	if _, err := d.Connect(context.Background(), tg); err == nil || !strings.Contains(err.Error(), "no SSH key to log in with") {
		t.Errorf("without agent or keys: %v", err)
	}
}
