package kubelet

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/lab/internal/kubevip"
)

// runKubeVIP runs kube-vip's work for a pod of its image (kubevip): the
// control-plane election from the container's env, with the pod's
// ServiceAccount's token (so the DaemonSet's RBAC is what lets it hold
// the Lease) and its log in the container's log. The container ends
// with the pod or with k3s, and the address goes with it.
func (k *Kubelet) runKubeVIP(ctx context.Context, p *corev1.Pod, st *podState, now time.Time) {
	if st.proc != nil {
		select {
		case <-st.proc.done:
			st.proc = nil
			st.exit(now, 1, "")
			k.logf("kube-vip in %s/%s exited; back-off until %s", p.Namespace, p.Name, st.next.Format(time.RFC3339))
		default:
		}
		return
	}
	if now.Before(st.next) {
		return
	}
	ctr := p.Spec.Containers[0]
	cfg, _ := kubevip.FromContainer(ctr)
	tokenFile, err := k.apiAccess(ctx, p)
	if err != nil {
		st.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		st.next = now.Add(2 * time.Second)
		k.logf("mount volumes of %s/%s: %v", p.Namespace, p.Name, err)
		return
	}
	cs, err := k.podClient(tokenFile)
	if err != nil {
		st.waiting = &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		return
	}
	logFile, err := k.openLog(p, ctr.Name, st)
	if err != nil {
		st.waiting = &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		return
	}
	cctx, cancel := context.WithCancel(context.Background())
	proc := &process{done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(proc.done)
		cw := &criWriter{f: logFile}
		stderr := cw.stream("stderr")
		defer func() {
			stderr.Close()
			cw.wait()
			logFile.Close()
		}()
		go k.refreshToken(cctx, p, serviceAccount(p), filepath.Dir(tokenFile))
		if !cfg.Supported() {
			// Another mode of kube-vip's (services, BGP): the lab does
			// none, and says so; the container runs idle.
			fmt.Fprintf(stderr, "time=%q level=warning msg=%q\n", time.Now().UTC().Format(time.RFC3339), "the lab's kube-vip does ARP control-plane leader election only; this configuration asks for another mode")
			<-cctx.Done()
			return
		}
		(&kubevip.Node{CS: cs, Name: k.Node, Log: stderr, IP: k.ipCommand(), Announce: k.announce()}).Elect(cctx, cfg)
	}()
	st.proc = proc
	st.start(now)
	st.ready = true
	k.logf("started kube-vip in %s/%s for %s", p.Namespace, p.Name, cfg.Address)
}

// podClient is a container's client with its ServiceAccount's token:
// in-cluster config on the host's network, this node's API server.
func (k *Kubelet) podClient(tokenFile string) (kubernetes.Interface, error) {
	if k.PodClient != nil {
		return k.PodClient(tokenFile)
	}
	return kubernetes.NewForConfig(k.podConfig(tokenFile))
}

// podDir is where the kubelet keeps its pods' directories.
func (k *Kubelet) podDir() string {
	if k.PodDir != "" {
		return k.PodDir
	}
	return "/var/lib/kubelet/pods"
}

func (k *Kubelet) ipCommand() func(args ...string) error {
	if k.VIPCommands != nil {
		return k.VIPCommands.IP
	}
	return kubevip.IPCommand
}

func (k *Kubelet) announce() func(iface, addr string) error {
	if k.VIPCommands != nil {
		return k.VIPCommands.Announce
	}
	return kubevip.Arping
}

// VIPCommands are the commands kube-vip's pods use on the node (ip(8)
// and arping; tests record them).
type VIPCommands struct {
	IP       func(args ...string) error
	Announce func(iface, addr string) error
}
