package mirror

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
)

// InstallScript is what https://get.k3s.io serves in the lab.
//
//go:embed install.sh
var InstallScript []byte

// K3sTrailer must match the k3s simulator's version trailer.
const K3sTrailer = "\n#k3s-lab-version:"

// Releases serves k3s's GitHub release assets and update channel for the
// versions the lab "has released": one binary per version (the lab's k3s
// with its version appended, so each has its own sha256) and its
// sha256sum-amd64.txt. Unknown versions answer 404, as GitHub does.
type Releases struct {
	Binary   string   // the lab's k3s simulator
	Versions []string // released versions; the first is "stable"
	mu       sync.Mutex
	sums     map[string]string
}

var releasePath = regexp.MustCompile(`^/k3s-io/k3s/releases/download/([^/]+)/(k3s|sha256sum-amd64\.txt)$`)

func (r *Releases) known(v string) bool {
	for _, k := range r.Versions {
		if k == v {
			return true
		}
	}
	return false
}

// channel is the release a channel of k3s's channel server points at
// (k3s-io/k3s channel.yaml): "stable" the lab's stable (the first
// version), "latest" the newest, "v1.<minor>" the newest of that minor;
// "" for a channel there is not.
func (r *Releases) channel(name string) string {
	if len(r.Versions) == 0 {
		return ""
	}
	if name == "stable" {
		return r.Versions[0]
	}
	best := ""
	for _, v := range r.Versions {
		if name != "latest" && !strings.HasPrefix(v, name+".") {
			continue
		}
		if best == "" || newer(v, best) {
			best = v
		}
	}
	return best
}

// newer compares two k3s release tags, vMAJOR.MINOR.PATCH+k3sBUILD.
func newer(a, b string) bool {
	num := func(v string) []int {
		var out []int
		for _, p := range strings.FieldsFunc(v, func(c rune) bool { return c < '0' || c > '9' }) {
			n := 0
			fmt.Sscanf(p, "%d", &n)
			out = append(out, n)
		}
		return out
	}
	x, y := num(a), num(b)
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] > y[i]
		}
	}
	return len(x) > len(y)
}

func (r *Releases) open(v string) (io.Reader, func(), error) {
	f, err := os.Open(r.Binary)
	if err != nil {
		return nil, nil, err
	}
	return io.MultiReader(f, strings.NewReader(K3sTrailer+v+"\n")), func() { f.Close() }, nil
}

func (r *Releases) sum(v string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sums[v]; ok {
		return s, nil
	}
	rd, done, err := r.open(v)
	if err != nil {
		return "", err
	}
	defer done()
	h := sha256.New()
	if _, err := io.Copy(h, rd); err != nil {
		return "", err
	}
	if r.sums == nil {
		r.sums = map[string]string{}
	}
	r.sums[v] = hex.EncodeToString(h.Sum(nil))
	return r.sums[v], nil
}

// serve answers a request for host/path if it is a release path.
func (r *Releases) serve(w http.ResponseWriter, req *http.Request, host string) bool {
	switch {
	case host == "get.k3s.io" && req.URL.Path == "/":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(InstallScript)
		return true
	case host == "update.k3s.io" && strings.HasPrefix(req.URL.Path, "/v1-release/channels/"):
		v := r.channel(strings.TrimPrefix(req.URL.Path, "/v1-release/channels/"))
		if v == "" {
			http.NotFound(w, req)
			return true
		}
		http.Redirect(w, req, "https://github.com/k3s-io/k3s/releases/tag/"+v, http.StatusFound)
		return true
	case host == "github.com" && strings.HasPrefix(req.URL.Path, "/k3s-io/k3s/releases/tag/"):
		w.WriteHeader(http.StatusOK)
		return true
	case host != "github.com":
		return false
	}
	m := releasePath.FindStringSubmatch(req.URL.Path)
	if m == nil {
		return false
	}
	v := m[1]
	if !r.known(v) {
		http.Error(w, "Not Found", http.StatusNotFound)
		return true
	}
	if m[2] == "sha256sum-amd64.txt" {
		s, err := r.sum(v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		fmt.Fprintf(w, "%s  k3s\n%s  k3s-airgap-images-amd64.tar.zst\n", s, strings.Repeat("0", 64))
		return true
	}
	rd, done, err := r.open(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return true
	}
	defer done()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, rd)
	return true
}
