// Package podnet is the lab's pod network: what k3s's embedded flannel
// and the CNI plugins it configures (bridge, host-local) lay out on a
// node, done with iproute2 and nft in the server's network namespace.
// Upstream: k3s-io/k3s v1.35.7+k3s1 pkg/agent/flannel/setup.go (the CNI
// config, cni0, the pod CIDR from Node.spec.podCIDR);
// containernetworking/plugins v1.9.0 (k3s's fork, scripts/version.sh
// VERSION_CNIPLUGINS) plugins/main/bridge/bridge.go and
// plugins/ipam/host-local/backend/disk/backend.go.
//
// As on a k3s node:
//   - each pod has a network namespace of its own, /run/netns/cni-<id>,
//     which outlives a restart of k3s (containerd keeps a pod's sandbox;
//     here the namespace is bound to its file) and goes with a reboot;
//   - its eth0 is one end of a veth pair whose other end is a port of
//     the bridge cni0, which holds the first address of the node's pod
//     CIDR and is the pods' gateway;
//   - addresses come from the node's pod CIDR (Node.spec.podCIDR, given
//     by kube-controller-manager's node IPAM from the cluster CIDR),
//     recorded as host-local records them: one file per address in
//     /var/lib/cni/networks/cbr0, holding its sandbox's id;
//   - traffic from a pod to outside the cluster CIDR is masqueraded
//     (flannel's ip-masq rules, in the nftables table flannel's nftables
//     mode uses).
//
// One simplification: the other nodes' pod CIDRs are reached through a
// route via each node's address, as flannel's host-gw backend routes
// them, not through the VXLAN device of k3s's default backend (the lab
// has no need of an overlay: its servers share one L2 network, which is
// host-gw's one requirement). k3s offers host-gw as
// `flannel-backend: host-gw`.
package podnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/mgmtctl/mgmtctl/lab/internal/netns"
)

// Where a node keeps its pod network, as k3s's CNI configuration has it
// (the network is named cbr0; the bridge is cni0).
const (
	Bridge      = "cni0"
	NetworkName = "cbr0"
	NetnsDir    = "/run/netns"
	IPAMDir     = "/var/lib/cni/networks/" + NetworkName
	// The nftables table of flannel's masquerading.
	natTable = "flannel-ipv4"
)

// ErrNotReady is the network before the node has its pod CIDR: no pod
// sandbox can be made yet (the kubelet's NetworkPluginNotReady).
var ErrNotReady = errors.New("network is not ready: container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")

// Network is one node's pod network.
type Network struct {
	// ClusterCIDR is the whole pod network (k3s's cluster-cidr).
	ClusterCIDR netip.Prefix
	// Run runs a command in the node's namespaces and returns its
	// output (Command when nil).
	Run func(args ...string) (string, error)
	// NetnsDir and IPAMDir are where sandboxes and addresses are kept
	// (the constants when empty).
	NetnsDir, IPAMDir string

	mu      sync.Mutex
	podCIDR netip.Prefix
}

func (n *Network) run(args ...string) (string, error) {
	if n.Run != nil {
		return n.Run(args...)
	}
	return netns.Run(args...)
}

func (n *Network) netnsDir() string {
	if n.NetnsDir != "" {
		return n.NetnsDir
	}
	return NetnsDir
}

func (n *Network) ipamDir() string {
	if n.IPAMDir != "" {
		return n.IPAMDir
	}
	return IPAMDir
}

// PodCIDR is the pod CIDR Setup laid out, "" before.
func (n *Network) PodCIDR() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.podCIDR.IsValid() {
		return ""
	}
	return n.podCIDR.String()
}

// Setup lays out the node's side of the network for its pod CIDR: the
// bridge with the gateway address, forwarding, and the masquerading of
// traffic that leaves the cluster CIDR. Each part is set to what it
// should be, so a second Setup (a restarted k3s) changes nothing.
func (n *Network) Setup(podCIDR string) error {
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil || !p.Addr().Is4() {
		return fmt.Errorf("pod CIDR %q: not an IPv4 prefix", podCIDR)
	}
	p = p.Masked()
	gw := p.Addr().Next()
	if old := n.PodCIDR(); old != "" && old != p.String() {
		// The node was given another CIDR (deleted and registered
		// again): the bridge's old address goes.
		_, _ = n.run("ip", "addr", "flush", "dev", Bridge)
	}
	if _, err := n.run("ip", "link", "show", Bridge); err != nil {
		if _, err := n.run("ip", "link", "add", Bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	steps := [][]string{
		// A bridge takes the lowest MAC of its ports unless given one:
		// each new pod's veth could change the gateway's MAC under the
		// pods' ARP caches. The bridge plugin gives it one made from its
		// address, as it gives each pod's eth0 (0a:58 and the IPv4
		// address).
		{"ip", "link", "set", Bridge, "address", hwAddr(gw)},
		{"ip", "addr", "replace", gw.String() + "/" + strconv.Itoa(p.Bits()), "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if _, err := n.run(s...); err != nil {
			return err
		}
	}
	// One nft transaction: the table is made if missing, dropped and
	// made anew with flannel's rules, so it holds exactly them.
	rules := filepath.Join(filepath.Dir(n.netnsDir()), "flannel", "masq.nft")
	if err := os.MkdirAll(filepath.Dir(rules), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(rules, []byte(natRules(n.ClusterCIDR.String())), 0o644); err != nil {
		return err
	}
	if _, err := n.run("nft", "-f", rules); err != nil {
		return fmt.Errorf("masquerade rules: %w", err)
	}
	n.mu.Lock()
	n.podCIDR = p
	n.mu.Unlock()
	return nil
}

// natRules is the nft script of flannel's masquerading (pkg/trafficmngr:
// traffic within the cluster CIDR is left alone; from it to anywhere else
// but multicast it is masqueraded, with random ports).
func natRules(cluster string) string {
	return fmt.Sprintf(`table ip %[1]s {}
delete table ip %[1]s
table ip %[1]s {
	chain postrtg {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[2]s ip daddr %[2]s return
		ip saddr %[2]s ip daddr != 224.0.0.0/4 masquerade fully-random
	}
}
`, natTable, cluster)
}

// Peer is another node's pod CIDR and address.
type Peer struct{ PodCIDR, IP string }

// Route sets the routes to the other nodes' pod CIDRs, each via its
// node, and removes those to CIDRs of the cluster no node has now.
func (n *Network) Route(peers []Peer) error {
	want := map[string]string{}
	for _, p := range peers {
		pre, err := netip.ParsePrefix(p.PodCIDR)
		if err != nil || p.IP == "" {
			continue
		}
		want[pre.Masked().String()] = p.IP
	}
	out, err := n.run("ip", "-4", "-o", "route", "show")
	if err != nil {
		return err
	}
	have := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[1] == "via" {
			have[f[0]] = f[2]
		}
	}
	var errs []error
	for cidr, via := range have {
		pre, err := netip.ParsePrefix(cidr)
		if err != nil || !n.ClusterCIDR.Overlaps(pre) {
			continue
		}
		if _, ok := want[cidr]; !ok {
			if _, err := n.run("ip", "route", "del", cidr, "via", via); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for cidr, via := range want {
		if have[cidr] == via {
			continue
		}
		if _, err := n.run("ip", "route", "replace", cidr, "via", via); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Path is the file a sandbox's network namespace is bound to.
func (n *Network) Path(id string) string {
	return filepath.Join(n.netnsDir(), "cni-"+id)
}

// veth is the node's end of a sandbox's veth pair, named as the bridge
// plugin names it (veth and 8 hex digits).
func veth(id string) string {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return fmt.Sprintf("veth%08x", h)
}

// Sandbox returns the address of the pod sandbox id, making it first
// when there is none: a network namespace with lo and eth0 up, eth0 at
// an address of the node's pod CIDR, the default route via the bridge.
func (n *Network) Sandbox(id string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.podCIDR.IsValid() {
		return "", ErrNotReady
	}
	path := n.Path(id)
	if ip := n.recorded(id); ip != "" && n.alive(path) {
		return ip, nil
	}
	// A half-made or stale sandbox (a reboot left its address record,
	// a kill its file): made anew.
	n.teardownLocked(id)
	ip, err := n.allocate(id)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(n.netnsDir(), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		return "", err
	}
	in := func(args ...string) []string { return append([]string{"nsenter", "--net=" + path, "--"}, args...) }
	gw := n.podCIDR.Addr().Next()
	v := veth(id)
	steps := [][]string{
		{"unshare", "--net=" + path, "true"},
		in("ip", "link", "set", "lo", "up"),
		// The pair is made inside the sandbox with its node end put in
		// this process's namespace, the node's.
		in("ip", "link", "add", "eth0", "type", "veth", "peer", "name", v, "netns", strconv.Itoa(os.Getpid())),
		{"ip", "link", "set", v, "master", Bridge},
		{"ip", "link", "set", v, "up"},
		in("ip", "link", "set", "eth0", "address", hwAddr(netip.MustParseAddr(ip))),
		in("ip", "addr", "add", ip+"/"+strconv.Itoa(n.podCIDR.Bits()), "dev", "eth0"),
		in("ip", "link", "set", "eth0", "up"),
		in("ip", "route", "add", "default", "via", gw.String()),
	}
	for _, s := range steps {
		if _, err := n.run(s...); err != nil {
			n.teardownLocked(id)
			return "", fmt.Errorf("pod sandbox %s: %w", id, err)
		}
	}
	return ip, nil
}

// alive reports whether path is bound to a network namespace.
func (n *Network) alive(path string) bool {
	_, err := n.run("nsenter", "--net="+path, "--", "true")
	return err == nil
}

// Teardown removes the sandbox id: its veth pair, its namespace and its
// address. A sandbox that is not there is not an error.
func (n *Network) Teardown(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.teardownLocked(id)
}

func (n *Network) teardownLocked(id string) {
	path := n.Path(id)
	if _, err := os.Stat(path); err == nil {
		_, _ = n.run("ip", "link", "del", veth(id))
		_, _ = n.run("umount", path)
		_ = os.Remove(path)
	}
	if ip := n.recorded(id); ip != "" {
		_ = os.Remove(filepath.Join(n.ipamDir(), ip))
	}
}

// Sandboxes lists the ids of the sandboxes there are.
func (n *Network) Sandboxes() []string {
	ents, _ := os.ReadDir(n.netnsDir())
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), "cni-"); ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// recorded is the address recorded for id, if any.
func (n *Network) recorded(id string) string {
	ents, _ := os.ReadDir(n.ipamDir())
	for _, e := range ents {
		if net.ParseIP(e.Name()) == nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(n.ipamDir(), e.Name())); err == nil && strings.TrimSpace(string(b)) == id {
			return e.Name()
		}
	}
	return ""
}

// allocate records the lowest free address of the pod CIDR after the
// gateway for id, as host-local hands them out. An address whose
// sandbox is gone (a reboot emptied /run) is free again.
func (n *Network) allocate(id string) (string, error) {
	dir := n.ipamDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	last := lastAddr(n.podCIDR)
	for a := n.podCIDR.Addr().Next().Next(); a.Less(last); a = a.Next() {
		f := filepath.Join(dir, a.String())
		if b, err := os.ReadFile(f); err == nil {
			if owner := strings.TrimSpace(string(b)); owner != id && n.exists(owner) {
				continue
			}
		}
		if err := os.WriteFile(f, []byte(id), 0o644); err != nil {
			return "", err
		}
		return a.String(), nil
	}
	return "", fmt.Errorf("no IP addresses available in range set: %s", n.podCIDR)
}

func (n *Network) exists(id string) bool {
	_, err := os.Stat(n.Path(id))
	return err == nil
}

// hwAddr is the MAC the CNI plugins derive from an IPv4 address
// (containernetworking/plugins pkg/utils/hwaddr: the prefix 0a:58).
func hwAddr(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// lastAddr is the prefix's broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= (1 << host) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
