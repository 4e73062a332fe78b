package phase

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mgmtctl/mgmtctl/internal/addons"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/preflight"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/upgrade"
)

// k3sChannels is k3s's update channel server: <channel> redirects to the
// release page of the channel's newest release; each minor version has
// a channel named v1.<minor> (k3s-io/k3s channel.yaml; the installer's
// INSTALL_K3S_CHANNEL reads it the same way).
const k3sChannels = "https://update.k3s.io/v1-release/channels/"

// UpgradePlan reads, in a read-only session, what each component runs
// (the nodes, every server's k3s, the cluster's Helm releases, kube-vip's
// DaemonSet and the operator's Provider objects), what mgmt.yaml pins,
// and the newest release of each pin's line (k3s's update channel, the
// chart repositories' index.yaml, the providers' GitHub releases), and
// says what apply will do, in its order.
func UpgradePlan(ctx context.Context, s *session.Session, rel *preflight.Released) (upgrade.Plan, error) {
	c := &s.Config.Cluster
	var p upgrade.Plan

	// The image, on each server's node.
	var nodes []string
	has := map[string]bool{}
	for _, srv := range s.Config.Servers() {
		if _, seen := has[srv.Node]; seen {
			continue
		}
		n := &proxmox.Node{Spec: vmSpec(c, srv)}
		if err := gatherNode(ctx, s, srv, n); err != nil {
			return p, err
		}
		nodes = append(nodes, srv.Node)
		has[srv.Node] = n.Facts.ImageSHA256 == c.Spec.Image.SHA256
	}
	img, lack := imageRow(path.Base(c.Spec.Image.URL), nodes, has)
	p.Components = append(p.Components, img)

	// k3s on every server.
	kc := upgrade.Component{Name: "k3s", Pinned: c.Spec.K3s.Version}
	installed := map[string]string{}
	var servers []string
	for i, srv := range s.Config.Servers() {
		servers = append(servers, srv.Name)
		h, err := s.DialVM(ctx, srv, false, nil)
		if err != nil {
			if remote.IsUnreachable(err) && !remote.IsHostKeyError(err) {
				continue
			}
			return p, err
		}
		v := &k3s.VM{Spec: k3sSpec(s.Config, i), Host: h}
		if err := v.Gather(ctx); err != nil {
			return p, err
		}
		if v.Installed != "" {
			installed[srv.Name] = v.Installed
		}
	}
	kc.Running = versions(installed, len(servers))
	kc.Action = upgrade.None
	for _, name := range servers {
		got, ok := installed[name]
		switch {
		case !ok:
			kc.Action = upgrade.Install
		case got == c.Spec.K3s.Version:
		default:
			if err := k3s.CheckUpgrade(name, got, c.Spec.K3s.Release); err != nil {
				kc.Action, kc.Note = upgrade.Refused, err.Error()
			} else if kc.Action != upgrade.Refused {
				kc.Action = upgrade.Upgrade
			}
		}
	}
	line := fmt.Sprintf("v%d.%d", c.Spec.K3s.Release.Major, c.Spec.K3s.Release.Minor)
	kc.Newest, _ = newestK3s(ctx, rel, line, &kc)
	p.Components = append(p.Components, kc)

	// What the cluster runs: Helm releases, kube-vip, the providers.
	cl, err := s.Cluster().API(ctx)
	if err != nil && !(remote.IsUnreachable(err) && !remote.IsHostKeyError(err)) {
		return p, err
	}
	var vip *upgrade.Component
	if c.Spec.VIP.Addr.IsValid() {
		v := upgrade.Component{Name: "kube-vip", Pinned: c.Spec.VIP.Version, Note: "its newest release is not looked up (ghcr.io)"}
		if cl != nil {
			v.Running = kubeVIPVersion(ctx, cl)
		}
		v.Action = change(v.Running, v.Pinned)
		p.Components = append(p.Components, v)
		vip = &p.Components[len(p.Components)-1]
	}
	charts := []addons.Chart{addons.CertManager(c.Spec.CertManager), addons.Operator(c.Spec.ClusterAPIOperator)}
	for _, ch := range charts {
		cc := upgrade.Component{Name: ch.Name, Pinned: ch.Version}
		if cl != nil {
			cc.Running = helmReleaseVersion(ctx, cl, ch.TargetNamespace, ch.Name)
		}
		cc.Action = change(cc.Running, cc.Pinned)
		cc.Newest, cc.Note = newestChart(ctx, rel, ch.Repo, ch.Chart, ch.Version)
		p.Components = append(p.Components, cc)
	}
	capiCl := &capi.Cluster{Configured: c.Spec.Providers}
	var pinned []capi.Pinned
	for _, pr := range capiCl.Providers() {
		pc := upgrade.Component{Name: capi.Label(pr.Provider), Pinned: pr.Version}
		if cl != nil {
			if u, err := cl.Resource(pr.Kind.GVR()).Namespace(pr.Namespace).Get(ctx, pr.Name, metav1.GetOptions{}); err == nil {
				pc.Running = capi.ReadStatus(u).InstalledVersion
			}
		}
		pc.Action = change(pc.Running, pc.Pinned)
		if known, ok := providerReleases[string(pr.Type)+"/"+pr.Name]; ok {
			pc.Newest, pc.Note = newestRelease(ctx, rel, known.repo, pr.Version)
			if m, err := providerMetadata(ctx, rel, known.repo, pr.Version); err == nil {
				pinned = append(pinned, capi.Pinned{Provider: pr.Provider, Metadata: m})
			}
		}
		p.Components = append(p.Components, pc)
	}
	p.Contracts, p.Problems = capi.CheckContracts(pinned)

	// What apply does, in its order.
	if img.Action != upgrade.None {
		p.Order = append(p.Order, "download "+img.Pinned+" to "+strings.Join(lack, ", ")+" (the vm phase; only new VMs use it)")
	}
	switch kc.Action {
	case upgrade.Upgrade:
		p.Order = append(p.Order, fmt.Sprintf("take a snapshot, then upgrade k3s to %s on %s, one server at a time, each after the others' etcd members are healthy (the quorum gate) and its node Ready again",
			c.Spec.K3s.Version, strings.Join(servers, ", then ")))
	case upgrade.Install:
		p.Order = append(p.Order, "install k3s "+c.Spec.K3s.Version+" where it is not yet")
	case upgrade.Refused:
		p.Order = append(p.Order, "refuse the k3s pin before anything changes: "+kc.Note)
	}
	if vip != nil && vip.Action != upgrade.None {
		p.Order = append(p.Order, "write kube-vip "+vip.Pinned+"'s manifest on each server (k3s applies it; its DaemonSet rolls)")
	}
	for _, cc := range p.Components {
		if (cc.Name == "cert-manager" || cc.Name == "cluster-api-operator") && cc.Action != upgrade.None {
			p.Order = append(p.Order, fmt.Sprintf("%s the %s chart %s (helm-controller runs helm), and wait until it is usable", cc.Action, cc.Name, arrow(cc)))
		}
	}
	var moved []string
	for _, cc := range p.Components[len(p.Components)-len(capiCl.Providers()):] {
		if cc.Action != upgrade.None {
			moved = append(moved, cc.Name+" "+arrow(cc))
		}
	}
	if len(moved) > 0 {
		p.Order = append(p.Order, "take a snapshot (a provider's version moves), then apply "+strings.Join(moved, ", then ")+", core first, each waited for Ready")
	}
	p.K3s = fmt.Sprintf("a bump upgrades %s one at a time behind the quorum gate, after a snapshot; k3s, as Kubernetes, goes one minor version at a time: from %s, %s is the next minor, and a downgrade or a skipped minor is refused before anything changes",
		strings.Join(servers, ", "), c.Spec.K3s.Version, fmt.Sprintf("v%d.%d", c.Spec.K3s.Release.Major, c.Spec.K3s.Release.Minor+1))
	return p, nil
}

// versions says which k3s versions run on how many of the servers.
func versions(installed map[string]string, servers int) string {
	count := map[string]int{}
	for _, v := range installed {
		count[v]++
	}
	var out []string
	for v, n := range count {
		if servers > 1 {
			out = append(out, fmt.Sprintf("%s (%d of %d)", v, n, servers))
		} else {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func change(running, pinned string) string {
	switch running {
	case "":
		return upgrade.Install
	case pinned:
		return upgrade.None
	}
	return upgrade.Upgrade
}

func arrow(c upgrade.Component) string {
	if c.Running == "" {
		return c.Pinned
	}
	return c.Running + " → " + c.Pinned
}

// newestK3s asks k3s's channel server for the line's channel: the
// release it redirects to.
func newestK3s(ctx context.Context, rel *preflight.Released, line string, c *upgrade.Component) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k3sChannels+line, nil)
	if err != nil {
		return "", err
	}
	hc := *rel.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		c.Note = join(c.Note, fmt.Sprintf("the newest %s release was not looked up (%s cannot be reached)", line, k3sChannels))
		return "", err
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode/100 != 3 || loc == "" {
		c.Note = join(c.Note, fmt.Sprintf("k3s's channel server has no %s channel (%s)", line, resp.Status))
		return "", nil
	}
	return path.Base(loc), nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// newestChart reads the repository's index.yaml for the chart's newest
// version of the pin's line.
func newestChart(ctx context.Context, rel *preflight.Released, repo, chart, pinned string) (string, string) {
	index := strings.TrimSuffix(repo, "/") + "/index.yaml"
	b, err := get(ctx, rel, index)
	if err != nil {
		return "", "its newest release was not looked up: " + err.Error()
	}
	vs, err := chartVersions(b, chart)
	if err != nil {
		return "", fmt.Sprintf("%s: %v", index, err)
	}
	return upgrade.NewestInLine(pinned, vs), ""
}

// newestRelease lists the repository's GitHub releases (the REST API, as
// clusterctl's library lists them) for the newest of the pin's line;
// drafts and pre-releases left out.
func newestRelease(ctx context.Context, rel *preflight.Released, repo, pinned string) (string, string) {
	u := "https://api.github.com/repos/" + repo + "/releases?per_page=100"
	b, err := get(ctx, rel, u)
	if err != nil {
		return "", "its newest release was not looked up: " + err.Error()
	}
	var rels []struct {
		Tag        string `json:"tag_name"`
		Draft      bool   `json:"draft"`
		Prerelease bool   `json:"prerelease"`
	}
	if err := json.Unmarshal(b, &rels); err != nil {
		return "", fmt.Sprintf("%s: %v", u, err)
	}
	var vs []string
	for _, r := range rels {
		if !r.Draft && !r.Prerelease {
			vs = append(vs, r.Tag)
		}
	}
	return upgrade.NewestInLine(pinned, vs), ""
}

// get is a listing's body, within ten seconds.
func get(ctx context.Context, rel *preflight.Released, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return rel.Fetch(ctx, u, 16<<20)
}

// providerMetadata is a provider release's metadata.yaml (read once).
func providerMetadata(ctx context.Context, rel *preflight.Released, repo, version string) (capi.Metadata, error) {
	b, _, err := rel.Get(ctx, "https://github.com/"+repo+"/releases/download/"+version+"/metadata.yaml")
	if err != nil {
		return capi.Metadata{}, err
	}
	return capi.ParseMetadata(b)
}

// imageRow is the image's row: the nodes that hold the pinned image (its
// sha256) and, when one lacks it, the download apply makes there; and
// the nodes that lack it.
func imageRow(pinned string, nodes []string, has map[string]bool) (img upgrade.Component, lack []string) {
	img = upgrade.Component{Name: "ubuntu image", Pinned: pinned, Action: upgrade.None}
	var on []string
	for _, n := range nodes {
		if has[n] {
			on = append(on, n)
		} else {
			lack = append(lack, n)
		}
	}
	if len(on) > 0 {
		img.Running = "on " + strings.Join(on, ", ")
	}
	img.Note = "a new image is for VMs created after it; a running VM keeps its disk"
	if len(lack) > 0 {
		img.Action = upgrade.Install
		img.Note = "not on " + strings.Join(lack, ", ") + " yet: apply downloads it there; " + img.Note
	}
	return img, lack
}

// kubeVIPVersion is the tag of kube-vip's DaemonSet's image.
func kubeVIPVersion(ctx context.Context, cl *kube.Reader) string {
	ds, err := cl.DaemonSets("kube-system").Get(ctx, k3s.KubeVIPDaemonSet, metav1.GetOptions{})
	if err != nil || len(ds.Spec.Template.Spec.Containers) == 0 {
		return ""
	}
	img := ds.Spec.Template.Spec.Containers[0].Image
	if i := strings.LastIndexByte(img, ':'); i >= 0 && !strings.Contains(img[i:], "/") {
		return img[i+1:]
	}
	return ""
}

// helmReleaseVersion is the chart version of the deployed Helm release
// name in ns: Helm keeps each release in a Secret
// sh.helm.release.v1.<name>.v<revision> labelled owner=helm,
// status=deployed, its "release" the release's JSON, gzipped and base64'd
// (helm pkg/storage/driver/util.go encodeRelease); "" when none.
func helmReleaseVersion(ctx context.Context, cl *kube.Reader, ns, name string) string {
	list, err := cl.Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,status=deployed,name=" + name})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(string(list.Items[0].Data["release"]))
	if err != nil {
		return ""
	}
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return ""
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return ""
		}
	}
	var r struct {
		Chart struct {
			Metadata struct {
				Version string `json:"version"`
			} `json:"metadata"`
		} `json:"chart"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return ""
	}
	return r.Chart.Metadata.Version
}
