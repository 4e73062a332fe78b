package phase

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mgmtctl/mgmtctl/internal/addons"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/inspector"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Build returns every phase in run order.
func Build(s *Session) []step.Phase {
	access := &clusterAccess{s: s}
	return []step.Phase{
		vmPhase(s),
		k3sPhase(s, access),
		addonsPhase(s, access),
		capiPhase(s, access),
		kubeconfigPhase(s, access),
		inspectorPhase(s, access),
	}
}

func vmPhase(s *Session) step.Phase {
	n := &proxmox.Node{Spec: vmSpec(&s.Config.Cluster)}
	dial := func(ctx context.Context, wait bool) (remote.Host, error) {
		return s.DialVM(ctx, n.Created, wait, func(msg string) { step.Progress(ctx, msg) })
	}
	return step.Phase{
		Tag: step.TagVM,
		Prepare: func(ctx context.Context) (string, error) {
			if err := gatherNode(ctx, s, n); err != nil {
				return n.Name(), err
			}
			return n.Name(), verifyVMKey(ctx, s, n)
		},
		Steps: []step.Step{
			&proxmox.Image{N: n},
			&proxmox.CreateVM{N: n, AuthorizedKey: s.Config.AuthorizedKey, BeforeCreate: s.MarkNewVM},
			&proxmox.GrowDisk{N: n},
			&proxmox.StartVM{N: n},
			&proxmox.Reachable{N: n, Dial: dial, Record: newVM{s}, Timeout: s.WaitTimeout},
		},
	}
}

// gatherNode connects to the Proxmox node (locked, in a run that may
// change it) and gathers the vm phase's facts.
func gatherNode(ctx context.Context, s *Session, n *proxmox.Node) error {
	h, err := s.Host(ctx, s.ProxmoxTarget())
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
func verifyVMKey(ctx context.Context, s *Session, n *proxmox.Node) error {
	if !n.Facts.Running || !n.Ours() || s.VMNeverReached() {
		return nil
	}
	_, err := s.DialVM(ctx, false, false, nil)
	if err != nil && remote.IsUnreachable(err) && !isHostKeyErr(err) {
		return nil
	}
	return err
}

func k3sPhase(s *Session, a *clusterAccess) step.Phase {
	c := &s.Config.Cluster
	v := &k3s.VM{Spec: k3sSpec(c)}
	ready := &k3s.NodeReady{V: v, API: a.api, Timeout: s.WaitTimeout}
	check := &k3s.HostKeyCheck{Name: c.Spec.Proxmox.Node, VMID: c.Spec.VM.ID, Pinned: s.VMHostKey}
	return step.Phase{
		Tag: step.TagK3s,
		Prepare: func(ctx context.Context) (string, error) {
			pve, err := s.Host(ctx, s.ProxmoxTarget())
			if err != nil {
				return c.Spec.Proxmox.Node, err
			}
			check.Node = pve
			h, err := s.DialVM(ctx, false, false, nil)
			if err != nil {
				if s.ReadOnly && remote.IsUnreachable(err) && !isHostKeyErr(err) {
					// A check run before the VM exists: every step is pending.
					return v.Name(), v.Gather(ctx)
				}
				return v.Name(), err
			}
			v.Host = h
			return v.Name(), v.Gather(ctx)
		},
		Steps: []step.Step{
			&k3s.GuestAgent{V: v},
			check,
			&k3s.Config{V: v},
			&k3s.Install{V: v},
			&k3s.Restart{NodeReady: ready},
			ready,
		},
	}
}

// clusterAccess reaches the cluster's API through the VM, once per run: the
// one way every phase (and status) reaches it. In check mode the cluster's
// clients make every write a server-side dry run.
type clusterAccess struct {
	s       *Session
	done    bool
	k3sYAML []byte
	cluster *kube.Cluster
	vm      remote.Host
}

// connect reads k3s.yaml over SSH (kept in memory only) and builds a client
// that dials from the VM. In check mode, a VM or cluster that does not
// exist yet leaves the client nil: every step is then pending.
func (a *clusterAccess) connect(ctx context.Context) error {
	if a.done {
		return nil
	}
	h, err := a.s.DialVM(ctx, false, false, nil)
	if err != nil {
		if a.s.ReadOnly && remote.IsUnreachable(err) && !isHostKeyErr(err) {
			a.done = true
			return nil
		}
		return err
	}
	kc, err := h.ReadFile(ctx, k3s.KubeconfigPath, true)
	if errors.Is(err, fs.ErrNotExist) && a.s.ReadOnly {
		a.done = true
		return nil
	}
	if err != nil {
		return err
	}
	if a.s.Redact != nil {
		a.s.Redact(kubeconfig.Secrets(kc)...)
	}
	cl, err := kube.NewCluster(kc, h.DialContext, a.s.ReadOnly)
	if err != nil {
		return err
	}
	a.k3sYAML, a.cluster, a.vm, a.done = kc, cl, h, true
	return nil
}

// api is the cluster once connected: nil in check mode while the VM or
// its kubeconfig does not exist yet.
func (a *clusterAccess) api(ctx context.Context) (*kube.Cluster, error) {
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
		h, err := a.s.DialVM(ctx, false, false, nil)
		if err != nil {
			return err
		}
		a.vm = h
	}
	return nil
}

func addonsPhase(s *Session, a *clusterAccess) step.Phase {
	c := s.Config.Cluster
	v := &addons.VM{Name: c.Metadata.Name, Cluster: func() *kube.Cluster { return a.cluster }}
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
		API: func() *kube.Cluster { return a.cluster }}
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

func (a *clusterAccess) server() string {
	return "https://" + netip.AddrPortFrom(a.s.Config.Cluster.Spec.VM.Net.Addr(), 6443).String()
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
	client := func() kubernetes.Interface {
		if a.cluster == nil {
			return nil
		}
		return a.cluster.Typed
	}
	return step.Phase{
		Tag:     step.TagInspector,
		Prepare: func(ctx context.Context) (string, error) { return c.Metadata.Name, a.connect(ctx) },
		Steps: []step.Step{
			&inspector.RBAC{Name: in.Name, HostName: c.Metadata.Name, Client: client},
			&inspector.KubeconfigFile{Name: in.Name, Path: s.InspectorKubeconfigPath(), TTL: in.TTL,
				Cluster: func() (string, []byte, kubernetes.Interface, error) {
					if a.cluster == nil {
						return "", nil, nil, nil
					}
					ca, err := clusterCA(a.k3sYAML)
					return a.server(), ca, a.cluster.Typed, err
				},
				Minted: func(tok string) {
					if s.Redact != nil {
						s.Redact(tok)
					}
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
