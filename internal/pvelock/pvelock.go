// Package pvelock is the run lock of mgmtctl's API mode
// (spec.proxmox.access: api), held on Proxmox itself: SSH mode locks each
// host with flock (remote.Conn.Lock), but a run through the API has no
// shell on the node, and two laptops must still not both create a VM.
//
// The API offers one atomic test-and-set that a least-privilege token
// can be given on a path of its own: creating a pool. pve-manager's
// PVE/API2/Pool.pm create_pool runs under lock_user_config and dies
// "pool '<id>' already exists", so of two creates of one name exactly one
// succeeds. Nothing else there compares and swaps: update_pool (PUT
// /pools) has no digest, and delete_pool needs the pool empty but not
// unchanged. So the lock is a generation of child pools under a parent
// pool the user makes once (`mgmtctl proxmox role` prints it):
//
//	mgmtctl-<cluster>/g1, mgmtctl-<cluster>/g2, ...
//
// whose newest generation holds the lock, its comment naming the holder
// and the time its lease runs out (by the holder's clock). A run takes
// the lock by creating the next generation, which only one contender
// can; it then lists the generations again and holds the lock only if
// its own is still the newest (a contender that read an older list and
// created a generation the list had already passed backs off), deletes
// the older ones, and renews its lease (PUT, its comment) while it runs.
// A run killed holding the lock stops renewing: once its lease has run
// out the next run takes over with the generation after it. Releasing
// dates the comment's lease to the release; the newest generation is
// never deleted, so generations only grow (a deleted newest one would
// let a slow contender's create succeed on a name that was passed).
//
// Pools nest since pve-access-control 8.0 (e7224f6, "allow up to three
// levels of pool nesting": PVE 8.1 and later), and an ACL on the parent
// propagates to its children (pve-access-control
// src/PVE/AccessControl.pm roles, path by path), so the token needs
// Pool.Allocate and Pool.Audit on /pool/<parent> only.
package pvelock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// API is the Proxmox API as the lock calls it (pve.Client.Do): GET and
// DELETE with params in the query, POST and PUT form-encoded.
type API interface {
	Do(ctx context.Context, method, path string, params url.Values, out any) error
}

// DefaultLease is how long a lock outlives its holder's last renewal:
// long enough that a run on a slow link keeps it (renewed every third of
// it), short enough that a laptop closed mid-run blocks the next for
// about a minute.
const DefaultLease = 60 * time.Second

// Lock is one cluster's run lock on a Proxmox cluster.
type Lock struct {
	API API
	// Parent is the pool the generations live under (mgmtctl-<cluster>).
	Parent string
	// Holder names the run ("user@laptop pid 123").
	Holder string
	// Lease is DefaultLease when zero.
	Lease time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
}

// LockedError is a lock another run holds.
type LockedError struct {
	Pool   string // the generation that holds it
	Holder string // as its comment names it
	Until  time.Time
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("the Proxmox cluster is locked by another mgmtctl run (%s, lock pool %s, lease until %s unless renewed); wait for it to finish",
		e.Holder, e.Pool, e.Until.UTC().Format(time.RFC3339))
}

// LostError is a lock this run held and no longer does: its lease ran
// out before a renewal (a stalled laptop or link), and another run may
// have taken it.
type LostError struct {
	Pool string
	Err  error // why the renewals failed, nil when superseded
}

func (e *LostError) Error() string {
	s := "lost the Proxmox run lock " + e.Pool
	if e.Err != nil {
		return s + ": its lease ran out without a renewal: " + e.Err.Error()
	}
	return s + ": another run took it after its lease ran out"
}

func (e *LostError) Unwrap() error { return e.Err }

// ParentMissingError is a parent pool the token cannot see: not made yet,
// or no Pool.Audit on it.
type ParentMissingError struct{ Pool string }

func (e *ParentMissingError) Error() string {
	return fmt.Sprintf("the run lock's pool %s does not exist on Proxmox or mgmtctl's token cannot see it (Pool.Audit): run the commands `mgmtctl proxmox role --for mgmtctl` prints", e.Pool)
}

// comment is the holder's lease as a generation's comment says it.
var comment = regexp.MustCompile(`^mgmtctl run lock held by (.+) until (\S+)$`)

func leaseComment(holder string, until time.Time) string {
	return "mgmtctl run lock held by " + holder + " until " + until.UTC().Format(time.RFC3339Nano)
}

// generation is one child pool of the parent.
type generation struct {
	n       int
	pool    string
	holder  string
	until   time.Time // zero: a comment not the lock's (held, as far as anyone can tell)
	foreign bool
}

func (l *Lock) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Lock) lease() time.Duration {
	if l.Lease > 0 {
		return l.Lease
	}
	return DefaultLease
}

// list is the parent's generations, oldest first.
func (l *Lock) list(ctx context.Context) ([]generation, error) {
	var pools []struct {
		PoolID  string `json:"poolid"`
		Comment string `json:"comment"`
	}
	// GET /pools lists the pools the token has Pool.Audit on (Pool.pm
	// index): the parent and, through the ACL's propagation, its
	// children.
	if err := l.API.Do(ctx, http.MethodGet, "/pools", nil, &pools); err != nil {
		return nil, fmt.Errorf("read the run lock's pools: %w", err)
	}
	var gens []generation
	parent := false
	for _, p := range pools {
		if p.PoolID == l.Parent {
			parent = true
			continue
		}
		leaf, ok := strings.CutPrefix(p.PoolID, l.Parent+"/g")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(leaf)
		if err != nil || n < 1 || strconv.Itoa(n) != leaf {
			continue
		}
		g := generation{n: n, pool: p.PoolID}
		if m := comment.FindStringSubmatch(p.Comment); m != nil {
			if t, err := time.Parse(time.RFC3339Nano, m[2]); err == nil {
				g.holder, g.until = m[1], t
			}
		}
		if g.until.IsZero() {
			// A child someone else made or edited: it holds the lock
			// until a person looks (never taken over on a guess).
			g.foreign, g.holder = true, fmt.Sprintf("a pool whose comment is not mgmtctl's: %q", p.Comment)
		}
		gens = append(gens, g)
	}
	if !parent {
		return nil, &ParentMissingError{Pool: l.Parent}
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i].n < gens[j].n })
	return gens, nil
}

func newest(gens []generation) (generation, bool) {
	if len(gens) == 0 {
		return generation{}, false
	}
	return gens[len(gens)-1], true
}

// Acquire takes the lock, or fails with a *LockedError naming its holder.
// The returned Held renews it until Release.
func (l *Lock) Acquire(ctx context.Context) (*Held, error) {
	// Each pass either takes the lock, finds it held, or finds that a
	// contender moved the generations on meanwhile and looks again; a
	// few passes settle any race of a handful of laptops.
	for range 5 {
		gens, err := l.list(ctx)
		if err != nil {
			return nil, err
		}
		top, any := newest(gens)
		if any && (top.foreign || top.until.After(l.now())) {
			return nil, &LockedError{Pool: top.pool, Holder: top.holder, Until: top.until}
		}
		next := fmt.Sprintf("%s/g%d", l.Parent, top.n+1)
		until := l.now().Add(l.lease())
		cerr := l.API.Do(ctx, http.MethodPost, "/pools", url.Values{"poolid": {next}, "comment": {leaseComment(l.Holder, until)}}, nil)
		after, err := l.list(ctx)
		if err != nil {
			return nil, err
		}
		now, _ := newest(after)
		switch {
		case now.pool == next && now.holder == l.Holder:
			// Its own generation is the newest (a create whose answer
			// was lost, too: the comment names this run).
			h := &Held{l: l, pool: next, until: until, stop: make(chan struct{}), done: make(chan struct{})}
			// The older generations are expired or released: gone, so
			// that the parent does not fill up. A failure is left for
			// the next run's holder to clean.
			for _, g := range after[:len(after)-1] {
				_ = l.API.Do(ctx, http.MethodDelete, "/pools", url.Values{"poolid": {g.pool}}, nil)
			}
			go h.renew()
			return h, nil
		case cerr == nil:
			// Made, but a newer generation is there: a contender read a
			// newer list; this one is not the lock.
			_ = l.API.Do(ctx, http.MethodDelete, "/pools", url.Values{"poolid": {next}}, nil)
		case !containsPool(after, next):
			// The create failed and nobody made the pool: the failure
			// is the answer (no Pool.Allocate, the API down).
			return nil, fmt.Errorf("take the run lock %s: %w", next, cerr)
		}
		// A contender made that generation: look again.
	}
	return nil, fmt.Errorf("take the run lock under pool %s: other runs kept moving it on", l.Parent)
}

func containsPool(gens []generation, pool string) bool {
	for _, g := range gens {
		if g.pool == pool {
			return true
		}
	}
	return false
}

// Held is a lock this run holds.
type Held struct {
	l    *Lock
	pool string

	mu    sync.Mutex
	until time.Time
	lost  error

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Pool is the generation that holds the lock.
func (h *Held) Pool() string { return h.pool }

// Valid is nil while the lock is this run's: a change made through the
// API checks it first, so that a run whose lease ran out changes nothing
// more.
func (h *Held) Valid() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.lost
	}
	if !h.until.After(h.l.now()) {
		return &LostError{Pool: h.pool, Err: errors.New("no renewal since " + h.until.UTC().Format(time.RFC3339))}
	}
	return nil
}

// renew extends the lease every third of it, until Release. A renewal
// that finds a newer generation has lost the lock (its lease ran out
// while this run stalled); a failed one is tried again until the lease
// runs out, when Valid fails.
func (h *Held) renew() {
	defer close(h.done)
	every := h.l.lease() / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := h.renewOnce(ctx)
		cancel()
		if err != nil {
			var lost *LostError
			if errors.As(err, &lost) {
				h.mu.Lock()
				h.lost = err
				h.mu.Unlock()
				return
			}
		}
	}
}

func (h *Held) renewOnce(ctx context.Context) error {
	gens, err := h.l.list(ctx)
	if err != nil {
		return err
	}
	if top, _ := newest(gens); top.pool != h.pool {
		return &LostError{Pool: h.pool}
	}
	until := h.l.now().Add(h.l.lease())
	if err := h.l.API.Do(ctx, http.MethodPut, "/pools", url.Values{"poolid": {h.pool}, "comment": {leaseComment(h.l.Holder, until)}}, nil); err != nil {
		return err
	}
	h.mu.Lock()
	h.until = until
	h.mu.Unlock()
	return nil
}

// Release stops the renewals and ends the lease now, in one call: its
// comment dated to the release. Only the newest generation's comment
// counts, so a release that comes after the lock was lost (another
// run's generation is newer) changes nothing that matters, and one
// whose generation the next holder already deleted fails harmlessly.
// The generation itself stays: the next holder deletes it.
func (h *Held) Release(ctx context.Context) error {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	if h.Valid() != nil {
		return nil
	}
	return h.l.API.Do(ctx, http.MethodPut, "/pools", url.Values{"poolid": {h.pool}, "comment": {leaseComment(h.l.Holder, h.l.now())}}, nil)
}
