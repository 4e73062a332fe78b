package phase

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/mgmtctl/mgmtctl/internal/addons"
	"github.com/mgmtctl/mgmtctl/internal/backup"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/inspector"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/laptop"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/pveaccess"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/s3layout"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Build returns every phase in run order.
func Build(s *session.Session) []step.Phase {
	access := s.Cluster()
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
func vmPhase(s *session.Session) step.Phase {
	var nodes []*proxmox.Node
	var steps, waits []step.Step
	for _, srv := range s.Config.Servers() {
		n := &proxmox.Node{Spec: vmSpec(&s.Config.Cluster, srv)}
		nodes = append(nodes, n)
		dial := func(ctx context.Context, wait bool) (remote.Reader, error) {
			return s.DialVM(ctx, srv, wait, func(msg string) { step.Progress(ctx, msg) })
		}
		steps = append(steps,
			&proxmox.Image{N: n},
			&proxmox.CreateVM{N: n, AuthorizedKey: s.Config.AuthorizedKey, Marker: s.NewVMMarker(srv), MarkerContent: []byte(s.Holder + "\n"),
				KnownHosts: s.VMKnownHosts(), Addr: s.VMTarget(srv).Addr},
			&proxmox.GrowDisk{N: n},
			&proxmox.StartVM{N: n})
		waits = append(waits, &proxmox.Reachable{N: n, Dial: dial, Record: s.NewVMRecord(srv), Timeout: s.WaitTimeout},
			&laptop.RecordHostKey{VM: srv.Name, File: s.VMKnownHosts(), Addr: s.VMTarget(srv).Addr, Marker: s.NewVMMarker(srv),
				Learned: func() ssh.PublicKey { return s.LearnedVMKey(srv) }})
	}
	return step.Phase{
		Tag: step.TagVM,
		Prepare: func(ctx context.Context) (string, error) {
			if err := checkAPIAccess(ctx, s); err != nil {
				return s.Config.Servers()[0].Node, err
			}
			var names []string
			for _, n := range nodes {
				names = append(names, n.Name())
			}
			// Each server's node and VM are read side by side.
			i, err := eachServer(s.Config.Servers(), func(i int, srv config.Server) error {
				if err := gatherNode(ctx, s, srv, nodes[i]); err != nil {
					return err
				}
				return verifyVMKey(ctx, s, srv, nodes[i])
			})
			if err != nil {
				return nodes[i].Name(), err
			}
			return strings.Join(names, ","), nil
		},
		Steps: append(steps, waits...),
	}
}

// eachServer runs fn for every server side by side and returns the
// first error in the servers' order, with its server's index: the
// servers' reads overlap, their failure reads as it did one after the
// other.
func eachServer(servers []config.Server, fn func(i int, srv config.Server) error) (int, error) {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, srv)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return i, err
		}
	}
	return 0, nil
}

// onHost is an error a Prepare reports on another host than its
// server's (the server's Proxmox node).
type onHost struct {
	host string
	err  error
}

func (e *onHost) Error() string { return e.err.Error() }
func (e *onHost) Unwrap() error { return e.err }

// checkAPIAccess, in api access, reads mgmtctl's token's permissions
// and names every privilege it lacks before the vm phase reads or
// changes anything.
func checkAPIAccess(ctx context.Context, s *session.Session) error {
	if !s.API() {
		return nil
	}
	return s.Once("proxmox-access", func() error {
		_, err := proxmox.CheckAccess(ctx, s.ProxmoxAPI(), s.Config.Cluster.Spec.Proxmox.MgmtctlTokenID, func(major int) []pveaccess.Grant {
			return MgmtctlGrants(s.Config, major)
		})
		return err
	})
}

// MgmtctlGrants is what mgmtctl's own token needs for the config's
// servers (pveaccess.Mgmtctl).
func MgmtctlGrants(l *config.Loaded, major int) []pveaccess.Grant {
	var vmids []int
	var nodes []string
	seen := map[string]bool{}
	for _, srv := range l.Servers() {
		vmids = append(vmids, srv.ID)
		if !seen[srv.Node] {
			seen[srv.Node] = true
			nodes = append(nodes, srv.Node)
		}
	}
	p := l.Cluster.Spec.Proxmox
	return pveaccess.Mgmtctl(major, vmids, nodes, p.Storage, p.ImageStorage, l.Cluster.Spec.VM.Bridge, session.LockPool(l))
}

// gatherNode connects to srv's Proxmox node (locked, in a run that may
// change it) and gathers the vm phase's facts.
func gatherNode(ctx context.Context, s *session.Session, srv config.Server, n *proxmox.Node) error {
	if err := nodeReader(ctx, s, srv, n); err != nil {
		return err
	}
	return n.Gather(ctx)
}

// nodeReader gives n the node: the API in api access (the run locked on
// Proxmox first, in a run that may change something), else the SSH
// connection (read-only in this session).
func nodeReader(ctx context.Context, s *session.Session, srv config.Server, n *proxmox.Node) error {
	if s.API() {
		// The token's permissions first: a lock it may not take is
		// named as the privilege it lacks (Pool.Audit, Pool.Allocate).
		if err := checkAPIAccess(ctx, s); err != nil {
			return err
		}
		if err := s.LockAPI(ctx); err != nil {
			return err
		}
		n.API = s.ProxmoxAPI()
		return nil
	}
	h, err := s.Host(ctx, s.ProxmoxTarget(srv))
	if err != nil {
		return err
	}
	n.Host = h
	return nil
}

// s3Cluster is the cluster's id for its folder in the bucket: the one
// its servers' config.yaml already holds (a server replaced, or a
// restore, keeps it), else the one the VM the cluster is initialised on
// gives (s3layout.ClusterID); "" while neither is known (a check run before
// that VM exists).
func s3Cluster(s *session.Session, folder string, servers []config.Server, vms []*k3s.VM) string {
	for _, v := range vms {
		if id := s3layout.ClusterInConfig(folder, v.Config); id != "" {
			return id
		}
	}
	seed := k3s.Seed(vms)
	for i, v := range vms {
		if v == seed {
			if key := s.VMHostKey(servers[i]); key != nil {
				return s3layout.ClusterID(key.Marshal())
			}
		}
	}
	return ""
}

// verifyVMKey checks the running VM's host key before the phase changes
// anything: a changed key found only at wait-ssh would come after an image
// download or a disk resize. A VM that does not answer yet is wait-ssh's
// business; one mgmtctl has not reached yet has no key to check.
func verifyVMKey(ctx context.Context, s *session.Session, srv config.Server, n *proxmox.Node) error {
	if !n.Facts.Running || !n.Ours() || s.VMNeverReached(srv) {
		return nil
	}
	_, err := s.DialVM(ctx, srv, false, nil)
	if err != nil && remote.IsUnreachable(err) && !remote.IsHostKeyError(err) {
		return nil
	}
	return err
}

// k3sPhase converges the servers one at a time, each waited for (its node
// Ready) before the next is touched: the first initialises the cluster,
// and with a VIP its API address is up before the others join there.
func k3sPhase(s *session.Session, a *session.Cluster) step.Phase {
	c := &s.Config.Cluster
	servers := s.Config.Servers()
	vms := make([]*k3s.VM, len(servers))
	checks := make([]*k3s.HostKeyCheck, len(servers))
	// A k3s upgrade is a risky change: a backup first, on the first server
	// that runs k3s.
	snap := &backup.VM{Name: servers[0].Name}
	steps := before(s, snap, func(ctx context.Context) (string, error) { return k3sUpgrade(ctx, vms) })
	seed := func() *k3s.VM { return k3s.Seed(vms) }
	for i, srv := range servers {
		v := &k3s.VM{Spec: k3sSpec(s.Config, i)}
		if len(servers) > 1 {
			v.Gate = func(ctx context.Context) error {
				// The members are the servers k3s runs on; one still to
				// be installed (a cluster growing) is not one yet.
				var members []*k3s.VM
				var names []string
				for _, o := range vms {
					if o.Installed != "" {
						members, names = append(members, o), append(names, o.Name())
					}
				}
				q := k3s.Quorum{Self: v.Name(), Members: members, API: a.API, Bound: s.WaitTimeout,
					Health: func(ctx context.Context) ([]k3s.MemberHealth, error) { return a.EtcdHealth(ctx, names) }}
				if s.ReadOnly {
					q.Bound = -1 // a check run says what it sees, and waits for nothing
				}
				return q.Check(ctx)
			}
		}
		vms[i] = v
		ready := &k3s.NodeReady{V: v, API: a.API, Timeout: s.WaitTimeout}
		checks[i] = &k3s.HostKeyCheck{Name: srv.Node, VMID: srv.ID, Pinned: func() ssh.PublicKey { return s.VMHostKey(srv) }}
		steps = append(steps, &k3s.GuestAgent{V: v}, checks[i])
		if len(servers) > 1 {
			steps = append(steps, &k3s.ClusterToken{V: v, Seed: func() *k3s.VM { return k3s.Seed(vms) }, Redact: s.Redact})
		}
		if c.Spec.VIP.Addr.IsValid() {
			steps = append(steps, &k3s.KubeVIP{V: v, Manifest: k3s.KubeVIPManifest(kubeVIPSpec(c))})
		}
		if i == 0 {
			// Before any server's config.yaml asks for secrets-encryption:
			// encrypt.go.
			steps = append(steps, &k3s.EnableEncryption{VMs: vms, Seed: seed})
		}
		steps = append(steps, &k3s.Env{V: v}, &k3s.Config{V: v}, &k3s.Install{V: v}, &k3s.Restart{NodeReady: ready}, ready)
		if i == 0 && c.Spec.VIP.Addr.IsValid() {
			steps = append(steps, &k3s.APIAddress{V: v, Addr: c.Spec.VIP.Addr, API: a.API, Timeout: s.WaitTimeout})
		}
	}
	// Secrets encrypted at rest once every server runs with the
	// identity config, then each server restarted with the key (encrypt.go).
	steps = append(steps, &k3s.RotateKeys{VMs: vms, Seed: seed})
	for _, v := range vms {
		steps = append(steps, &k3s.KeyRestart{NodeReady: &k3s.NodeReady{V: v, API: a.API, Timeout: s.WaitTimeout}, Seed: seed, VMs: vms})
	}
	if c.Spec.Backup.S3 != nil {
		// The snapshots in S3 restore only under the cluster's token,
		// which they do not hold: the laptop keeps it.
		steps = append(steps, &backup.KeepToken{Dir: s.BackupDir(), Now: time.Now, Redact: s.Redact, Server: func() *backup.VM {
			v := k3s.Seed(vms)
			return &backup.VM{Name: v.Name(), Host: v.Host}
		}})
	}
	return step.Phase{
		Tag: step.TagK3s,
		Prepare: func(ctx context.Context) (string, error) {
			var names []string
			for _, v := range vms {
				names = append(names, v.Name())
			}
			// Each server's node and VM are read side by side; what
			// is chosen among them (the snapshot's server) is chosen
			// in the servers' order after.
			failed, err := eachServer(servers, func(i int, srv config.Server) error {
				v := vms[i]
				if s.API() {
					checks[i].API = s.ProxmoxAPI()
				} else {
					pve, err := s.Host(ctx, s.ProxmoxTarget(srv))
					if err != nil {
						return &onHost{srv.Node, err}
					}
					checks[i].Node = pve
				}
				h, err := s.DialVM(ctx, srv, false, nil)
				switch {
				case err == nil:
					v.Host = h
				case s.ReadOnly && remote.IsUnreachable(err) && !remote.IsHostKeyError(err):
					// A check run before the VM exists: every step is pending.
				default:
					return err
				}
				return v.Gather(ctx)
			})
			if err != nil {
				var oh *onHost
				if errors.As(err, &oh) {
					return oh.host, oh.err
				}
				return vms[failed].Name(), err
			}
			for _, v := range vms {
				if snap.Host == nil && v.Host != nil && v.Active {
					snap.Name, snap.Host = v.Name(), v.Host
				}
			}
			if b := c.Spec.Backup.S3; b != nil {
				id := s3Cluster(s, b.Folder, servers, vms)
				for _, v := range vms {
					v.Spec.S3.Cluster = id
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

// k3sUpgrade says that the k3s phase will upgrade a server, as "before
// upgrading k3s from … to …", or "" for none (an install or a pin already
// met is no upgrade; a newer k3s than pinned is the install step's
// error). The server's quorum gate is asked first: an upgrade the gate
// refuses takes no snapshot, and the run stops here, on the gate's error,
// before anything changes.
func k3sUpgrade(ctx context.Context, vms []*k3s.VM) (string, error) {
	// An upgrade k3s cannot make is refused before its backup.
	for _, v := range vms {
		if err := k3s.CheckUpgrade(v.Name(), v.Installed, v.Spec.Version); err != nil {
			return "", err
		}
	}
	for _, v := range vms {
		got, err := config.ParseK3sRelease(v.Installed)
		if err != nil || got.Compare(v.Spec.Version) >= 0 {
			continue
		}
		if v.Gate != nil {
			if err := v.Gate(ctx); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("before upgrading k3s from %s to %s", v.Installed, v.Spec.Version), nil
	}
	return "", nil
}

func addonsPhase(s *session.Session, a *session.Cluster) step.Phase {
	c := s.Config.Cluster
	v := &addons.VM{Name: c.Metadata.Name, Cluster: func() *kube.Reader { return a.Reader() }}
	cm, op := addons.CertManager(c.Spec.CertManager), addons.Operator(c.Spec.ClusterAPIOperator)
	return step.Phase{
		Tag: step.TagAddons,
		Prepare: func(ctx context.Context) (string, error) {
			if err := a.ConnectVM(ctx); err != nil {
				return v.Name, err
			}
			v.Host = a.VM()
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

func capiPhase(s *session.Session, a *session.Cluster) step.Phase {
	c := &s.Config.Cluster
	px := c.Spec.Proxmox
	cl := &capi.Cluster{Name: c.Metadata.Name, Configured: c.Spec.Providers, ProxmoxURL: px.APIURL, TokenID: px.TokenID,
		TokenSecret: s.Config.Secrets.Proxmox.TokenSecret, Timeout: s.WaitTimeout,
		API: func() *kube.Reader { return a.Reader() }, ProxmoxCA: px.CA, SkipTLSVerify: px.CAPMOXSkipTLSVerify}
	steps := []step.Step{
		&capi.Token{C: cl, Source: s.Config.SecretSource, API: pve.ReadOnly(pve.New(px.APIURL, px.TokenID, s.Config.Secrets.Proxmox.TokenSecret, s.ProxmoxHTTP())), Needs: func(major int) []pveaccess.Grant {
			return pveaccess.CAPMOX(major, c.Spec.Proxmox.Storage, c.Spec.Proxmox.ISOStorage, c.Spec.VM.Bridge, c.Spec.Proxmox.Pool)
		}},
		&capi.Namespaces{C: cl},
		&capi.Variables{C: cl},
	}
	// A provider's version moved is a risky change: a backup first.
	snap := &backup.VM{Name: c.Metadata.Name}
	steps = append(steps, before(s, snap, cl.VersionChange)...)
	for _, p := range cl.Providers() {
		steps = append(steps, &capi.ProviderStep{C: cl, P: p})
	}
	// A backup stopped between its pause and its resume left Clusters
	// paused: every apply resumes them (never those a restore holds).
	steps = append(steps, &capi.Prune{C: cl}, &capi.Resume{C: &capi.Clusters{Name: c.Metadata.Name, API: a.API}})
	return step.Phase{
		Tag: step.TagCAPI,
		Prepare: func(ctx context.Context) (string, error) {
			if px.Fingerprint != "" && !px.CAPMOXSkipTLSVerify {
				// CAPMOX trusts the certificate mgmtctl pins: read
				// through the pinned client, so it is that one.
				pinned, err := pveaccess.ServedCertificate(ctx, s.ProxmoxHTTP(), px.APIURL)
				if err != nil {
					return c.Metadata.Name, err
				}
				cl.ProxmoxCA = pinned
			}
			err := a.Connect(ctx)
			if vm := a.VM(); vm != nil {
				snap.Host = vm
			}
			return c.Metadata.Name, err
		},
		Steps: steps,
	}
}

// apiURL is the cluster's API as everything outside a server reaches it:
// the laptop's kubeconfigs, and the servers that join.
func apiURL(l *config.Loaded) string {
	return "https://" + netip.AddrPortFrom(l.APIAddr(), 6443).String()
}

func kubeconfigPhase(s *session.Session, a *session.Cluster) step.Phase {
	name := s.Config.Cluster.Metadata.Name
	return step.Phase{
		Tag:     step.TagKubeconfig,
		Prepare: func(ctx context.Context) (string, error) { return "laptop", a.Connect(ctx) },
		Steps: []step.Step{&kubeconfig.File{StepID: "admin-kubeconfig", Path: s.Config.KubeconfigPath(),
			Render: func(ctx context.Context) ([]byte, string, error) {
				if a.K3sYAML() == nil {
					return nil, "once k3s runs", nil
				}
				b, err := kubeconfig.Admin(a.K3sYAML(), name, apiURL(s.Config))
				return b, "", err
			}}},
	}
}

func inspectorPhase(s *session.Session, a *session.Cluster) step.Phase {
	c := s.Config.Cluster
	in := c.Spec.Inspector
	client := func() *kube.Reader { return a.Reader() }
	return step.Phase{
		Tag:     step.TagInspector,
		Prepare: func(ctx context.Context) (string, error) { return c.Metadata.Name, a.Connect(ctx) },
		Steps: []step.Step{
			&inspector.RBAC{Name: in.Name, HostName: c.Metadata.Name, Client: client},
			&inspector.KubeconfigFile{Name: in.Name, Path: s.InspectorKubeconfigPath(), TTL: in.TTL,
				Cluster: func() (string, []byte, *kube.Reader, error) {
					if a.Reader() == nil {
						return "", nil, nil, nil
					}
					ca, err := clusterCA(a.K3sYAML())
					return apiURL(s.Config), ca, a.Reader(), err
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
