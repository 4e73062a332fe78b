// Package session is what the phases of one run share: its connections
// (one per host, locked for a run that may change it), the hosts' keys,
// the laptop's record of a VM it created, its one way to the cluster
// (Cluster), the run's Executor over all of these, and the run's record of
// what it saw (StepFailed). Package phase builds the phases from the
// config and a Session.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/pveaccess"
	"github.com/mgmtctl/mgmtctl/internal/pvelock"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Session is what the phases of one run share: the config, whether it may
// change anything, and the connections it opened.
type Session struct {
	Config *config.Loaded
	// ReadOnly makes a session that cannot change anything (check mode,
	// status): no Executor, hosts unlocked, no cluster client that
	// writes, and an earlier VM's key at a new VM's address not consulted;
	// a VM or kubeconfig that does not exist yet is a state to report, not
	// an error. In every session the phases get hosts and the cluster as
	// Readers. Which steps run and whether
	// to apply is the engine's business, not the session's.
	ReadOnly bool
	// NoSnapshot (apply --no-snapshot) takes no backup before a risky
	// change (a k3s upgrade, a provider's version).
	NoSnapshot bool
	Dialer     *remote.Dialer
	// Holder names this run in the host lock ("user@laptop pid 123").
	Holder string
	Log    *slog.Logger
	// AcceptNewHostKey lets the VM's host key be learned although this run
	// did not create the VM (--accept-new-host-key).
	AcceptNewHostKey bool
	// WaitTimeout bounds every wait (the VM answering SSH, the node
	// Ready, a chart usable, the provider API, a provider Ready); zero
	// keeps each wait's default.
	WaitTimeout time.Duration
	// Redact registers secret values met during the run (credentials in
	// k3s.yaml, minted tokens) with the run's redactor.
	Redact func(values ...string)

	mu      sync.Mutex
	conns   map[string]*hostConn
	cluster *Cluster
	api     *pve.Client
	// apiLock is the run lock on Proxmox in api access (LockAPI).
	apiLock *pvelock.Held
	apiHTTP *http.Client
	once    map[string]*onceResult
	// stopWarm cancels the dials WarmVMs started.
	stopWarm context.CancelFunc
}

// WarmVMs dials, in the background, the VM of every server mgmtctl has
// reached before, so that its SSH handshake (and lock) happens while the
// run dials the Proxmox nodes and runs the preflight, rather than after
// them: a converged run reads every node and every VM, and the VM was
// otherwise dialed only once the vm phase had read its node. The dial is
// the one the phases would make (DialVM: the same host-key rules, one
// attempt); they take the connection when it is ready, or, if it failed
// (a VM stopped or gone), dial again with their own patience. Nothing is
// shown for a failed warm dial. Close cancels one still under way.
func (s *Session) WarmVMs(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.stopWarm = cancel
	s.mu.Unlock()
	for _, srv := range s.Config.Servers() {
		if s.VMNeverReached(srv) {
			// A VM mgmtctl created and has not reached: it may still
			// be booting, which the vm phase waits for.
			continue
		}
		go func() { _, _ = s.DialVM(ctx, srv, false, nil) }()
	}
}

// Once runs check the first time name is asked for in the run, and
// returns its result every time: a look two parts of a run need (the
// Proxmox token's permissions, for the preflight and the vm phase) is
// made once. Callers that ask at once (the preflight's checks run side by
// side with the phases' Prepare) wait for the one look under way rather
// than each making its own.
func (s *Session) Once(name string, check func() error) error {
	s.mu.Lock()
	if s.once == nil {
		s.once = map[string]*onceResult{}
	}
	o, ok := s.once[name]
	if !ok {
		o = &onceResult{}
		s.once[name] = o
	}
	s.mu.Unlock()
	o.do.Do(func() { o.err = check() })
	return o.err
}

// onceResult is one look of Once: made by the first caller, its error
// read by all once made.
type onceResult struct {
	do  sync.Once
	err error
}

// API says the vm phase reaches the nodes through the Proxmox API
// (spec.proxmox.access: api), not over SSH.
func (s *Session) API() bool { return s.Config.Cluster.Spec.Proxmox.API() }

// ProxmoxAPI is the Proxmox API with mgmtctl's own token, for the steps
// to read (api access): the client itself only the Executor holds. Any
// node answers for all of the cluster's.
func (s *Session) ProxmoxAPI() pve.Reader { return pve.ReadOnly(s.apiClient()) }

func (s *Session) apiClient() *pve.Client {
	hc := s.ProxmoxHTTP()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.api == nil {
		p := s.Config.Cluster.Spec.Proxmox
		s.api = pve.New(p.APIURL, p.MgmtctlTokenID, s.Config.Secrets.Proxmox.MgmtctlTokenSecret, hc)
	}
	return s.api
}

// LockPool is the Proxmox pool under which a run in api access takes
// its lock (package pvelock): one per cluster, made once by the commands
// `mgmtctl proxmox role --for mgmtctl` prints.
func LockPool(l *config.Loaded) string { return "mgmtctl-" + l.Cluster.Metadata.Name }

// LockAPI takes the run lock on Proxmox, in api access and a run that may
// change something, before the run reads the nodes through the API (as
// SSH mode locks a node as it connects): a second laptop's run is refused
// with a *pvelock.LockedError naming the first. The lock is taken once a
// run and held, renewed, until Close.
func (s *Session) LockAPI(ctx context.Context) error {
	if s.ReadOnly || !s.API() {
		return nil
	}
	return s.Once("proxmox-api-lock", func() error {
		h, err := (&pvelock.Lock{API: s.apiClient(), Parent: LockPool(s.Config), Holder: s.Holder}).Acquire(ctx)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.apiLock = h
		s.mu.Unlock()
		return nil
	})
}

// lockedAPI is the writing client for the Executor: only while this run
// holds the lock on Proxmox, so that a run that lost it (its lease ran
// out while the laptop stalled) changes nothing more.
func (s *Session) lockedAPI() (*pve.Client, error) {
	s.mu.Lock()
	h := s.apiLock
	s.mu.Unlock()
	if h == nil {
		return nil, errors.New("a change through the Proxmox API before the run took its lock on Proxmox")
	}
	if err := h.Valid(); err != nil {
		return nil, err
	}
	return s.apiClient(), nil
}

// ProxmoxHTTP is the run's one client for the Proxmox API, whichever
// token a call carries (mgmtctl's, CAPMOX's): it verifies the API's
// certificate as spec.proxmox says (caFile, fingerprint, or the laptop's
// trust store). Load has checked the CA parses.
func (s *Session) ProxmoxHTTP() *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apiHTTP == nil {
		p := s.Config.Cluster.Spec.Proxmox
		hc, err := pveaccess.HTTPClient(p.CA, p.Fingerprint)
		if err != nil {
			panic("config: a loaded spec.proxmox.caFile does not parse: " + err.Error())
		}
		s.apiHTTP = hc
	}
	return s.apiHTTP
}

// Cluster is the session's one way to the cluster, made on first use: the
// phases' (and status's) Reader, and the Executor's client.
func (s *Session) Cluster() *Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		s.cluster = &Cluster{s: s}
	}
	return s.cluster
}

// Executor is the run's effect.Executor: it carries out plans over the
// connections the phases opened (a host by its name) and the cluster
// they reached. A read-only session has none: nothing may change.
func (s *Session) Executor() step.Executor {
	if s.ReadOnly {
		return nil
	}
	return &effect.Executor{
		Host:     s.byName,
		API:      func(context.Context) (*pve.Client, error) { return s.lockedAPI() },
		Cluster:  func(ctx context.Context) (*kube.Cluster, error) { return s.Cluster().write(ctx) },
		Redact:   s.Redact,
		Progress: step.Progress,
	}
}

// APIDialer dials from h's side: the way to the Kubernetes API on the
// VM, for the kube.Reader the steps hold and the Executor's kube.Cluster.
// A Reader has no dial of its own (a step could reach the API with
// k3s.yaml's admin client through one); the session dials through the
// connection it opened.
func (s *Session) APIDialer(h remote.Reader) kube.Dialer {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := s.connNamed(h.Name())
		if err != nil {
			return nil, err
		}
		return c.DialContext(ctx, network, addr)
	}
}

// byName is the open connection to the host of that name (a node's or a
// VM's, as its target names it).
func (s *Session) byName(ctx context.Context, name string) (remote.Host, error) {
	return s.connNamed(name)
}

// connNamed is the open connection whose target has that name; two of one
// name are an error, not a guess.
func (s *Session) connNamed(name string) (*remote.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *remote.Conn
	for _, hc := range s.conns {
		if hc.conn == nil || hc.conn.Name() != name {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("two connections are named %s: a plan's effect on it is ambiguous", name)
		}
		found = hc.conn
	}
	if found == nil {
		return nil, fmt.Errorf("no connection to %s in this run", name)
	}
	return found, nil
}

// hostConn is one host's connection, or the dial that makes it: ready
// is closed once the dial ended, conn (or err) set under the session's
// mutex. The dial itself runs outside the mutex, so that hosts are dialed
// side by side.
type hostConn struct {
	conn    *remote.Conn
	release func()
	ready   chan struct{}
	err     error
}

// ProxmoxTarget is the Proxmox node of srv as an SSH target.
func (s *Session) ProxmoxTarget(srv config.Server) remote.Target {
	return remote.Target{
		Name:       srv.Node,
		Addr:       withPort(srv.Host),
		User:       s.Config.Cluster.Spec.Proxmox.User,
		KnownHosts: []string{s.Config.Env.Expand("~/.ssh/known_hosts")},
		Identities: s.identities(),
	}
}

// identities are the private keys tried after the agent's: the one beside
// spec.vm.sshPublicKeyFile first, then OpenSSH's defaults.
func (s *Session) identities() []string {
	var ids []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			ids = append(ids, p)
		}
	}
	if pub := s.Config.Env.Expand(s.Config.Cluster.Spec.VM.SSHPublicKeyFile); strings.HasSuffix(pub, ".pub") {
		add(strings.TrimSuffix(pub, ".pub"))
	}
	for _, k := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		add(s.Config.Env.Expand(filepath.Join("~/.ssh", k)))
	}
	return ids
}

func withPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(host, "22")
}

// Host returns the connection to t as a Reader, opening it on first use.
// A run that may change the host takes its lock first; a check run does
// not lock.
func (s *Session) Host(ctx context.Context, t remote.Target) (remote.Reader, error) {
	h, _, err := s.hostWith(ctx, s.Dialer, s.Dialer.Retry, t)
	return h, err
}

func (s *Session) hostWith(ctx context.Context, d *remote.Dialer, first remote.Retry, t remote.Target) (remote.Reader, *remote.Conn, error) {
	for {
		s.mu.Lock()
		if s.conns == nil {
			s.conns = map[string]*hostConn{}
		}
		hc, ok := s.conns[t.Addr]
		if !ok {
			hc = &hostConn{ready: make(chan struct{})}
			s.conns[t.Addr] = hc
			s.mu.Unlock()
			conn, release, err := s.connect(ctx, d, first, t)
			s.mu.Lock()
			// The session closed while this dialed (a warm dial):
			// nothing will use or close the connection but this.
			orphan := err == nil && s.conns[t.Addr] != hc
			if orphan {
				err = errSessionClosed
			} else {
				hc.conn, hc.release = conn, release
			}
			hc.err = err
			if err != nil {
				// A failed dial is not kept: the next caller dials again.
				delete(s.conns, t.Addr)
			}
			close(hc.ready)
			s.mu.Unlock()
			if orphan {
				if release != nil {
					release()
				}
				conn.Close()
			}
			if err != nil {
				return nil, nil, err
			}
			return remote.ReadOnly(conn), conn, nil
		}
		s.mu.Unlock()
		select {
		case <-hc.ready:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		s.mu.Lock()
		conn, err := hc.conn, hc.err
		s.mu.Unlock()
		if err == nil {
			// The phases and their steps only ever read a host: what
			// they hand out is its Reader, with nothing behind it to
			// assert a Host from. The run's Executor alone holds the
			// connection as a Host (byName).
			return remote.ReadOnly(conn), conn, nil
		}
		// Another caller's dial failed: this one dials with its own
		// patience (a wait for a booting VM knocks longer than a look).
	}
}

// connect dials t and, in a run that may change it, takes its lock.
func (s *Session) connect(ctx context.Context, d *remote.Dialer, first remote.Retry, t remote.Target) (*remote.Conn, func(), error) {
	c, err := d.ConnectWaiting(ctx, t, first)
	if err != nil {
		return nil, nil, err
	}
	if s.ReadOnly {
		return c, nil, nil
	}
	release, err := c.Lock(ctx, s.Holder)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, release, nil
}

// VMHostKey is the verified host key srv's VM presented, or nil before
// mgmtctl has connected to it.
func (s *Session) VMHostKey(srv config.Server) ssh.PublicKey {
	return s.vmKey(srv, (*remote.Conn).HostKey)
}

// LearnedVMKey is the host key srv's VM presented on first contact in this
// run, nil when the run has not reached it or knew its key already.
func (s *Session) LearnedVMKey(srv config.Server) ssh.PublicKey {
	return s.vmKey(srv, (*remote.Conn).LearnedHostKey)
}

// vmKey is key of the connection to srv's VM, nil without one.
func (s *Session) vmKey(srv config.Server, key func(*remote.Conn) ssh.PublicKey) ssh.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hc, ok := s.conns[s.VMTarget(srv).Addr]; ok && hc.conn != nil {
		return key(hc.conn)
	}
	return nil
}

// BackupDir is where the cluster's backups go by default.
func (s *Session) BackupDir() string {
	return s.Config.Env.Expand("~/.local/share/mgmtctl/backups/" + s.Config.Cluster.Metadata.Name)
}

// InspectorKubeconfigPath is where the inspector's kubeconfig lands.
func (s *Session) InspectorKubeconfigPath() string {
	return s.Config.Env.Expand("~/.kube/" + s.Config.Cluster.Spec.Inspector.Name + ".kubeconfig")
}

// VMKnownHosts is the known_hosts file mgmtctl keeps for the VMs it made.
func (s *Session) VMKnownHosts() string {
	return s.Config.Env.Expand("~/.config/mgmtctl/known_hosts")
}

// NewVMMarker is the laptop-side record that mgmtctl created srv's VM and
// has not met its host key yet.
func (s *Session) NewVMMarker(srv config.Server) string {
	return s.Config.Env.Expand(fmt.Sprintf("~/.config/mgmtctl/new-vm-%d-%s", srv.ID, srv.Net.Addr()))
}

// VMNeverReached reports that mgmtctl created srv's VM and has never
// reached it: its host key is still to be learned.
func (s *Session) VMNeverReached(srv config.Server) bool {
	_, err := os.Stat(s.NewVMMarker(srv))
	return err == nil
}

// NewVMRecord is the laptop's record of srv's VM, as the vm phase's
// wait-ssh reads it.
func (s *Session) NewVMRecord(srv config.Server) proxmox.NewVMRecord { return newVM{s, srv} }

// newVM is the session's record of a VM it created (proxmox.NewVMRecord):
// the marker file, and a line in it once a run gave up waiting for it.
type newVM struct {
	s   *Session
	srv config.Server
}

// gaveUpLine starts the line a run that waited for SSH to the end of its
// bound appends, followed by " at " and when (RFC 3339): the next run
// resets the VM only if it has not booted again since.
const gaveUpLine = "a run waited for SSH to the end of its bound"

func (r newVM) NeverReached() bool { return r.s.VMNeverReached(r.srv) }

// GaveUpAt is when a run last gave up waiting for the VM. A line without
// a time (written before times were) reads as long ago: the VM is reset
// once it has had its boot time.
func (r newVM) GaveUpAt() (time.Time, bool) {
	b, err := os.ReadFile(r.s.NewVMMarker(r.srv))
	if err != nil {
		return time.Time{}, false
	}
	var last time.Time
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, gaveUpLine); ok {
			found = true
			if t, err := time.Parse(time.RFC3339, strings.TrimPrefix(rest, " at ")); err == nil && t.After(last) {
				last = t
			}
		}
	}
	return last, found
}

// StepFailed is the run's one record outside the plans, fed every failed
// step's error by the command running the engine: a wait-ssh that ran out
// of its bound on a VM mgmtctl created and never reached appends a line
// to that VM's record, so the next run resets it rather than wait again
// (proxmox.Reachable). It is what the run saw, not a change to converge,
// like the debug log (docs/decisions.md); no step writes it. A check run
// or status records nothing.
func (s *Session) StepFailed(host string, err error) error {
	var na *proxmox.NeverAnsweredError
	if s.ReadOnly || !errors.As(err, &na) {
		return nil
	}
	for _, srv := range s.Config.Servers() {
		if srv.Name != host || fmt.Sprint(srv.ID) != na.VMID {
			continue
		}
		if !(newVM{s, srv}).NeverReached() {
			return nil
		}
		f, err := os.OpenFile(s.NewVMMarker(srv), os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("record that the wait for VM %s gave up: %w", na.VMID, err)
		}
		_, err = f.WriteString(gaveUpLine + " at " + time.Now().UTC().Format(time.RFC3339) + "\n")
		return errors.Join(err, f.Close())
	}
	return nil
}

// VMTarget is srv's VM as an SSH target: its user, with sudo.
func (s *Session) VMTarget(srv config.Server) remote.Target {
	return remote.Target{
		Name:       srv.Name,
		Addr:       netip.AddrPortFrom(srv.Net.Addr(), 22).String(),
		User:       s.Config.Cluster.Spec.VM.User,
		KnownHosts: []string{s.VMKnownHosts()},
		Identities: s.identities(),
	}
}

// DialVM connects to srv's VM. Its host key is accepted on first contact
// only when mgmtctl created the VM and has not reached it yet (the create
// plan forgot an earlier VM's entry) or the user said
// --accept-new-host-key; otherwise it must match what was recorded
// before. DialVM writes nothing: the vm phase's record-host-key step
// records a key accepted here. That mgmtctl created the VM is its record
// on the laptop (create-vm's plan writes it before qm create), observed
// here, not a note from the create step. With wait, it keeps trying until
// the VM answers or ctx ends.
func (s *Session) DialVM(ctx context.Context, srv config.Server, wait bool, progress func(string)) (remote.Reader, error) {
	t := s.VMTarget(srv)
	created := s.VMNeverReached(srv)
	if created && s.ReadOnly {
		// plan and status look and write nothing: the entry a run would
		// forget (an earlier VM's key at this address) is not consulted.
		t.KnownHosts = slices.DeleteFunc(slices.Clone(t.KnownHosts), func(f string) bool { return f == s.VMKnownHosts() })
	}
	t.AcceptNewHostKey = created || s.AcceptNewHostKey
	// Short attempts: a SYN lost while the guest boots is resent by a new
	// attempt rather than by TCP's slow retransmit schedule. A connection
	// that drops later is tried again once: the VM has booted by then, so
	// a link that went down is a failure to report, not a boot to wait for.
	d := *s.Dialer
	d.Timeout = 5 * time.Second
	d.Retry = remote.Retry{Attempts: 1}
	first := d.Retry
	if wait {
		// A booting VM: keep knocking with a bounded backoff; the step's
		// context bounds the whole wait.
		first = remote.Retry{Attempts: 1 << 20, Backoff: func(n int) time.Duration {
			return min(250*time.Millisecond<<min(n, 4), 3*time.Second)
		}, OnRetry: func(n int, err error) {
			if progress != nil && n%5 == 1 {
				progress(fmt.Sprintf("waiting for SSH on %s (attempt %d: %v)", t.Addr, n, err))
			}
		}}
	}
	h, conn, err := s.hostWith(ctx, &d, first, t)
	if err != nil {
		var hk *remote.HostKeyError
		if errors.As(err, &hk) && !hk.Changed() {
			hk.Hint = "mgmtctl learns a VM's key only on first contact right after creating it; if this is your VM, run again with --accept-new-host-key"
		}
		return nil, err
	}
	if key := conn.LearnedHostKey(); key != nil && s.Log != nil {
		s.Log.Info("accepted VM host key on first contact", "addr", t.Addr, "fingerprint", ssh.FingerprintSHA256(key))
	}
	return h, nil
}

// linkAware wraps a cluster's transport: a request that fails because the
// SSH link to host (which every API connection rides on) was given up
// fails with that, a *remote.DroppedError (exit 4, the host named), rather
// than with what HTTP saw of it (EOF, a lost HTTP/2 connection).
func (s *Session) LinkAware(host string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return linkAware{next: rt, lost: func() error { return s.lostDuring(host, "a Kubernetes API request") }}
	}
}

type linkAware struct {
	next http.RoundTripper
	lost func() error
}

func (l linkAware) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil {
		if lost := l.lost(); lost != nil {
			return nil, fmt.Errorf("%w (%v)", lost, err)
		}
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport beneath to cancel
// a request (k8s.io/apimachinery/pkg/util/net.RoundTripperWrapper).
func (l linkAware) WrappedRoundTripper() http.RoundTripper { return l.next }

// Lost says whether the connection to host (a step's Host: a node's or a
// VM's name) was given up because the host stopped answering, for the
// engine to end a wait on it at once (engine.Options.Lost).
func (s *Session) Lost(host string) error { return s.lostDuring(host, "a wait on "+host) }

func (s *Session) lostDuring(host, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hc := range s.conns {
		if hc.conn != nil && hc.conn.Name() == host {
			return hc.conn.Silent(what)
		}
	}
	return nil
}

// errSessionClosed is a dial that ended after the session did.
var errSessionClosed = errors.New("the run's session is closed")

// Close releases every lock and connection.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopWarm != nil {
		s.stopWarm()
	}
	// Each release waits for its host's lock holder to answer: one round
	// trip, every host's at once.
	var wg sync.WaitGroup
	for _, hc := range s.conns {
		wg.Go(func() {
			if hc.release != nil {
				hc.release()
			}
			if hc.conn != nil {
				hc.conn.Close()
			}
		})
	}
	if s.apiLock != nil {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.apiLock.Release(ctx); err != nil && s.Log != nil {
				// Its lease runs out on its own: the next run waits
				// for that.
				s.Log.Warn("release the run lock on Proxmox", "pool", s.apiLock.Pool(), "err", err)
			}
		})
	}
	wg.Wait()
	s.conns = nil
	s.apiLock = nil
}
