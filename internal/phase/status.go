package phase

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mgmtctl/mgmtctl/internal/addons"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/health"
	"github.com/mgmtctl/mgmtctl/internal/inspector"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// StatusChecks are `mgmtctl status`'s questions, in phase order. The
// session must be a check session: every host is behind the read-only
// gate and unlocked, and nothing is minted or written.
func StatusChecks(s *Session) []health.Check {
	c := &s.Config.Cluster
	n := &proxmox.Node{Cluster: c}
	v := &k3s.VM{Cluster: c}
	a := &clusterAccess{s: s}
	apply := func(tag step.Tag) string { return "mgmtctl apply --tags " + string(tag) }
	api := func(ctx context.Context) (*kube.Cluster, error) {
		if err := a.connect(ctx); err != nil {
			return nil, err
		}
		if a.cluster == nil {
			return nil, fmt.Errorf("k3s has not written %s yet", k3s.KubeconfigPath)
		}
		return a.cluster, nil
	}
	checks := []health.Check{
		{Phase: step.TagVM, Name: "ssh-proxmox", Run: func(ctx context.Context) health.Finding {
			t := s.ProxmoxTarget()
			h, err := s.Host(ctx, t)
			if err != nil {
				return health.Bad("see docs/troubleshooting.md (host keys, reachability)", "%s@%s: %v", t.User, t.Addr, err)
			}
			n.Host = h
			if err := n.Gather(ctx); err != nil {
				return health.Bad("read the debug output with -v", "%v", err)
			}
			return health.Good("%s@%s answers; host key verified", t.User, t.Addr)
		}},
		{Phase: step.TagVM, Name: "vm", Needs: []string{"ssh-proxmox"}, Run: func(ctx context.Context) health.Finding {
			switch {
			case !n.Facts.VMExists:
				return health.Bad("mgmtctl apply", "VM %s does not exist on %s", n.VMID(), n.Name())
			case !n.Ours():
				return health.Bad("choose a free VMID (pvesh get /cluster/nextid)", "VMID %s belongs to another VM (name %q)", n.VMID(), n.Facts.Config["name"])
			case !n.Facts.Running:
				return health.Bad(apply(step.TagVM)+" (starts it)", "VM %s (%s) is stopped", n.VMID(), c.Metadata.Name)
			}
			return health.Good("VM %s (%s) is mgmtctl's and running", n.VMID(), c.Metadata.Name)
		}},
		{Phase: step.TagVM, Name: "disk", Needs: []string{"vm"}, Run: func(ctx context.Context) health.Finding {
			got, ok := n.DiskBytes()
			want := int64(c.Spec.VM.DiskGiB) << 30
			switch {
			case !ok:
				return health.Bad("qm config "+n.VMID(), "cannot read the size of scsi0 (%q)", n.Facts.Config["scsi0"])
			case got < want:
				return health.Bad(apply(step.TagVM)+" (grows it)", "disk is %d GiB, diskGiB is %d", got>>30, c.Spec.VM.DiskGiB)
			case got > want:
				return health.Bad("raise spec.vm.diskGiB to the disk's size (disks are never shrunk)", "disk is %d GiB, larger than diskGiB %d", got>>30, c.Spec.VM.DiskGiB)
			}
			return health.Good("disk %d GiB as configured", got>>30)
		}},
		{Phase: step.TagVM, Name: "hardware", Needs: []string{"vm"}, Run: func(ctx context.Context) health.Finding {
			if d := (&proxmox.CreateVM{N: n, AuthorizedKey: s.Config.AuthorizedKey}).Drift(); len(d) > 0 {
				return health.Bad("change the VM or the config by hand; mgmtctl does not reconfigure a VM", "%s", strings.Join(d, "; "))
			}
			return health.Good("cores, memory and network as configured")
		}},
		{Phase: step.TagK3s, Name: "ssh-vm", Needs: []string{"vm"}, Run: func(ctx context.Context) health.Finding {
			t := s.VMTarget()
			h, err := s.DialVM(ctx, false, false, nil)
			if err != nil {
				return health.Bad("check that the VM runs ("+apply(step.TagVM)+"); see docs/troubleshooting.md for host keys", "%s@%s: %v", t.User, t.Addr, err)
			}
			v.Host = h
			return health.Good("%s@%s answers; host key verified", t.User, t.Addr)
		}},
		{Phase: step.TagK3s, Name: "k3s", Needs: []string{"ssh-vm"}, Run: func(ctx context.Context) health.Finding {
			if err := v.Gather(ctx); err != nil {
				return health.Bad("read the debug output with -v", "%v", err)
			}
			pin := c.Spec.K3s.Version
			switch {
			case v.Installed == "":
				return health.Bad(apply(step.TagK3s), "k3s is not installed")
			case v.Installed != pin:
				return health.Bad(apply(step.TagK3s)+" (upgrades it)", "k3s %s installed, mgmt.yaml pins %s", v.Installed, pin)
			case !v.Active:
				return health.Bad(apply(step.TagK3s)+"; journalctl -u k3s on the VM", "k3s %s installed but not running", v.Installed)
			}
			return health.Good("k3s %s running, as pinned", v.Installed)
		}},
		{Phase: step.TagK3s, Name: "node", Needs: []string{"ssh-vm"}, Run: func(ctx context.Context) health.Finding {
			cl, err := api(ctx)
			if err != nil {
				return health.Bad(apply(step.TagK3s), "cannot reach the cluster: %v", err)
			}
			node, err := cl.Typed.CoreV1().Nodes().Get(ctx, c.Metadata.Name, metav1.GetOptions{})
			if err != nil {
				return health.Bad(apply(step.TagK3s), "node %s: %v", c.Metadata.Name, err)
			}
			if ok, why := kube.NodeReady(node); !ok {
				return health.Bad("kubectl describe node "+c.Metadata.Name, "node %s not Ready: %s", c.Metadata.Name, why)
			}
			return health.Good("node %s Ready", c.Metadata.Name)
		}},
	}
	for _, ch := range []addons.Chart{addons.CertManager(c.Spec.CertManager), addons.Operator(c.Spec.ClusterAPIOperator)} {
		checks = append(checks, health.Check{Phase: step.TagAddons, Name: ch.Name, Needs: []string{"node"}, Run: func(ctx context.Context) health.Finding {
			cl, err := api(ctx)
			if err != nil {
				return health.Bad(apply(step.TagK3s), "cannot reach the cluster: %v", err)
			}
			hc, err := cl.Dynamic.Resource(addons.HelmChartGVR).Namespace(addons.ChartNamespace).Get(ctx, ch.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return health.Bad(apply(step.TagAddons), "HelmChart %s is not installed", ch.Name)
			}
			if err != nil {
				return health.Bad(apply(step.TagAddons), "read HelmChart %s: %v", ch.Name, err)
			}
			if got, _, _ := unstructured.NestedString(hc.Object, "spec", "version"); got != ch.Version {
				return health.Bad(apply(step.TagAddons), "%s chart %s in the cluster, mgmt.yaml pins %s", ch.Name, got, ch.Version)
			}
			ok, why, err := (&addons.Ready{V: &addons.VM{}, C: ch}).Observe(ctx, cl)
			if err != nil {
				return health.Bad("fix the cause, then "+apply(step.TagAddons), "%v", err)
			}
			if !ok {
				return health.Bad(apply(step.TagAddons), "%s %s not usable: %s", ch.Name, ch.Version, why)
			}
			return health.Good("chart %s as pinned; Deployment %s/%s Available", ch.Version, ch.TargetNamespace, ch.Deployment)
		}})
	}
	cl := &capi.Cluster{Name: c.Metadata.Name, Config: c, TokenSecret: s.Config.Secrets.Proxmox.TokenSecret}
	checks = append(checks, health.Check{Phase: step.TagCAPI, Name: "proxmox-token", Run: func(ctx context.Context) health.Finding {
		px := c.Spec.Proxmox
		if cl.TokenSecret == "" {
			return health.Bad("write proxmox.tokenSecret to "+s.Config.SecretsPath+" (mode 0600) or set MGMTCTL_PROXMOX_TOKEN_SECRET", "no token secret configured")
		}
		ver, err := capi.CheckToken(ctx, nil, px.APIURL, px.TokenID, cl.TokenSecret, s.Config.SecretSource)
		if err != nil {
			return health.Bad("check the token on the node (pveum user token list) and proxmox.tokenSecret, then "+apply(step.TagCAPI), "%v", err)
		}
		return health.Good("token %s accepted by %s (Proxmox VE %s)", px.TokenID, px.APIURL, ver)
	}})
	for _, p := range cl.Providers() {
		checks = append(checks, health.Check{Phase: step.TagCAPI, Name: "provider-" + p.Kind.Prefix, Needs: []string{"node"}, Run: func(ctx context.Context) health.Finding {
			k, err := api(ctx)
			if err != nil {
				return health.Bad(apply(step.TagK3s), "cannot reach the cluster: %v", err)
			}
			u, err := k.Dynamic.Resource(p.Kind.GVR()).Namespace(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return health.Bad(apply(step.TagCAPI), "%s is not installed", p.Ref())
			}
			if err != nil {
				return health.Bad(apply(step.TagCAPI), "read %s: %v", p.Ref(), err)
			}
			st := capi.ReadStatus(u)
			spec, _, _ := unstructured.NestedString(u.Object, "spec", "version")
			switch {
			case spec != p.Version:
				return health.Bad(apply(step.TagCAPI)+" (one provider at a time, core first: docs/versions.md)", "%s is at %s, mgmt.yaml pins %s", p.Ref(), spec, p.Version)
			case !st.Ready():
				return health.Bad("kubectl -n "+p.Namespace+" describe "+strings.ToLower(p.Kind.Kind)+" "+p.Name+"; docs/troubleshooting.md", "%s not Ready: %s", p.Ref(), st.Summary())
			case st.InstalledVersion != p.Version:
				return health.Bad(apply(step.TagCAPI), "%s installed %s, pinned %s", p.Ref(), st.InstalledVersion, p.Version)
			}
			return health.Good("%s Ready at %s", p.Ref(), p.Version)
		}})
	}
	adminPath := s.Config.KubeconfigPath()
	roPath := s.Config.Env.Expand("~/.kube/" + c.Spec.Inspector.Name + ".kubeconfig")
	checks = append(checks,
		health.Check{Phase: step.TagKubeconfig, Name: "admin-kubeconfig", Needs: []string{"node"}, Run: func(ctx context.Context) health.Finding {
			cs, err := laptopClient(adminPath)
			if err != nil {
				return health.Bad(apply(step.TagKubeconfig), "%v", err)
			}
			ver, err := cs.Discovery().ServerVersion()
			if err != nil {
				return health.Bad("check that the laptop reaches the VM on port 6443", "%s: server not reachable: %v", adminPath, err)
			}
			return health.Good("%s (0600): server answers (Kubernetes %s)", adminPath, ver.GitVersion)
		}},
		health.Check{Phase: step.TagInspector, Name: "inspector-token", Run: func(ctx context.Context) health.Finding {
			b, err := readPrivate(roPath)
			if err != nil {
				return health.Bad(apply(step.TagInspector), "%v", err)
			}
			kc, err := clientcmd.Load(b)
			if err != nil || kc.AuthInfos[c.Spec.Inspector.Name] == nil {
				return health.Bad(apply(step.TagInspector), "%s has no user %s", roPath, c.Spec.Inspector.Name)
			}
			exp, ok := inspector.TokenExpiry(kc.AuthInfos[c.Spec.Inspector.Name].Token)
			if !ok {
				return health.Bad(apply(step.TagInspector), "%s: the token has no expiry", roPath)
			}
			ttl, _ := time.ParseDuration(c.Spec.Inspector.TokenTTL)
			left := time.Until(exp).Round(time.Minute)
			switch {
			case left <= 0:
				return health.Bad(apply(step.TagInspector)+" (mints a new one)", "the inspector token expired %s ago", -left)
			case left < ttl/4:
				return health.Bad(apply(step.TagInspector)+" (mints a new one)", "the inspector token expires in %s, under a quarter of tokenTTL %s", left, ttl)
			}
			return health.Good("%s (0600): token valid for %s more", roPath, left)
		}},
		health.Check{Phase: step.TagInspector, Name: "inspector-permissions", Needs: []string{"node", "inspector-token"}, Run: func(ctx context.Context) health.Finding {
			cs, err := laptopClient(roPath)
			if err != nil {
				return health.Bad(apply(step.TagInspector), "%v", err)
			}
			var wrong []string
			for _, want := range []struct {
				verb, resource string
				allowed        bool
			}{{"list", "pods", true}, {"get", "secrets", false}, {"create", "deployments", false}} {
				r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authzv1.ResourceAttributes{Verb: want.verb, Resource: want.resource, Group: map[string]string{"deployments": "apps"}[want.resource]}}}, metav1.CreateOptions{})
				if err != nil {
					return health.Bad("check that the laptop reaches the VM on port 6443", "SelfSubjectAccessReview: %v", err)
				}
				if r.Status.Allowed != want.allowed {
					wrong = append(wrong, fmt.Sprintf("%s %s allowed=%v", want.verb, want.resource, r.Status.Allowed))
				}
			}
			if len(wrong) > 0 {
				return health.Bad(apply(step.TagInspector), "inspector permissions wrong: %s", strings.Join(wrong, ", "))
			}
			return health.Good("can list pods; cannot get secrets; cannot create")
		}},
	)
	return checks
}

// readPrivate reads a laptop file that must be private (0600).
func readPrivate(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if fi.Mode().Perm() != 0o600 {
		return nil, fmt.Errorf("%s has mode %04o, not 0600", p, fi.Mode().Perm())
	}
	return os.ReadFile(p)
}

// laptopClient is a client from a kubeconfig on the laptop, straight to
// its server, as kubectl would use it.
func laptopClient(p string) (kubernetes.Interface, error) {
	b, err := readPrivate(p)
	if err != nil {
		return nil, err
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	rc.UserAgent, rc.Timeout = "mgmtctl", 15*time.Second
	return kubernetes.NewForConfig(rc)
}
