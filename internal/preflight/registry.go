package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// manifestTypes are the manifest media types a pull accepts: an image
// index or a single image's manifest, OCI's and Docker's.
var manifestTypes = strings.Join([]string{
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
}, ", ")

// ImageExists says the registry has image:tag, as a pull finds it: HEAD
// /v2/<repository>/manifests/<tag> (OCI distribution-spec v1.1, "Checking
// if content exists in the registry"), after the anonymous token flow a
// 401's Bearer challenge asks for (distribution's token authentication:
// GET <realm>?service=<service>&scope=<scope>). An image found once is
// remembered. A 404 is a *MissingError, no answer a *SkippedError.
func (r *Released) ImageExists(ctx context.Context, image, tag string) (cached bool, err error) {
	host, repo := splitImage(image)
	ref := "https://" + host + "/v2/" + repo + "/manifests/" + tag
	if r.Known(ref) {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := r.manifestHead(ctx, ref, "")
	if err != nil {
		return false, r.unreachable(ref, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		token, err := r.token(ctx, resp.Header.Get("WWW-Authenticate"))
		if err != nil {
			return false, fmt.Errorf("%s: %w", ref, err)
		}
		if resp, err = r.manifestHead(ctx, ref, token); err != nil {
			return false, r.unreachable(ref, err)
		}
	}
	if resp.StatusCode != http.StatusOK {
		return false, &MissingError{URL: ref, Status: resp.Status}
	}
	r.Remember(ref)
	return false, nil
}

func (r *Released) manifestHead(ctx context.Context, ref, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, ref, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", manifestTypes)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.Client().Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// token answers a Bearer challenge (realm, service, scope) with an
// anonymous token.
func (r *Released) token(ctx context.Context, challenge string) (string, error) {
	params, ok := strings.CutPrefix(challenge, "Bearer ")
	if !ok {
		return "", fmt.Errorf("the registry asks for %q, not a bearer token", challenge)
	}
	kv := map[string]string{}
	for _, p := range strings.Split(params, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok {
			kv[k] = strings.Trim(v, `"`)
		}
	}
	u, err := url.Parse(kv["realm"])
	if err != nil || u.Scheme != "https" {
		return "", fmt.Errorf("the registry's token realm %q is not an https URL", kv["realm"])
	}
	q := u.Query()
	for _, k := range []string{"service", "scope"} {
		if kv[k] != "" {
			q.Set(k, kv[k])
		}
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := r.Client().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the registry's token endpoint answers %s", resp.Status)
	}
	var t struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return "", err
	}
	if t.Token == "" {
		t.Token = t.AccessToken
	}
	return t.Token, nil
}

// splitImage is an image's registry host and repository, as a container
// runtime reads a reference: a first part with a dot or a colon (or
// "localhost") is a registry; otherwise Docker Hub, library/ for a
// single name.
func splitImage(image string) (host, repo string) {
	first, rest, ok := strings.Cut(image, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first, rest
	}
	if !ok {
		return "registry-1.docker.io", "library/" + image
	}
	return "registry-1.docker.io", image
}
