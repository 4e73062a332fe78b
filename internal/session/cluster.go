package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"

	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Cluster reaches the cluster's API through the VM, once per run: the
// one way every phase (and status) reaches it: the steps read it through
// a kube.Reader, in every mode; only the Executor's client writes.
type Cluster struct {
	s *Session
	// mu guards what follows: the Checks run ahead side by side (a
	// server's restart check reaches the quorum gate, and so Connect,
	// beside the others) and the Executor share this one way in.
	mu      sync.Mutex
	done    bool
	k3sYAML []byte
	// cluster is the steps' way to the cluster, in every mode: a Reader,
	// which has no method that writes. writer, the run's Executor's, is
	// built on first use.
	cluster *kube.Reader
	writer  *kube.Cluster
	vm      remote.Reader
}

// Connect reads k3s.yaml over SSH (kept in memory only) and builds a client
// that dials from the VM. In check mode, a VM or cluster that does not
// exist yet leaves the client nil: every step is then pending.
func (a *Cluster) Connect(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connect(ctx)
}

// connect is Connect with mu held.
func (a *Cluster) connect(ctx context.Context) error {
	if a.done {
		return nil
	}
	h, kc, err := a.dial(ctx)
	if err != nil {
		if a.s.ReadOnly && remote.IsUnreachable(err) && !remote.IsHostKeyError(err) {
			a.done = true
			return nil
		}
		return err
	}
	if kc == nil {
		if a.s.ReadOnly {
			// A check run before k3s runs: every step is pending.
			a.done = true
			return nil
		}
		return fmt.Errorf("%s: %w", k3s.KubeconfigPath, fs.ErrNotExist)
	}
	if a.s.Redact != nil {
		a.s.Redact(kubeconfig.Secrets(kc)...)
	}
	cl, err := kube.NewReader(kc, a.s.APIDialer(h), a.s.LinkAware(h.Name()))
	if err != nil {
		return err
	}
	a.k3sYAML, a.cluster, a.vm, a.done = kc, cl, h, true
	return nil
}

// write is the Executor's client of the cluster: the only one whose
// writes persist, over the same VM's connection; none in a read-only
// session.
func (a *Cluster) write(ctx context.Context) (*kube.Cluster, error) {
	if a.s.ReadOnly {
		return nil, errors.New("a read-only run does not write to the cluster")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.connect(ctx); err != nil || a.writer != nil {
		return a.writer, err
	}
	if a.vm == nil || a.k3sYAML == nil {
		return nil, nil
	}
	cl, err := kube.NewCluster(a.k3sYAML, a.s.APIDialer(a.vm), false, a.s.LinkAware(a.vm.Name()))
	if err != nil {
		return nil, err
	}
	a.writer = cl
	return cl, nil
}

// dial reaches the first server whose VM answers and has k3s's
// kubeconfig, and returns that kubeconfig (kept in memory only): with
// several servers, the cluster stays reachable while one is down. When
// VMs answer but none has k3s.yaml yet, it returns the first with none.
// A host key error is never passed over.
func (a *Cluster) dial(ctx context.Context) (remote.Reader, []byte, error) {
	var first remote.Reader
	var unreachable error
	for _, srv := range a.s.Config.Servers() {
		h, err := a.s.DialVM(ctx, srv, false, nil)
		if err != nil {
			if remote.IsHostKeyError(err) || !remote.IsUnreachable(err) {
				return nil, nil, err
			}
			if unreachable == nil {
				unreachable = err
			}
			continue
		}
		kc, err := h.ReadFile(ctx, k3s.KubeconfigPath, true)
		switch {
		case err == nil:
			return h, kc, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, nil, err
		case first == nil:
			first = h
		}
	}
	if first != nil {
		return first, nil, nil
	}
	return nil, nil, unreachable
}

// EtcdHealth is the etcd members of the named servers, each as its own
// API server sees it; nil while k3s has not run yet (a check run before
// the cluster).
func (a *Cluster) EtcdHealth(ctx context.Context, members []string) ([]k3s.MemberHealth, error) {
	if err := a.Connect(ctx); err != nil {
		return nil, err
	}
	k3sYAML := a.K3sYAML()
	if k3sYAML == nil {
		return nil, nil
	}
	var ms []k3s.Member
	for _, srv := range a.s.Config.Servers() {
		if !slices.Contains(members, srv.Name) {
			continue
		}
		// k3s.yaml's server is 127.0.0.1:6443 and its CA and client the
		// cluster's, so it fits every server's own API server.
		ms = append(ms, k3s.Member{Name: srv.Name, API: func(ctx context.Context) (*kube.Reader, error) {
			h, err := a.s.DialVM(ctx, srv, false, nil)
			if err != nil {
				return nil, fmt.Errorf("VM not reachable: %w", err)
			}
			return kube.NewReader(k3sYAML, a.s.APIDialer(h))
		}})
	}
	return k3s.EtcdHealth(ctx, ms), nil
}

// API is the cluster once connected: nil in check mode while the VM or
// its kubeconfig does not exist yet.
func (a *Cluster) API(ctx context.Context) (*kube.Reader, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.connect(ctx); err != nil {
		return nil, err
	}
	return a.cluster, nil
}

// ConnectVM is Connect for phases that also write files on the VM: the
// host stays nil in a check run before the VM exists.
func (a *Cluster) ConnectVM(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.connect(ctx); err != nil {
		return err
	}
	if a.vm == nil && !a.s.ReadOnly {
		h, _, err := a.dial(ctx)
		if err != nil {
			return err
		}
		a.vm = h
	}
	return nil
}

// Reader is the steps' client of the cluster once connected (nil before,
// or in a check run before k3s runs).
func (a *Cluster) Reader() *kube.Reader {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cluster
}

// K3sYAML is the server's kubeconfig once connected, kept in memory only.
func (a *Cluster) K3sYAML() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.k3sYAML
}

// VM is the server's VM the cluster was reached through.
func (a *Cluster) VM() remote.Reader {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.vm
}
