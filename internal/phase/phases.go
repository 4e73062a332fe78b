package phase

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/mgmtctl/mgmtctl/internal/addons"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/inspector"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/laptop"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Build returns every phase in run order.
func Build(s *Session) []step.Phase {
	access := &clusterAccess{s: s}
	s.cluster = access.write
	return []step.Phase{
		vmPhase(s),
		k3sPhase(s, access),
		addonsPhase(s, access),
		capiPhase(s, access),
		kubeconfigPhase(s, access),
		inspectorPhase(s, access),
	}
}

// vmPhase creates and starts every server's VM, each on its node, then
// waits for them all: the VMs boot side by side.
func vmPhase(s *Session) step.Phase {
	var nodes []*proxmox.Node
	var steps, waits []step.Step
	for _, srv := range s.Config.Servers() {
		n := &proxmox.Node{Spec: vmSpec(&s.Config.Cluster, srv)}
		nodes = append(nodes, n)
		dial := func(ctx context.Context, wait bool) (remote.Reader, error) {
			return s.DialVM(ctx, srv, n.Created, wait, func(msg string) { step.Progress(ctx, msg) })
		}
		steps = append(steps,
			&proxmox.Image{N: n},
			&proxmox.CreateVM{N: n, AuthorizedKey: s.Config.AuthorizedKey, Marker: s.newVMMarker(srv), MarkerContent: []byte(s.Holder + "\n"),
				KnownHosts: s.VMKnownHosts(), Addr: s.VMTarget(srv).Addr},
			&proxmox.GrowDisk{N: n},
			&proxmox.StartVM{N: n})
		waits = append(waits, &proxmox.Reachable{N: n, Dial: dial, Record: newVM{s, srv}, Timeout: s.WaitTimeout},
			&laptop.RecordHostKey{VM: srv.Name, File: s.VMKnownHosts(), Addr: s.VMTarget(srv).Addr, Marker: s.newVMMarker(srv),
				Learned: func() ssh.PublicKey { return s.LearnedVMKey(srv) }})
	}
	return step.Phase{
		Tag: step.TagVM,
		Prepare: func(ctx context.Context) (string, error) {
			var names []string
			for i, srv := range s.Config.Servers() {
				n := nodes[i]
				names = append(names, n.Name())
				if err := gatherNode(ctx, s, srv, n); err != nil {
					return n.Name(), err
				}
				if err := verifyVMKey(ctx, s, srv, n); err != nil {
					return n.Name(), err
				}
			}
			return strings.Join(names, ","), nil
		},
		Steps: append(steps, waits...),
	}
}

// gatherNode connects to srv's Proxmox node (locked, in a run that may
// change it) and gathers the vm phase's facts.
func gatherNode(ctx context.Context, s *Session, srv config.Server, n *proxmox.Node) error {
	h, err := s.Host(ctx, s.ProxmoxTarget(srv))
	if err != nil {
		return err
	}
	n.Host = h
	return n.Gather(ctx)
}

// verifyVMKey checks the running VM's host key before the phase changes
// anything: a changed key found only at wait-ssh would come after an image
// download or a disk resize. A VM that does not answer yet is wait-ssh's
// business; one mgmtctl has not reached yet has no key to check.
func verifyVMKey(ctx context.Context, s *Session, srv config.Server, n *proxmox.Node) error {
	if !n.Facts.Running || !n.Ours() || s.VMNeverReached(srv) {
		return nil
	}
	_, err := s.DialVM(ctx, srv, false, false, nil)
	if err != nil && remote.IsUnreachable(err) && !isHostKeyErr(err) {
		return nil
	}
	return err
}

// k3sPhase converges the servers one at a time, each waited for (its node
// Ready) before the next is touched: the first initialises the cluster,
// and with a VIP its API address is up before the others join there.
func k3sPhase(s *Session, a *clusterAccess) step.Phase {
	c := &s.Config.Cluster
	servers := s.Config.Servers()
	vms := make([]*k3s.VM, len(servers))
	checks := make([]*k3s.HostKeyCheck, len(servers))
	var steps []step.Step
	for i, srv := range servers {
		v := &k3s.VM{Spec: k3sSpec(s.Config, i)}
		if len(servers) > 1 {
			v.Gate = func(ctx context.Context) error {
				// The members are the servers k3s runs on; one still to
				// be installed (a cluster growing) is not one yet.
				var members []string
				for _, o := range vms {
					if o.Installed != "" {
						members = append(members, o.Name())
					}
				}
				hs, err := a.etcdHealth(ctx, members)
				if err != nil || hs == nil {
					return err
				}
				return k3s.QuorumGate(v.Name(), hs)
			}
		}
		vms[i] = v
		ready := &k3s.NodeReady{V: v, API: a.api, Timeout: s.WaitTimeout}
		checks[i] = &k3s.HostKeyCheck{Name: srv.Node, VMID: srv.ID, Pinned: func() ssh.PublicKey { return s.VMHostKey(srv) }}
		steps = append(steps, &k3s.GuestAgent{V: v}, checks[i])
		if len(servers) > 1 {
			steps = append(steps, &k3s.ClusterToken{V: v, Seed: func() *k3s.VM { return k3s.Seed(vms) }, Redact: s.Redact})
		}
		if c.Spec.VIP.Addr.IsValid() {
			steps = append(steps, &k3s.KubeVIP{V: v, Manifest: k3s.KubeVIPManifest(kubeVIPSpec(c))})
		}
		steps = append(steps, &k3s.Config{V: v}, &k3s.Install{V: v}, &k3s.Restart{NodeReady: ready}, ready)
		if i == 0 && c.Spec.VIP.Addr.IsValid() {
			steps = append(steps, &k3s.APIAddress{V: v, Addr: c.Spec.VIP.Addr, API: a.api, Timeout: s.WaitTimeout})
		}
	}
	return step.Phase{
		Tag: step.TagK3s,
		Prepare: func(ctx context.Context) (string, error) {
			var names []string
			for i, srv := range servers {
				v := vms[i]
				names = append(names, v.Name())
				pve, err := s.Host(ctx, s.ProxmoxTarget(srv))
				if err != nil {
					return srv.Node, err
				}
				checks[i].Node = pve
				h, err := s.DialVM(ctx, srv, false, false, nil)
				switch {
				case err == nil:
					v.Host = h
				case s.ReadOnly && remote.IsUnreachable(err) && !isHostKeyErr(err):
					// A check run before the VM exists: every step is pending.
				default:
					return v.Name(), err
				}
				if err := v.Gather(ctx); err != nil {
					return v.Name(), err
				}
			}
			if len(servers) > 1 {
				joins, err := k3s.FirstServerJoins(ctx, vms)
				if err != nil {
					return vms[0].Name(), err
				}
				if joins {
					vms[0].Spec.Join = apiURL(s.Config)
				}
			}
			return strings.Join(names, ","), nil
		},
		Steps: steps,
	}
}

// clusterAccess reaches the cluster's API through the VM, once per run: the
// one way every phase (and status) reaches it: the steps read it through
// a kube.Reader, in every mode; only the Executor's client writes.
type clusterAccess struct {
	s       *Session
	done    bool
	k3sYAML []byte
	// cluster is the steps' way to the cluster, in every mode: a Reader,
	// which has no method that writes. writer, the run's Executor's, is
	// built on first use.
	cluster *kube.Reader
	writer  *kube.Cluster
	vm      remote.Reader
}

// connect reads k3s.yaml over SSH (kept in memory only) and builds a client
// that dials from the VM. In check mode, a VM or cluster that does not
// exist yet leaves the client nil: every step is then pending.
func (a *clusterAccess) connect(ctx context.Context) error {
	if a.done {
		return nil
	}
	h, kc, err := a.dial(ctx)
	if err != nil {
		if a.s.ReadOnly && remote.IsUnreachable(err) && !isHostKeyErr(err) {
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
	cl, err := kube.NewReader(kc, h.DialContext, a.s.linkAware(h.Name()))
	if err != nil {
		return err
	}
	a.k3sYAML, a.cluster, a.vm, a.done = kc, cl, h, true
	return nil
}

// write is the Executor's client of the cluster: the only one whose
// writes persist, over the same VM's connection; none in a read-only
// session.
func (a *clusterAccess) write(ctx context.Context) (*kube.Cluster, error) {
	if a.s.ReadOnly {
		return nil, errors.New("a read-only run does not write to the cluster")
	}
	if err := a.connect(ctx); err != nil || a.writer != nil {
		return a.writer, err
	}
	if a.vm == nil || a.k3sYAML == nil {
		return nil, nil
	}
	cl, err := kube.NewCluster(a.k3sYAML, a.vm.DialContext, false, a.s.linkAware(a.vm.Name()))
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
func (a *clusterAccess) dial(ctx context.Context) (remote.Reader, []byte, error) {
	var first remote.Reader
	var unreachable error
	for _, srv := range a.s.Config.Servers() {
		h, err := a.s.DialVM(ctx, srv, false, false, nil)
		if err != nil {
			if isHostKeyErr(err) || !remote.IsUnreachable(err) {
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

// etcdHealth is the etcd members of the named servers, each as its own
// API server sees it; nil while k3s has not run yet (a check run before
// the cluster).
func (a *clusterAccess) etcdHealth(ctx context.Context, members []string) ([]k3s.MemberHealth, error) {
	if err := a.connect(ctx); err != nil {
		return nil, err
	}
	if a.k3sYAML == nil {
		return nil, nil
	}
	var ms []k3s.Member
	for _, srv := range a.s.Config.Servers() {
		if !slices.Contains(members, srv.Name) {
			continue
		}
		ms = append(ms, k3s.Member{Name: srv.Name, Dial: func(ctx context.Context) (remote.Reader, error) {
			return a.s.DialVM(ctx, srv, false, false, nil)
		}})
	}
	return k3s.EtcdHealth(ctx, a.k3sYAML, ms), nil
}

// api is the cluster once connected: nil in check mode while the VM or
// its kubeconfig does not exist yet.
func (a *clusterAccess) api(ctx context.Context) (*kube.Reader, error) {
	if err := a.connect(ctx); err != nil {
		return nil, err
	}
	return a.cluster, nil
}

// connectVM is connect for phases that also write files on the VM: the
// host stays nil in a check run before the VM exists.
func (a *clusterAccess) connectVM(ctx context.Context) error {
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

func addonsPhase(s *Session, a *clusterAccess) step.Phase {
	c := s.Config.Cluster
	v := &addons.VM{Name: c.Metadata.Name, Cluster: func() *kube.Reader { return a.cluster }}
	cm, op := addons.CertManager(c.Spec.CertManager), addons.Operator(c.Spec.ClusterAPIOperator)
	return step.Phase{
		Tag: step.TagAddons,
		Prepare: func(ctx context.Context) (string, error) {
			if err := a.connectVM(ctx); err != nil {
				return v.Name, err
			}
			v.Host = a.vm
			return v.Name, nil
		},
		// cert-manager first: the operator's chart has a Certificate and
		// an Issuer, whose kinds cert-manager's CRDs define.
		Steps: []step.Step{
			&addons.Manifest{V: v, C: cm, Timeout: s.WaitTimeout},
			&addons.Manifest{V: v, C: op, Timeout: s.WaitTimeout},
			&addons.ProviderAPI{V: v, Namespace: op.TargetNamespace, Timeout: s.WaitTimeout},
		},
	}
}

func capiPhase(s *Session, a *clusterAccess) step.Phase {
	c := &s.Config.Cluster
	px := c.Spec.Proxmox
	cl := &capi.Cluster{Name: c.Metadata.Name, Configured: c.Spec.Providers, ProxmoxURL: px.APIURL, TokenID: px.TokenID,
		TokenSecret: s.Config.Secrets.Proxmox.TokenSecret, Timeout: s.WaitTimeout,
		API: func() *kube.Reader { return a.cluster }}
	steps := []step.Step{
		&capi.Token{C: cl, Source: s.Config.SecretSource},
		&capi.Namespaces{C: cl},
		&capi.Variables{C: cl},
	}
	for _, p := range cl.Providers() {
		steps = append(steps, &capi.ProviderStep{C: cl, P: p})
	}
	steps = append(steps, &capi.Prune{C: cl})
	return step.Phase{
		Tag:     step.TagCAPI,
		Prepare: func(ctx context.Context) (string, error) { return c.Metadata.Name, a.connect(ctx) },
		Steps:   steps,
	}
}

// server is the API's URL for the laptop's kubeconfigs: the VIP when
// there is one.
func (a *clusterAccess) server() string { return apiURL(a.s.Config) }

// apiURL is the cluster's API as everything outside a server reaches it:
// the laptop's kubeconfigs, and the servers that join.
func apiURL(l *config.Loaded) string {
	return "https://" + netip.AddrPortFrom(l.APIAddr(), 6443).String()
}

func kubeconfigPhase(s *Session, a *clusterAccess) step.Phase {
	name := s.Config.Cluster.Metadata.Name
	return step.Phase{
		Tag:     step.TagKubeconfig,
		Prepare: func(ctx context.Context) (string, error) { return "laptop", a.connect(ctx) },
		Steps: []step.Step{&kubeconfig.File{StepID: "admin-kubeconfig", Path: s.Config.KubeconfigPath(),
			Render: func(ctx context.Context) ([]byte, string, error) {
				if a.k3sYAML == nil {
					return nil, "once k3s runs", nil
				}
				b, err := kubeconfig.Admin(a.k3sYAML, name, a.server())
				return b, "", err
			}}},
	}
}

func inspectorPhase(s *Session, a *clusterAccess) step.Phase {
	c := s.Config.Cluster
	in := c.Spec.Inspector
	client := func() *kube.Reader { return a.cluster }
	return step.Phase{
		Tag:     step.TagInspector,
		Prepare: func(ctx context.Context) (string, error) { return c.Metadata.Name, a.connect(ctx) },
		Steps: []step.Step{
			&inspector.RBAC{Name: in.Name, HostName: c.Metadata.Name, Client: client},
			&inspector.KubeconfigFile{Name: in.Name, Path: s.InspectorKubeconfigPath(), TTL: in.TTL,
				Cluster: func() (string, []byte, *kube.Reader, error) {
					if a.cluster == nil {
						return "", nil, nil, nil
					}
					ca, err := clusterCA(a.k3sYAML)
					return a.server(), ca, a.cluster, err
				}},
		},
	}
}

func clusterCA(k3sYAML []byte) ([]byte, error) {
	c, err := clientcmd.Load(k3sYAML)
	if err != nil {
		return nil, err
	}
	for _, cl := range c.Clusters {
		return cl.CertificateAuthorityData, nil
	}
	return nil, errors.New("k3s.yaml has no cluster")
}

func isHostKeyErr(err error) bool {
	var hk *remote.HostKeyError
	return errors.As(err, &hk)
}
