// Package kubevip is the lab's kube-vip: what a kube-vip DaemonSet's pod
// does on each control-plane node, run by the lab's kubelet for the pod
// since the lab runs no containers. In ARP mode with control-plane leader
// election (kube-vip's `manager` with cp_enable, vip_arp and
// vip_leaderelection), the holder of the Lease vip_leasename
// (plndr-cp-lock) in cp_namespace (kube-system) adds the address to its
// interface and announces it with gratuitous ARP; a node that loses the
// lease removes it (kube-vip/kube-vip v1.2.3, the version mgmtctl pins:
// cmd/kube-vip.go, pkg/kubevip/config_envvar.go, pkg/manager/manager_arp.go
// and pkg/cluster/clusterLeaderElection.go).
package kubevip

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// Config is what a kube-vip pod reads from its environment.
type Config struct {
	Address, Interface    string
	ARP, ControlPlane, LE bool
	LeaseName, Namespace  string
	Lease, Renew, Retry   time.Duration
}

// FromContainer reads the config of a kube-vip container from its
// env, or reports that the container is not kube-vip's.
func FromContainer(c corev1.Container) (Config, bool) {
	if !strings.Contains(c.Image, "kube-vip/kube-vip") {
		return Config{}, false
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	secs := func(k string, def int) time.Duration {
		if n, err := strconv.Atoi(env[k]); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
		return time.Duration(def) * time.Second
	}
	cfg := Config{Address: env["address"], Interface: env["vip_interface"],
		ARP: env["vip_arp"] == "true", ControlPlane: env["cp_enable"] == "true", LE: env["vip_leaderelection"] == "true",
		LeaseName: env["vip_leasename"], Namespace: env["cp_namespace"],
		Lease: secs("vip_leaseduration", 5), Renew: secs("vip_renewdeadline", 3), Retry: secs("vip_retryperiod", 1)}
	if cfg.Address == "" {
		cfg.Address = env["vip_address"]
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = "plndr-cp-lock"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "kube-system"
	}
	return cfg, true
}

// Node is kube-vip's work on one node, as its pod does it: the lab's
// kubelet runs it for a pod of a kube-vip image, with the pod's
// ServiceAccount's client and the container's log.
type Node struct {
	CS   kubernetes.Interface
	Name string // the node's name: the lease holder's identity
	Log  io.Writer
	// IP runs `ip` (the pod is on its node's network).
	IP func(args ...string) error
	// Announce sends gratuitous ARP for the address.
	Announce func(iface, addr string) error
}

// Supported reports whether the lab does what cfg asks: ARP mode with
// control-plane leader election, the mode mgmtctl deploys.
func (cfg Config) Supported() bool {
	return cfg.ControlPlane && cfg.ARP && cfg.LE && cfg.Address != ""
}

func (n *Node) logf(format string, a ...any) {
	fmt.Fprintf(n.Log, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
}

// Elect stands for the control-plane lease until ctx ends; the holder
// has the address, and gives it up when ctx ends.
func (n *Node) Elect(ctx context.Context, cfg Config) {
	iface := cfg.Interface
	if iface == "" {
		iface = "eth0"
	}
	cidr := cfg.Address + "/32"
	// The container stops with its node's k3s here (a lab
	// simplification): the address goes at once, before the lease is
	// given up through an API server that may be stopping too, so a
	// stopped server never keeps answering for the VIP.
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			_ = n.IP("addr", "del", cidr, "dev", iface)
		case <-stopped:
		}
	}()
	simkube.Lead(ctx, n.CS, simkube.Election{Namespace: cfg.Namespace, Name: cfg.LeaseName, Identity: n.Name,
		Lease: cfg.Lease, Renew: cfg.Renew, Retry: cfg.Retry},
		func(ctx context.Context) {
			if err := n.IP("addr", "replace", cidr, "dev", iface); err != nil {
				n.logf("add %s to %s: %v", cidr, iface, err)
				return
			}
			n.logf("Node %s is assuming leadership of the cluster, %s on %s", n.Name, cfg.Address, iface)
			if n.Announce != nil {
				if err := n.Announce(iface, cfg.Address); err != nil {
					n.logf("gratuitous ARP for %s: %v", cfg.Address, err)
				}
			}
		},
		func() {
			_ = n.IP("addr", "del", cidr, "dev", iface)
			n.logf("Node %s lost leadership, %s removed", n.Name, cfg.Address)
		})
	_ = n.IP("addr", "del", cidr, "dev", iface)
}

// IPCommand runs ip(8).
func IPCommand(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Arping announces addr on iface with unsolicited (gratuitous) ARP.
func Arping(iface, addr string) error {
	out, err := exec.Command("arping", "-U", "-c", "3", "-w", "3", "-I", iface, addr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("arping: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
