package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
	"github.com/mgmtctl/mgmtctl/lab/internal/charts"
)

// WriteCatalog lays out under root (the mirror's Root) what the chart
// repositories and the providers' GitHub releases serve: each repository's
// index.yaml, and each provider release's metadata.yaml (the provider's
// real one, from fixtures/providers) and components (built from the real
// CRDs in crds, fixtures/crds). Versions not in the catalog are absent,
// so they answer 404 as upstream.
func WriteCatalog(root, crds, providers string) error {
	for _, c := range catalog.Charts {
		u, err := url.Parse(catalog.IndexURL(c.Repo))
		if err != nil {
			return err
		}
		// Each version packaged from upstream's module, as its release
		// publishes it (lab/internal/charts).
		digests := map[string]string{}
		for _, v := range c.Versions {
			tgz, err := charts.Package(c.Name, v, c.AppVersion(v))
			if err != nil {
				return err
			}
			cu, err := url.Parse(chartURL(c, v))
			if err != nil {
				return err
			}
			if err := write(filepath.Join(root, cu.Host, cu.Path), string(tgz)); err != nil {
				return err
			}
			sum := sha256.Sum256(tgz)
			digests[v] = hex.EncodeToString(sum[:])
		}
		if err := write(filepath.Join(root, u.Host, u.Path), chartIndex(c, digests)); err != nil {
			return err
		}
	}
	for _, p := range catalog.Providers {
		meta, err := os.ReadFile(filepath.Join(providers, p.Metadata))
		if err != nil {
			return fmt.Errorf("provider %s: %w", p.Label(), err)
		}
		var files []string
		for _, g := range p.CRDs {
			m, _ := filepath.Glob(filepath.Join(crds, g))
			if len(m) == 0 {
				return fmt.Errorf("provider %s: no CRD fixture matches %s in %s", p.Label(), g, crds)
			}
			sort.Strings(m)
			files = append(files, m...)
		}
		var defs [][]byte
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			defs = append(defs, b)
		}
		assets := map[string]string{"metadata.yaml": string(meta)}
		for _, t := range p.Templates {
			b, err := os.ReadFile(filepath.Join(providers, t))
			if err != nil {
				return fmt.Errorf("provider %s: %w", p.Label(), err)
			}
			assets[filepath.Base(t)] = string(b)
		}
		for _, v := range p.Versions {
			assets[p.Components] = p.ComponentsYAML(v, defs)
			for asset, body := range assets {
				u, _ := url.Parse(p.AssetURL(v, asset))
				if err := write(filepath.Join(root, u.Host, u.Path), body); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// chartURL is where the repository's index says a version's package is.
func chartURL(c catalog.Chart, v string) string {
	return fmt.Sprintf("%s/charts/%s-%s.tgz", strings.TrimSuffix(c.Repo, "/"), c.Name, v)
}

// chartIndex renders a Helm repository index (helm repo index's format),
// each version with its package's digest.
func chartIndex(c catalog.Chart, digests map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nentries:\n  %s:\n", c.Name)
	for i := len(c.Versions) - 1; i >= 0; i-- {
		v := c.Versions[i]
		fmt.Fprintf(&b, "  - apiVersion: v2\n    appVersion: %s\n    created: \"2026-07-17T00:00:00Z\"\n    digest: %s\n    name: %s\n    type: application\n    urls:\n    - %s\n    version: %s\n",
			c.AppVersion(v), digests[v], c.Name, chartURL(c, v), v)
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
