package phase

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/preflight"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// k3sReleases is where the k3s installer downloads a release from
// (install.sh: GITHUB_URL=https://github.com/k3s-io/k3s/releases, then
// ${GITHUB_URL}/download/${VERSION_K3S}/sha256sum-amd64.txt first).
const k3sReleases = "https://github.com/k3s-io/k3s/releases/download/"

// Preflight is the checks apply makes before its first change, for the
// phases it runs: every pin the selected phases fetch exists where it
// will be fetched from, and the phases before the selected ones have done
// their part. Each reads only.
func Preflight(s *session.Session, selected []step.Phase, rel *preflight.Released) []preflight.Check {
	c := &s.Config.Cluster
	has := map[step.Tag]bool{}
	for _, p := range selected {
		has[p.Tag] = true
	}
	var checks []preflight.Check
	exists := func(name, url, what string) preflight.Check {
		return preflight.Check{Name: name, Run: func(ctx context.Context) (string, error) {
			cached, err := rel.Exists(ctx, url)
			var missing *preflight.MissingError
			if errors.As(err, &missing) {
				return "", fmt.Errorf("%s: %w", what, err)
			}
			if err != nil {
				return "", err
			}
			if cached {
				return url + " (found before)", nil
			}
			return url, nil
		}}
	}
	if has[step.TagVM] {
		checks = append(checks, exists("image", c.Spec.Image.URL, "spec.image.url is not there"),
			preflight.Check{Name: "proxmox", Run: func(ctx context.Context) (string, error) { return proxmoxPlace(ctx, s) }})
	}
	if has[step.TagK3s] {
		v := c.Spec.K3s.Version
		checks = append(checks,
			exists("k3s-release", k3sReleases+v+"/sha256sum-amd64.txt", fmt.Sprintf("spec.k3s.version %s is not a k3s release (https://github.com/k3s-io/k3s/releases lists them)", v)),
			exists("k3s-installer", c.Spec.K3s.InstallScriptURL, "spec.k3s.installScriptURL is not there"))
		if c.Spec.VIP.Addr.IsValid() {
			img := c.Spec.VIP.Image + ":" + c.Spec.VIP.Version
			checks = append(checks, preflight.Check{Name: "kube-vip-image", Run: func(ctx context.Context) (string, error) {
				cached, err := rel.ImageExists(ctx, c.Spec.VIP.Image, c.Spec.VIP.Version)
				var missing *preflight.MissingError
				switch {
				case errors.As(err, &missing):
					return "", fmt.Errorf("spec.vip.version %s: %s is not in its registry (each server's kubelet would fail to pull it, and the VIP never come up): %w", c.Spec.VIP.Version, img, err)
				case err != nil:
					return "", err
				case cached:
					return img + " (found before)", nil
				}
				return img, nil
			}})
		}
	}
	if has[step.TagAddons] {
		for _, ch := range []struct{ name, chart, repo, version string }{
			{"chart-cert-manager", "cert-manager", c.Spec.CertManager.Repo, c.Spec.CertManager.Version},
			{"chart-cluster-api-operator", "cluster-api-operator", c.Spec.ClusterAPIOperator.Repo, c.Spec.ClusterAPIOperator.Version},
		} {
			checks = append(checks, preflight.Check{Name: ch.name, Run: func(ctx context.Context) (string, error) {
				return chartReleased(ctx, rel, ch.repo, ch.chart, ch.version)
			}})
		}
	}
	if has[step.TagCAPI] {
		for i, p := range c.Spec.Providers {
			known, ok := providerReleases[string(p.Type)+"/"+p.Name]
			if !ok {
				continue // not in clusterctl's registry: where it comes from is the operator's business
			}
			url := "https://github.com/" + known.repo + "/releases/download/" + p.Version + "/" + known.components
			checks = append(checks, exists("provider-"+strings.ToLower(string(p.Type)), url,
				fmt.Sprintf("spec.providers[%d] %s %s %s is not released", i, p.Type, p.Name, p.Version)))
		}
		checks = append(checks, preflight.Check{Name: "provider-contracts", Run: func(ctx context.Context) (string, error) {
			return providerContracts(ctx, rel, c.Spec.Providers)
		}})
	}
	after := has[step.TagAddons] || has[step.TagCAPI] || has[step.TagKubeconfig] || has[step.TagInspector]
	if (!has[step.TagVM] && (has[step.TagK3s] || after)) || (!has[step.TagK3s] && after) {
		checks = append(checks, preflight.Check{Name: "prerequisites", Run: func(ctx context.Context) (string, error) {
			return prerequisites(ctx, s, has[step.TagVM], has[step.TagK3s])
		}})
	}
	return checks
}

// prerequisites says whether each server's VM exists (when the vm phase
// is not run) and runs k3s (when the k3s phase is not run either).
func prerequisites(ctx context.Context, s *session.Session, vm, k3sToo bool) (string, error) {
	var ok []string
	for i, srv := range s.Config.Servers() {
		if !vm {
			n := &proxmox.Node{Spec: vmSpec(&s.Config.Cluster, srv)}
			if err := nodeReader(ctx, s, srv, n); err != nil {
				return "", err
			}
			if err := n.GatherVM(ctx); err != nil {
				return "", err
			}
			if !n.Facts.VMExists {
				return "", fmt.Errorf("VM %d (%s) does not exist yet on %s: run `mgmtctl apply` (or `--tags vm,k3s`) first", srv.ID, srv.Name, srv.Node)
			}
			if !n.Facts.Running {
				return "", fmt.Errorf("VM %d (%s) on %s is stopped: run `mgmtctl apply` (or `--tags vm`) first, which starts it", srv.ID, srv.Name, srv.Node)
			}
			ok = append(ok, fmt.Sprintf("VM %d runs", srv.ID))
		}
		if !k3sToo {
			h, err := s.DialVM(ctx, srv, false, nil)
			if err != nil {
				return "", fmt.Errorf("VM %d (%s) does not answer SSH: run `mgmtctl apply` (or `--tags vm,k3s`) first: %w", srv.ID, srv.Name, err)
			}
			v := &k3s.VM{Spec: k3sSpec(s.Config, i), Host: h}
			if err := v.Gather(ctx); err != nil {
				return "", err
			}
			if v.Installed == "" {
				return "", fmt.Errorf("k3s is not installed on %s yet: run `mgmtctl apply` (or `--tags vm,k3s`) first", srv.Name)
			}
			ok = append(ok, fmt.Sprintf("k3s %s on %s", v.Installed, srv.Name))
		}
	}
	return strings.Join(ok, ", "), nil
}

// proxmoxPlace looks at each server's node before the vm phase makes
// anything there (proxmox.Node.CheckPlace): in api access, the token's
// permissions first.
func proxmoxPlace(ctx context.Context, s *session.Session) (string, error) {
	if err := checkAPIAccess(ctx, s); err != nil {
		return "", err
	}
	// Each server's node is dialed and read beside the others'; the
	// first failure in the config's order is the one reported.
	servers := s.Config.Servers()
	out := make([]string, len(servers))
	if _, err := eachServer(servers, func(i int, srv config.Server) error {
		n := &proxmox.Node{Spec: vmSpec(&s.Config.Cluster, srv)}
		if err := nodeReader(ctx, s, srv, n); err != nil {
			return err
		}
		d, err := n.CheckPlace(ctx, probeAddress)
		out[i] = d
		return err
	}); err != nil {
		return "", err
	}
	return strings.Join(out, "; "), nil
}

// probeAddress says whether a host answers at addr: a TCP connection
// accepted, or refused (an RST is an answer too), within a second. No
// answer (a timeout, no route, no ARP reply) is a free address.
func probeAddress(ctx context.Context, addr string) (bool, error) {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return true, nil
	}
	return errors.Is(err, syscall.ECONNREFUSED), nil
}

// chartReleased says the chart repository lists the pinned version (its
// index.yaml, as `helm repo add` reads it); a version found once is
// remembered.
func chartReleased(ctx context.Context, rel *preflight.Released, repo, chart, version string) (string, error) {
	index := strings.TrimSuffix(repo, "/") + "/index.yaml"
	key := index + "#" + chart + "@" + version
	if rel.Known(key) {
		return chart + " " + version + " in " + repo + " (found before)", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := rel.Fetch(ctx, index, 64<<20)
	var missing *preflight.MissingError
	if errors.As(err, &missing) {
		return "", fmt.Errorf("%s is not a chart repository: %s answers %s", repo, index, missing.Status)
	}
	if err != nil {
		return "", err
	}
	versions, err := chartVersions(b, chart)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", index, err)
	}
	for _, v := range versions {
		if v == version {
			rel.Remember(key)
			return chart + " " + version + " in " + repo, nil
		}
	}
	return "", fmt.Errorf("chart %s %s is not in %s (%d versions of it there)", chart, version, repo, len(versions))
}

// chartVersions are the versions a repository's index.yaml lists of
// chart.
func chartVersions(index []byte, chart string) ([]string, error) {
	var idx struct {
		Entries map[string][]struct {
			Version string `json:"version"`
		} `json:"entries"`
	}
	if err := yaml.Unmarshal(index, &idx); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range idx.Entries[chart] {
		out = append(out, e.Version)
	}
	return out, nil
}

// providerContracts reads each provider release's metadata.yaml where
// clusterctl's registry (and so the operator) reads it, and checks the
// pinned set's contracts as clusterctl's installer does
// (capi.CheckContracts). A provider the registry does not list, or whose
// release is not there (its provider-* check says so), is left out.
func providerContracts(ctx context.Context, rel *preflight.Released, providers []config.Provider) (string, error) {
	var pinned []capi.Pinned
	for _, p := range providers {
		known, ok := providerReleases[string(p.Type)+"/"+p.Name]
		if !ok {
			continue
		}
		url := "https://github.com/" + known.repo + "/releases/download/" + p.Version + "/metadata.yaml"
		b, _, err := rel.Get(ctx, url)
		var missing *preflight.MissingError
		switch {
		case errors.As(err, &missing):
			continue
		case err != nil:
			return "", err
		}
		m, err := capi.ParseMetadata(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", url, err)
		}
		pinned = append(pinned, capi.Pinned{Provider: p, Metadata: m})
	}
	contracts, problems := capi.CheckContracts(pinned)
	if len(problems) > 0 {
		return "", fmt.Errorf("the pinned providers do not agree (spec.providers; each release's metadata.yaml): %s", strings.Join(problems, "; "))
	}
	return strings.Join(contracts, ", "), nil
}

// providerReleases are where clusterctl's provider registry fetches each
// provider mgmtctl installs (cluster-api v1.12
// cmd/clusterctl/client/config/providers_client.go: a GitHub release's
// components file), and so where the operator fetches them.
var providerReleases = map[string]struct{ repo, components string }{
	"core/cluster-api":       {"kubernetes-sigs/cluster-api", "core-components.yaml"},
	"bootstrap/kubeadm":      {"kubernetes-sigs/cluster-api", "bootstrap-components.yaml"},
	"controlPlane/kubeadm":   {"kubernetes-sigs/cluster-api", "control-plane-components.yaml"},
	"infrastructure/proxmox": {"ionos-cloud/cluster-api-provider-proxmox", "infrastructure-components.yaml"},
	"ipam/in-cluster":        {"kubernetes-sigs/cluster-api-ipam-provider-in-cluster", "ipam-components.yaml"},
}
