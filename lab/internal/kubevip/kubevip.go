// Package kubevip is the lab's kube-vip: what a kube-vip DaemonSet's pod
// does on each control-plane node, run by the lab's k3s on its own node
// since the lab runs no containers. In ARP mode with control-plane leader
// election (kube-vip's `manager` with cp_enable, vip_arp and
// vip_leaderelection), the holder of the Lease vip_leasename
// (plndr-cp-lock) in cp_namespace (kube-system) adds the address to its
// interface and announces it with gratuitous ARP; a node that loses the
// lease removes it (kube-vip cmd/kube-vip.go, pkg/kubevip
// config_envvar.go).
package kubevip

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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

// FromDaemonSet reads the config of a kube-vip DaemonSet's container, or
// reports that the DaemonSet is not kube-vip's.
func FromDaemonSet(ds *appsv1.DaemonSet) (Config, bool) {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if !strings.Contains(c.Image, "kube-vip/kube-vip") {
			continue
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
	return Config{}, false
}

// Node runs kube-vip for one node while a kube-vip DaemonSet exists in
// kube-system.
type Node struct {
	CS   kubernetes.Interface
	Name string // the node's name: the lease holder's identity
	Log  io.Writer
	// IP runs `ip` (the lab's k3s runs in the VM's network namespace).
	IP func(args ...string) error
	// Announce sends gratuitous ARP for the address.
	Announce func(iface, addr string) error
}

// Run watches kube-system's DaemonSets and runs kube-vip as the one it
// finds says, until ctx ends and the address is given up.
func (n *Node) Run(ctx context.Context) {
	var (
		mu      sync.Mutex
		running context.CancelFunc
		current Config
		wg      sync.WaitGroup
	)
	// Run returns once every election it started gave its address up.
	defer wg.Wait()
	apply := func(ds *appsv1.DaemonSet, deleted bool) {
		cfg, ok := FromDaemonSet(ds)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !deleted && running != nil && cfg == current {
			return
		}
		if running != nil {
			running()
			running = nil
		}
		if deleted || !cfg.ControlPlane || !cfg.ARP || !cfg.LE || cfg.Address == "" {
			return
		}
		rctx, cancel := context.WithCancel(ctx)
		running, current = cancel, cfg
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.elect(rctx, cfg)
		}()
	}
	for ctx.Err() == nil {
		list, err := n.CS.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for i := range list.Items {
			apply(&list.Items[i], false)
		}
		w, err := n.CS.AppsV1().DaemonSets("kube-system").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			time.Sleep(time.Second) // as after a failed list: no relist loop at full speed
			continue
		}
		for ev := range w.ResultChan() {
			if ds, ok := ev.Object.(*appsv1.DaemonSet); ok {
				apply(ds, ev.Type == watch.Deleted)
			}
		}
		w.Stop()
	}
}

func (n *Node) logf(format string, a ...any) {
	fmt.Fprintf(n.Log, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), "kube-vip: "+fmt.Sprintf(format, a...))
}

// elect stands for the control-plane lease; the holder has the address.
func (n *Node) elect(ctx context.Context, cfg Config) {
	iface := cfg.Interface
	if iface == "" {
		iface = "eth0"
	}
	cidr := cfg.Address + "/32"
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
