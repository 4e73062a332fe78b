// Package netns builds the lab's network: one namespace per host, each with
// a veth into a bridge that lives in a namespace of its own, addresses in
// 192.0.2.0/24 (TEST-NET-1) and no route out of the lab. It drives iproute2,
// the same tool an operator would use, so `ip netns` shows the lab as is.
package netns

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Subnet is the lab's only network.
const (
	Subnet  = "192.0.2.0/24"
	Gateway = "192.0.2.1"
	Prefix  = 24
)

// Net is one lab's network, named by a short prefix unique to the lab.
type Net struct {
	Prefix string // e.g. "ml3fa2c1"; namespaces are <prefix>-<host>
}

// Run runs a command and returns its output; its error holds the command
// line and what it wrote on stderr.
func Run(args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// NS is the namespace name of a host ("net" is the bridge's).
func (n Net) NS(host string) string { return n.Prefix + "-" + host }

// Bridge creates the bridge namespace with the gateway address. The bridge
// namespace has no other interface, so nothing leaves the lab.
func (n Net) Bridge() error {
	ns := n.NS("net")
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", ns, "addr", "add", Gateway + "/" + strconv.Itoa(Prefix), "dev", "br0"},
		{"ip", "-n", ns, "link", "set", "br0", "up"},
	}
	for _, s := range steps {
		if _, err := Run(s...); err != nil {
			return err
		}
	}
	return nil
}

// AddHost creates host's namespace with eth0 at addr/24, plugged into the
// bridge, default route via the gateway (which routes nowhere).
//
// mac, when set, is eth0's address: a VM keeps its net0 MAC across
// restarts, so its neighbours' ARP caches stay right.
func (n Net) AddHost(host, addr, ifTag, mac string) error {
	ns, br := n.NS(host), n.NS("net")
	peer := "v-" + ifTag
	tmp := n.Prefix + ifTag // a short, unique name in the root namespace while moving
	if len(tmp) > 15 {
		tmp = tmp[:15]
	}
	// A host removed a moment ago may still hold its bridge port: the
	// kernel frees a namespace (and its veth) only once its last process
	// is gone. The port of a host being added again is stale: drop it.
	_, _ = Run("ip", "-n", br, "link", "del", peer)
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "link", "add", tmp, "type", "veth", "peer", "name", peer, "netns", br},
		{"ip", "link", "set", tmp, "netns", ns},
		{"ip", "-n", ns, "link", "set", tmp, "name", "eth0"},
	}
	if mac != "" {
		steps = append(steps, []string{"ip", "-n", ns, "link", "set", "eth0", "address", mac})
	}
	steps = append(steps, [][]string{
		{"ip", "-n", ns, "addr", "add", addr + "/" + strconv.Itoa(Prefix), "dev", "eth0"},
		// The bridge side first, so the host's first packets go somewhere.
		{"ip", "-n", br, "link", "set", peer, "master", "br0"},
		{"ip", "-n", br, "link", "set", peer, "up"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", Gateway},
	}...)
	for _, s := range steps {
		if _, err := Run(s...); err != nil {
			return fmt.Errorf("add host %s: %w", host, err)
		}
	}
	return nil
}

// RemoveHost unplugs host from the bridge, then kills every process in
// its namespace and deletes it. The bridge port goes first and at once:
// the kernel frees a namespace (and the veth in it) some time after its
// last process, and until then its stack would answer at its address (a
// TCP reset to a port nothing listens on any more), where a machine
// powered off is silent at once. A namespace that is already gone is not
// an error. (AddHost names the port after the host.)
func (n Net) RemoveHost(host string) error {
	_, _ = Run("ip", "-n", n.NS("net"), "link", "del", "v-"+host)
	return remove(n.NS(host))
}

func remove(ns string) error {
	if !exists(ns) {
		return nil
	}
	KillAll(ns)
	_, err := Run("ip", "netns", "delete", ns)
	return err
}

// KillAll kills every process in the namespace and waits (up to ten
// seconds) until none is left: a SIGKILL is delivered asynchronously,
// and until the last process is gone the namespace lives on, its
// addresses answering (a halted VM's TCP stack refusing connections, as
// a powered-off machine's never does). Processes started meanwhile are
// killed too.
func KillAll(ns string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := Run("ip", "netns", "pids", ns)
		pids := strings.Fields(out)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, f := range pids {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exists(ns string) bool {
	out, _ := Run("ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == ns {
			return true
		}
	}
	return false
}

// List returns the lab's namespaces that exist now.
func (n Net) List() []string {
	out, _ := Run("ip", "netns", "list")
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], n.Prefix+"-") {
			names = append(names, f[0])
		}
	}
	return names
}

// Destroy removes every namespace of the lab, hosts first.
func (n Net) Destroy() error {
	var firstErr error
	for _, ns := range n.List() {
		if ns == n.NS("net") {
			continue
		}
		if err := remove(ns); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if err := remove(n.NS("net")); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// SetPort sets host's bridge port up or down: down, the host is cut off
// the network without noticing (its own link stays up), as when a cable or
// switch port fails.
func (n Net) SetPort(host, state string) error {
	_, err := Run("ip", "-n", n.NS("net"), "link", "set", "v-"+host, state)
	if err != nil {
		return fmt.Errorf("set %s's port %s: %w", host, state, err)
	}
	return nil
}
