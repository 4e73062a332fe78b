package mirror

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// The GitHub REST API (api.github.com) for the releases the mirror holds
// under github.com/<owner>/<repo>/releases/download/<tag>/<asset>, as far
// as clusterctl's library reads it (cluster-api v1.12.10
// cmd/clusterctl/client/repository/repository_github.go, through
// go-github): listing a repository's releases (GetVersions, for a
// releases/latest URL), a release by its tag (GetFile with GOPROXY=off,
// the operator's case) and an asset's content (DownloadReleaseAsset).
// Shapes and status codes are GitHub's documented ones
// (docs.github.com/rest/releases/releases, /rest/releases/assets).
var (
	apiReleases = regexp.MustCompile(`^/repos/([^/]+)/([^/]+)/releases$`)
	apiTag      = regexp.MustCompile(`^/repos/([^/]+)/([^/]+)/releases/tags/([^/]+)$`)
	apiAsset    = regexp.MustCompile(`^/repos/([^/]+)/([^/]+)/releases/assets/([0-9]+)$`)
)

// releaseAsset and release carry the fields of GitHub's release objects
// that clients read.
type releaseAsset struct {
	ID                 int64  `json:"id"`
	Name               string `json:"name"`
	URL                string `json:"url"`
	BrowserDownloadURL string `json:"browser_download_url"`
	Size               int64  `json:"size"`
	State              string `json:"state"`
	ContentType        string `json:"content_type"`
}

type release struct {
	ID          int64          `json:"id"`
	TagName     string         `json:"tag_name"`
	Name        string         `json:"name"`
	Draft       bool           `json:"draft"`
	Prerelease  bool           `json:"prerelease"`
	URL         string         `json:"url"`
	HTMLURL     string         `json:"html_url"`
	AssetsURL   string         `json:"assets_url"`
	CreatedAt   string         `json:"created_at"`
	PublishedAt string         `json:"published_at"`
	Assets      []releaseAsset `json:"assets"`
}

// id is a stable numeric ID for a release or asset path.
func id(parts ...string) int64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p + "/"))
	}
	return int64(h.Sum64() >> 2)
}

// releases reads owner/repo's releases from the mirror's tree, highest
// tag first, as GitHub lists them newest first (clusterctl sorts the
// versions itself).
func (s *Server) releases(owner, repo string) []release {
	dir := filepath.Join(s.Root, "github.com", owner, repo, "releases", "download")
	tags, _ := os.ReadDir(dir)
	var out []release
	api := "https://api.github.com/repos/" + owner + "/" + repo
	for _, t := range tags {
		if !t.IsDir() {
			continue
		}
		tag := t.Name()
		fi, _ := t.Info()
		at := time.Date(2026, 7, 17, 0, 0, 0, 0, time.UTC)
		if fi != nil {
			at = fi.ModTime().UTC()
		}
		r := release{ID: id(owner, repo, tag), TagName: tag, Name: tag,
			URL: api + "/releases/" + strconv.FormatInt(id(owner, repo, tag), 10), HTMLURL: "https://github.com/" + owner + "/" + repo + "/releases/tag/" + tag,
			CreatedAt: at.Format(time.RFC3339), PublishedAt: at.Format(time.RFC3339)}
		r.AssetsURL = r.URL + "/assets"
		files, _ := os.ReadDir(filepath.Join(dir, tag))
		for _, f := range files {
			if f.IsDir() {
				continue
			}
			info, _ := f.Info()
			var size int64
			if info != nil {
				size = info.Size()
			}
			aid := id(owner, repo, tag, f.Name())
			r.Assets = append(r.Assets, releaseAsset{ID: aid, Name: f.Name(), URL: api + "/releases/assets/" + strconv.FormatInt(aid, 10),
				BrowserDownloadURL: "https://github.com/" + owner + "/" + repo + "/releases/download/" + tag + "/" + f.Name(),
				Size:               size, State: "uploaded", ContentType: "application/octet-stream"})
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TagName > out[j].TagName })
	return out
}

// serveGitHubAPI answers api.github.com; false when the path is not one
// it knows (the caller answers 404).
func (s *Server) serveGitHubAPI(w http.ResponseWriter, r *http.Request) bool {
	notFound := func(doc string) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "Not Found", "documentation_url": "https://docs.github.com/rest/releases/" + doc, "status": "404"})
	}
	ok := func(v any) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(v)
	}
	p := r.URL.Path
	if m := apiReleases.FindStringSubmatch(p); m != nil {
		rels := s.releases(m[1], m[2])
		if len(rels) == 0 && !s.repoExists(m[1], m[2]) {
			notFound("releases#list-releases")
			return true
		}
		if rels == nil {
			rels = []release{}
		}
		ok(rels)
		return true
	}
	if m := apiTag.FindStringSubmatch(p); m != nil {
		for _, rel := range s.releases(m[1], m[2]) {
			if rel.TagName == m[3] {
				ok(rel)
				return true
			}
		}
		notFound("releases#get-a-release-by-tag-name")
		return true
	}
	if m := apiAsset.FindStringSubmatch(p); m != nil {
		want, _ := strconv.ParseInt(m[3], 10, 64)
		for _, rel := range s.releases(m[1], m[2]) {
			for _, a := range rel.Assets {
				if a.ID != want {
					continue
				}
				if r.Header.Get("Accept") == "application/octet-stream" {
					// GitHub answers with a redirect to the asset's
					// download location.
					http.Redirect(w, r, a.BrowserDownloadURL, http.StatusFound)
					return true
				}
				ok(a)
				return true
			}
		}
		notFound("assets#get-a-release-asset")
		return true
	}
	return false
}

func (s *Server) repoExists(owner, repo string) bool {
	fi, err := os.Stat(filepath.Join(s.Root, "github.com", owner, repo))
	return err == nil && fi.IsDir()
}
