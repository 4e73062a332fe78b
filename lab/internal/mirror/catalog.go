package mirror

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
)

// WriteCatalog lays out under root (the mirror's Root) what the chart
// repositories and the providers' GitHub releases serve: each repository's
// index.yaml, and each provider release's metadata.yaml and components.
// Versions not in the catalog are absent, so they answer 404 as upstream.
func WriteCatalog(root string) error {
	for _, c := range catalog.Charts {
		u, err := url.Parse(catalog.IndexURL(c.Repo))
		if err != nil {
			return err
		}
		if err := write(filepath.Join(root, u.Host, u.Path), chartIndex(c)); err != nil {
			return err
		}
	}
	for _, p := range catalog.Providers {
		for _, v := range p.Versions {
			for asset, body := range map[string]string{"metadata.yaml": p.Metadata(), p.Components: p.ComponentsYAML(v)} {
				u, _ := url.Parse(p.AssetURL(v, asset))
				if err := write(filepath.Join(root, u.Host, u.Path), body); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// chartIndex renders a Helm repository index (helm repo index's format).
func chartIndex(c catalog.Chart) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nentries:\n  %s:\n", c.Name)
	for i := len(c.Versions) - 1; i >= 0; i-- {
		v := c.Versions[i]
		fmt.Fprintf(&b, "  - apiVersion: v2\n    appVersion: %s\n    created: \"2026-07-17T00:00:00Z\"\n    name: %s\n    type: application\n    urls:\n    - %s/charts/%s-%s.tgz\n    version: %s\n",
			c.AppVersion(v), c.Name, strings.TrimSuffix(c.Repo, "/"), c.Name, v, v)
	}
	b.WriteString("generated: \"2026-07-17T00:00:00Z\"\n")
	return b.String()
}

func write(p, body string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(body), 0o644)
}
