package kubelet

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mgmtctl/mgmtctl/lab/internal/podnet"
)

// sandbox gives the pod its address: the node's for a pod on the host's
// network (or on a kubelet without a pod network, as in unit tests), its
// sandbox's otherwise, made when it has none (podnet).
func (k *Kubelet) sandbox(p *corev1.Pod, st *podState) error {
	if k.Net == nil || p.Spec.HostNetwork {
		st.ip = k.IP
		return nil
	}
	ip, err := k.Net.Sandbox(string(p.UID))
	if err != nil {
		if !errors.Is(err, podnet.ErrNotReady) {
			k.logf("Failed to create pod sandbox for %s/%s: %v", p.Namespace, p.Name, err)
		}
		return err
	}
	st.ip = ip
	return nil
}

// teardown removes the pod's sandbox, if it has one.
func (k *Kubelet) teardown(p *corev1.Pod) {
	if k.Net != nil && !p.Spec.HostNetwork {
		k.Net.Teardown(string(p.UID))
	}
}

// collect removes the sandboxes of pods no longer bound to this node
// (deleted while k3s was down, say), as the kubelet's garbage collection
// of sandboxes does.
func (k *Kubelet) collect(bound map[string]bool) {
	if k.Net == nil {
		return
	}
	for _, id := range k.Net.Sandboxes() {
		if !bound[id] {
			k.Net.Teardown(id)
		}
	}
}

// runNetwork is flannel's part: once the controllers gave this node its
// pod CIDR, the node's side of the pod network is laid out, and the
// routes to the other nodes' pod CIDRs follow the Nodes as they come and
// go. It watches the Nodes until ctx ends.
func (k *Kubelet) runNetwork(ctx context.Context) {
	if k.Net == nil {
		return
	}
	nodes := map[string]*corev1.Node{}
	sync := func() {
		var peers []podnet.Peer
		for name, n := range nodes {
			if name == k.Node {
				if n.Spec.PodCIDR != "" && n.Spec.PodCIDR != k.Net.PodCIDR() {
					if err := k.Net.Setup(n.Spec.PodCIDR); err != nil {
						k.logf("pod network: %v", err)
					} else {
						k.logf("pod network of %s is up: %s on %s", k.Node, n.Spec.PodCIDR, podnet.Bridge)
					}
				}
				continue
			}
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && n.Spec.PodCIDR != "" {
					peers = append(peers, podnet.Peer{PodCIDR: n.Spec.PodCIDR, IP: a.Address})
				}
			}
		}
		if err := k.Net.Route(peers); err != nil {
			k.logf("pod network routes: %v", err)
		}
	}
	for ctx.Err() == nil {
		list, err := k.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		clear(nodes)
		for i := range list.Items {
			nodes[list.Items[i].Name] = &list.Items[i]
		}
		sync()
		w, err := k.CS.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(nodes, n.Name)
			} else {
				nodes[n.Name] = n
			}
			sync()
		}
		w.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
