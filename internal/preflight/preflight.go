// Package preflight runs the checks apply makes before its first change:
// each named, read-only, run side by side, so that a pin that does not
// exist or a phase asked for before its prerequisite stops the run with
// nothing touched, saying what is wrong and what to do.
package preflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Check is one named check: a detail when it passes, an error when it
// fails; a *SkippedError when it could not look (no way to the internet
// from the laptop), which does not stop the run.
type Check struct {
	Name string
	Run  func(ctx context.Context) (string, error)
}

// Result is a check's outcome.
type Result struct {
	Name   string
	Detail string
	Err    error
	Took   time.Duration
}

// Skipped says the check could not look.
func (r Result) Skipped() bool {
	var s *SkippedError
	return errors.As(r.Err, &s)
}

// Failed says the check found something wrong.
func (r Result) Failed() bool { return r.Err != nil && !r.Skipped() }

// Run runs the checks concurrently and returns their results in the
// checks' order.
func Run(ctx context.Context, checks []Check) []Result {
	out := make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			d, err := c.Run(ctx)
			out[i] = Result{Name: c.Name, Detail: d, Err: err, Took: time.Since(start)}
		}()
	}
	wg.Wait()
	return out
}

// Error is a preflight that found something wrong: the failed checks.
type Error struct{ Failed []Result }

// Verdict returns the results' failures as an *Error, or nil.
func Verdict(results []Result) error {
	var failed []Result
	for _, r := range results {
		if r.Failed() {
			failed = append(failed, r)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &Error{Failed: failed}
}

// Unwrap gives the failures, so that their class (an unreachable host)
// decides the exit code.
func (e *Error) Unwrap() []error {
	var out []error
	for _, r := range e.Failed {
		out = append(out, r.Err)
	}
	return out
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("preflight: nothing was changed:")
	for _, r := range e.Failed {
		fmt.Fprintf(&b, "\n  %s: %v", r.Name, r.Err)
	}
	return b.String()
}

// SkippedError is a check that could not look.
type SkippedError struct{ Why string }

func (e *SkippedError) Error() string { return "not checked: " + e.Why }

// Released checks that the files a pin names exist where they will be
// fetched from: a HEAD request each (a GitHub release asset redirects
// to its storage, which answers HEAD as GET). A file found once is
// remembered in the laptop's cache (a release's files do not go away),
// so a converged run asks nothing of the network.
type Released struct {
	HTTP *http.Client
	// Cache is the file remembering URLs found.
	Cache string

	mu    sync.Mutex
	known map[string]time.Time
	files map[string]string
}

// Known says key (a URL) was found before.
func (r *Released) Known(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known == nil {
		r.known = map[string]time.Time{}
		if b, err := os.ReadFile(r.Cache); err == nil {
			_ = json.Unmarshal(b, &r.known)
		}
	}
	_, ok := r.known[key]
	return ok
}

// Remember records key as found, in the cache file (0600).
func (r *Released) Remember(key string) {
	r.Known(key) // loads the cache
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known[key] = time.Now().UTC()
	b, err := json.MarshalIndent(r.known, "", "  ")
	if err != nil {
		return
	}
	_ = os.MkdirAll(filepath.Dir(r.Cache), 0o700)
	tmp := r.Cache + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, r.Cache)
	}
}

// filesCache is where Get keeps the small files it fetched.
func (r *Released) filesCache() string { return strings.TrimSuffix(r.Cache, ".json") + "-files.json" }

// Get returns a small release file's body (a metadata.yaml): from the
// cache, or a GET, whose answer is kept (a release's files do not
// change). Like Exists, a 404 is a *MissingError and no answer a
// *SkippedError.
func (r *Released) Get(ctx context.Context, url string) (body []byte, cached bool, err error) {
	r.mu.Lock()
	if r.files == nil {
		r.files = map[string]string{}
		if b, err := os.ReadFile(r.filesCache()); err == nil {
			_ = json.Unmarshal(b, &r.files)
		}
	}
	if b, ok := r.files[url]; ok {
		r.mu.Unlock()
		return []byte(b), true, nil
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := r.Client().Do(req)
	if err != nil {
		return nil, false, r.unreachable(url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false, &MissingError{URL: url, Status: resp.Status}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", url, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.files[url] = string(b)
	if out, err := json.MarshalIndent(r.files, "", "  "); err == nil {
		_ = os.MkdirAll(filepath.Dir(r.Cache), 0o700)
		tmp := r.filesCache() + ".tmp"
		if os.WriteFile(tmp, out, 0o600) == nil {
			_ = os.Rename(tmp, r.filesCache())
		}
	}
	return b, false, nil
}

// Fetch GETs url, never from the cache (a listing, an index: they change),
// and returns at most limit bytes of its body. A non-200 answer is a
// *MissingError; no answer at all (the request failed) a *SkippedError.
// Its bound is the caller's ctx.
func (r *Released) Fetch(ctx context.Context, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.Client().Do(req)
	if err != nil {
		return nil, &SkippedError{Why: fmt.Sprintf("%s cannot be reached from this laptop (%v)", url, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &MissingError{URL: url, Status: resp.Status}
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}

// Client is the HTTP client the checks use.
func (r *Released) Client() *http.Client {
	if r.HTTP == nil {
		return http.DefaultClient
	}
	return r.HTTP
}

// Exists says url answers 200, from the cache or a HEAD request: a 404
// (or any other answer) is a *MissingError; no answer at all a
// *SkippedError.
func (r *Released) Exists(ctx context.Context, url string) (cached bool, err error) {
	if r.Known(url) {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := r.Client().Do(req)
	if err != nil {
		return false, r.unreachable(url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, &MissingError{URL: url, Status: resp.Status}
	}
	r.Remember(url)
	return false, nil
}

// MissingError is a file a pin names that is not there.
type MissingError struct{ URL, Status string }

func (e *MissingError) Error() string { return e.URL + " answers " + e.Status }

// CacheFile is where Released remembers the files it found.
func CacheFile(cacheDir string) string {
	return filepath.Join(cacheDir, "mgmtctl", "released.json")
}

// unreachable classes a request's failure: no way to the host (a name
// that does not resolve, a refused or timed-out connection) is a
// *SkippedError; anything else an error about url.
func (r *Released) unreachable(url string, err error) error {
	var dns *net.DNSError
	var op *net.OpError
	if errors.As(err, &dns) || errors.As(err, &op) || errors.Is(err, context.DeadlineExceeded) {
		return &SkippedError{Why: fmt.Sprintf("%s cannot be reached from this laptop (%v)", url, err)}
	}
	return fmt.Errorf("%s: %w", url, err)
}
