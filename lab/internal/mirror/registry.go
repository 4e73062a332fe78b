package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
)

// The container registries' distribution API (OCI distribution-spec
// v1.1, "Checking if content exists in the registry": HEAD or GET
// /v2/<name>/manifests/<reference>, 200 or 404 MANIFEST_UNKNOWN), behind
// the token flow ghcr.io uses for anonymous pulls (distribution's token
// authentication specification: a 401 with a Bearer challenge naming the
// realm, service and scope; GET <realm>?service=&scope= gives a token), for
// the images the lab has released (catalog.Images).
var manifestPath = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)

// serveRegistry answers a registry host's API; false for a host that is
// not one.
func serveRegistry(w http.ResponseWriter, r *http.Request, host string) bool {
	if host != "ghcr.io" {
		return false
	}
	if r.URL.Path == "/token" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"token": anonymousToken(r.URL.Query().Get("scope"))})
		return true
	}
	m := manifestPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		w.WriteHeader(http.StatusNotFound)
		return true
	}
	repo, tag := m[1], m[2]
	scope := "repository:" + repo + ":pull"
	if r.Header.Get("Authorization") != "Bearer "+anonymousToken(scope) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="`+scope+`"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}` + "\n"))
		return true
	}
	if !released(host+"/"+repo, tag) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}` + "\n"))
		return true
	}
	// An image index, as a multi-arch image has; its digest is stable
	// per image and tag.
	body := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`
	sum := sha256.Sum256([]byte(host + "/" + repo + ":" + tag + body))
	w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
	w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return true
	}
	_, _ = w.Write([]byte(body))
	return true
}

// anonymousToken is the token the lab's registry gives for a scope.
func anonymousToken(scope string) string {
	sum := sha256.Sum256([]byte("lab-registry:" + scope))
	return hex.EncodeToString(sum[:16])
}

func released(image, tag string) bool {
	for _, t := range catalog.Images[image] {
		if t == tag {
			return true
		}
	}
	return false
}
