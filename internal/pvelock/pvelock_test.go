package pvelock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// pools is the part of pve-manager's PVE/API2/Pool.pm the lock calls,
// under one mutex as Pool.pm's handlers run under lock_user_config: GET
// lists every pool with its comment (index), POST creates one or dies
// "already exists" (create_pool, its parent required), PUT sets a
// comment (update_pool), DELETE removes an empty one (delete_pool).
// The lab's Proxmox API serves the same calls to the end-to-end tests
// (lab/internal/pveapi); these tests need races run in a set order.
type pools struct {
	mu       sync.Mutex
	comments map[string]string
	calls    []string
}

type apiError struct{ status int }

func (e apiError) Error() string { return fmt.Sprint("status ", e.status) }

func newPools(names ...string) *pools {
	p := &pools{comments: map[string]string{}}
	for _, n := range names {
		p.comments[n] = ""
	}
	return p
}

func (p *pools) Do(_ context.Context, method, path string, params url.Values, out any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := params.Get("poolid")
	p.calls = append(p.calls, method+" "+id)
	if path != "/pools" {
		return apiError{501}
	}
	switch method {
	case http.MethodGet:
		var list []struct {
			PoolID  string `json:"poolid"`
			Comment string `json:"comment"`
		}
		for _, n := range sortedKeys(p.comments) {
			list = append(list, struct {
				PoolID  string `json:"poolid"`
				Comment string `json:"comment"`
			}{n, p.comments[n]})
		}
		*(out.(*[]struct {
			PoolID  string `json:"poolid"`
			Comment string `json:"comment"`
		})) = list
	case http.MethodPost:
		if _, ok := p.comments[id]; ok {
			return apiError{500} // "pool '<id>' already exists"
		}
		if i := strings.LastIndexByte(id, '/'); i > 0 {
			if _, ok := p.comments[id[:i]]; !ok {
				return apiError{500} // "parent '<p>' of pool '<id>' does not exist"
			}
		}
		p.comments[id] = params.Get("comment")
	case http.MethodPut:
		if _, ok := p.comments[id]; !ok {
			return apiError{500}
		}
		p.comments[id] = params.Get("comment")
	case http.MethodDelete:
		if _, ok := p.comments[id]; !ok {
			return apiError{500}
		}
		for n := range p.comments {
			if strings.HasPrefix(n, id+"/") {
				return apiError{500} // "is not empty (contains pool ...)"
			}
		}
		delete(p.comments, id)
	}
	return nil
}

func (p *pools) names() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(sortedKeys(p.comments), " ")
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func lockOf(api API, c *clock, holder string) *Lock {
	// A lease of an hour: no renewal ticks during a test; the clock
	// moves it on instead.
	return &Lock{API: api, Parent: "mgmtctl-lab", Holder: holder, Lease: time.Hour, Now: c.now}
}

func TestAcquireReleaseAndTakeOver(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)}
	p := newPools("mgmtctl-lab", "capmox")

	a, err := lockOf(p, c, "alice@laptop pid 1").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Pool() != "mgmtctl-lab/g1" || a.Valid() != nil {
		t.Fatalf("first holder: %s %v", a.Pool(), a.Valid())
	}
	// A second run is refused, naming the first.
	_, err = lockOf(p, c, "bob@other pid 2").Acquire(ctx)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Holder != "alice@laptop pid 1" || locked.Pool != "mgmtctl-lab/g1" ||
		!strings.Contains(err.Error(), "alice@laptop pid 1") {
		t.Fatalf("second run: %v", err)
	}
	// Released: the next run takes the next generation and removes the
	// older one.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := lockOf(p, c, "bob@other pid 2").Acquire(ctx)
	if err != nil || b.Pool() != "mgmtctl-lab/g2" {
		t.Fatalf("after the release: %v", err)
	}
	if got := p.names(); got != "capmox mgmtctl-lab mgmtctl-lab/g2" {
		t.Errorf("pools: %s", got)
	}
	// bob killed (no release, no renewal): refused until the lease runs
	// out, then taken over.
	if _, err := lockOf(p, c, "carol@third pid 3").Acquire(ctx); !errors.As(err, &locked) || locked.Holder != "bob@other pid 2" {
		t.Fatalf("while bob's lease runs: %v", err)
	}
	c.add(time.Hour + time.Second)
	if err := b.Valid(); err == nil {
		t.Error("bob's lock is valid past its lease")
	}
	carol, err := lockOf(p, c, "carol@third pid 3").Acquire(ctx)
	if err != nil || carol.Pool() != "mgmtctl-lab/g3" {
		t.Fatalf("after bob's lease: %v", err)
	}
	// bob comes back: his renewal sees a newer generation; his lock is
	// lost, and his release leaves carol's alone.
	var lost *LostError
	if err := b.renewOnce(ctx); !errors.As(err, &lost) {
		t.Errorf("bob's renewal after the takeover: %v", err)
	}
	b.Release(ctx)
	if got := p.names(); got != "capmox mgmtctl-lab mgmtctl-lab/g3" {
		t.Errorf("pools after bob's release: %s", got)
	}
	if carol.Valid() != nil {
		t.Error("carol lost the lock to bob's release")
	}
}

func TestParentMissing(t *testing.T) {
	c := &clock{t: time.Now()}
	_, err := lockOf(newPools("capmox"), c, "a").Acquire(context.Background())
	var pm *ParentMissingError
	if !errors.As(err, &pm) || pm.Pool != "mgmtctl-lab" {
		t.Fatalf("%v", err)
	}
}

// A pool under the parent whose comment is not the lock's holds it: a
// person's edit is never taken over on a guess.
func TestForeignComment(t *testing.T) {
	c := &clock{t: time.Now()}
	p := newPools("mgmtctl-lab")
	p.comments["mgmtctl-lab/g4"] = "do not touch"
	_, err := lockOf(p, c, "a").Acquire(context.Background())
	var locked *LockedError
	if !errors.As(err, &locked) || !strings.Contains(locked.Holder, "do not touch") {
		t.Fatalf("%v", err)
	}
}

// Many runs at once on a free lock: exactly one takes it.
func TestOneOfManyAtOnce(t *testing.T) {
	c := &clock{t: time.Now()}
	p := newPools("mgmtctl-lab")
	var wg sync.WaitGroup
	held := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, err := lockOf(p, c, fmt.Sprint("run ", i)).Acquire(context.Background()); err == nil {
				held <- h.Pool()
			} else if !errors.As(err, new(*LockedError)) {
				t.Errorf("run %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(held)
	var got []string
	for h := range held {
		got = append(got, h)
	}
	if len(got) != 1 {
		t.Fatalf("holders: %v", got)
	}
}

// stalled is an API that, on the first create, lets other runs go first.
type stalled struct {
	API
	once   sync.Once
	before func()
}

func (s *stalled) Do(ctx context.Context, method, path string, params url.Values, out any) error {
	if method == http.MethodPost {
		s.once.Do(s.before)
	}
	return s.API.Do(ctx, method, path, params, out)
}

// A run that read the generations, stalled, and creates one that the
// others have passed (and deleted) meanwhile does not take the lock: its
// look after the create shows a newer generation.
func TestSlowContenderBacksOff(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Now()}
	p := newPools("mgmtctl-lab")
	p.comments["mgmtctl-lab/g1"] = leaseComment("killed pid 9", c.now().Add(-time.Minute))
	var nHeld *Held
	slow := &stalled{API: p, before: func() {
		m, err := lockOf(p, c, "m").Acquire(ctx) // g2, g1 deleted
		if err != nil {
			t.Fatal(err)
		}
		m.Release(ctx)
		if nHeld, err = lockOf(p, c, "n").Acquire(ctx); err != nil { // g3, g2 deleted
			t.Fatal(err)
		}
	}}
	_, err := lockOf(slow, c, "slow").Acquire(ctx)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Holder != "n" {
		t.Fatalf("the slow run: %v", err)
	}
	if nHeld.Pool() != "mgmtctl-lab/g3" || nHeld.Valid() != nil {
		t.Errorf("n: %s %v", nHeld.Pool(), nHeld.Valid())
	}
	if got := p.names(); got != "mgmtctl-lab mgmtctl-lab/g3" {
		t.Errorf("pools: %s (the slow run's g2 left behind?)", got)
	}
}
