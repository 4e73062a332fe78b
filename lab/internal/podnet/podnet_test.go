package podnet

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/netns"
)

func TestLastAddrAndVeth(t *testing.T) {
	for _, tc := range []struct{ prefix, last string }{
		{"10.42.0.0/24", "10.42.0.255"},
		{"10.42.3.0/24", "10.42.3.255"},
		{"10.42.0.0/16", "10.42.255.255"},
	} {
		if got := lastAddr(netip.MustParsePrefix(tc.prefix)).String(); got != tc.last {
			t.Errorf("lastAddr(%s) = %s, want %s", tc.prefix, got, tc.last)
		}
	}
	a, b := veth("uid-a"), veth("uid-b")
	if len(a) != 12 || !strings.HasPrefix(a, "veth") || a == b || a != veth("uid-a") {
		t.Errorf("veth names %q %q: want veth and 8 hex digits, stable, distinct", a, b)
	}
}

// TestNetwork lays a pod network out for real, in a network and mount
// namespace of the test's own: the node's bridge and masquerading, two
// sandboxes that reach the node, the same sandbox again, a teardown and
// its address given out again, and the routes to another node.
func TestNetwork(t *testing.T) {
	if os.Getenv("PODNET_INSIDE") == "" {
		for _, tool := range []string{"ip", "nft", "unshare", "nsenter", "bash"} {
			if _, err := exec.LookPath(tool); err != nil || os.Getuid() != 0 {
				t.Skipf("needs root and %s (hack/install-deps.sh)", tool)
			}
		}
		ns := fmt.Sprintf("podnet-test-%d", os.Getpid())
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
		defer exec.Command("ip", "netns", "delete", ns).Run()
		cmd := exec.Command("ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "--",
			"sh", "-c", `mount -t tmpfs tmpfs /run && exec "$@"`, "sh", os.Args[0], "-test.run=^TestNetwork$", "-test.v")
		cmd.Env = append(os.Environ(), "PODNET_INSIDE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in namespace %s:\n%s", ns, out)
		if err != nil {
			t.Fatalf("the test in its namespace failed: %v", err)
		}
		return
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := netns.Run(args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	must("ip", "link", "set", "lo", "up")
	must("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p") // no dummy module everywhere
	must("ip", "link", "set", "eth0p", "up")
	must("ip", "addr", "add", "192.0.2.10/24", "dev", "eth0")
	must("ip", "link", "set", "eth0", "up")

	n := &Network{ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16"), IPAMDir: t.TempDir()}
	if _, err := n.Sandbox("early"); err != ErrNotReady {
		t.Fatalf("a sandbox before Setup: %v, want ErrNotReady", err)
	}
	for range 2 {
		if err := n.Setup("10.42.0.0/24"); err != nil {
			t.Fatal(err)
		}
	}
	if out := must("ip", "-4", "-o", "addr", "show", "dev", Bridge); !strings.Contains(out, "10.42.0.1/24") {
		t.Errorf("cni0: %s", out)
	}
	if out := must("ip", "link", "show", Bridge); !strings.Contains(out, "link/ether 0a:58:0a:2a:00:01") {
		t.Errorf("cni0's MAC is not the gateway's 0a:58:0a:2a:00:01:\n%s", out)
	}
	if out := must("nft", "list", "table", "ip", natTable); strings.Count(out, "masquerade") != 1 || !strings.Contains(out, "ip saddr 10.42.0.0/16 ip daddr != 224.0.0.0/4 masquerade") {
		t.Errorf("masquerade rules after two Setups:\n%s", out)
	}

	ln, err := net.Listen("tcp", "10.42.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l, _ := bufio.NewReader(c).ReadString('\n')
			got <- c.RemoteAddr().(*net.TCPAddr).IP.String() + " " + strings.TrimSpace(l)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	say := func(id string) string {
		t.Helper()
		must("nsenter", "--net="+n.Path(id), "--", "bash", "-c", fmt.Sprintf("echo %s >/dev/tcp/10.42.0.1/%d", id, port))
		select {
		case s := <-got:
			return s
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing from sandbox %s", id)
			return ""
		}
	}
	a, err := n.Sandbox("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Sandbox("b")
	if err != nil {
		t.Fatal(err)
	}
	if a != "10.42.0.2" || b != "10.42.0.3" {
		t.Errorf("addresses %s %s, want 10.42.0.2 and 10.42.0.3", a, b)
	}
	if s := say("a"); s != "10.42.0.2 a" {
		t.Errorf("from sandbox a: %q", s)
	}
	if s := say("b"); s != "10.42.0.3 b" {
		t.Errorf("from sandbox b: %q", s)
	}
	// The gateway keeps its MAC as ports join the bridge.
	if out := must("ip", "link", "show", Bridge); !strings.Contains(out, "link/ether 0a:58:0a:2a:00:01") {
		t.Errorf("cni0's MAC changed with its ports:\n%s", out)
	}
	if out := must("nsenter", "--net="+n.Path("b"), "--", "ip", "link", "show", "eth0"); !strings.Contains(out, "link/ether 0a:58:0a:2a:00:03") {
		t.Errorf("sandbox b's eth0:\n%s", out)
	}
	if again, err := n.Sandbox("a"); err != nil || again != a {
		t.Errorf("sandbox a again: %s, %v", again, err)
	}
	n.Teardown("a")
	if ids := n.Sandboxes(); len(ids) != 1 || ids[0] != "b" {
		t.Errorf("sandboxes after a's teardown: %v", ids)
	}
	if out, _ := netns.Run("ip", "link", "show", veth("a")); out != "" {
		t.Errorf("a's veth is still there: %s", out)
	}
	if c, err := n.Sandbox("c"); err != nil || c != "10.42.0.2" {
		t.Errorf("sandbox c: %s, %v; want a's address again", c, err)
	}

	if err := n.Route([]Peer{{PodCIDR: "10.42.1.0/24", IP: "192.0.2.11"}, {PodCIDR: "10.42.2.0/24", IP: "192.0.2.12"}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Route([]Peer{{PodCIDR: "10.42.2.0/24", IP: "192.0.2.13"}}); err != nil {
		t.Fatal(err)
	}
	routes := must("ip", "-4", "-o", "route", "show")
	if strings.Contains(routes, "10.42.1.0/24") || !strings.Contains(routes, "10.42.2.0/24 via 192.0.2.13") {
		t.Errorf("routes after the peers changed:\n%s", routes)
	}
}
