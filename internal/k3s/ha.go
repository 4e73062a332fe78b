package k3s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"text/template"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Paths of a cluster of servers (docs.k3s.io installation/configuration,
// datastore/ha-embedded, installation/packaged-components).
const (
	// ServerTokenPath is where a k3s server keeps the cluster token.
	ServerTokenPath = "/var/lib/rancher/k3s/server/token"
	// TokenPath is the file a joining server reads the token from
	// (token-file in config.yaml): a file, so config.yaml carries no
	// secret and its diff can be shown.
	TokenPath = "/etc/rancher/k3s/cluster-token"
	// KubeVIPPath is kube-vip's manifest among k3s's auto-deployed ones.
	KubeVIPPath = "/var/lib/rancher/k3s/server/manifests/kube-vip.yaml"
	// KubeVIPLease is the Lease kube-vip's control-plane election holds
	// (vip_leasename's default).
	KubeVIPLease = "plndr-cp-lock"
)

// ClusterToken puts the cluster token, read from the first server, into
// TokenPath on a server that joins it. The token is a secret: it is
// registered with the run's redactor, never shown in a plan or a diff,
// and written mode 0600 owned by root.
type ClusterToken struct {
	V *VM
	// Seed is the server whose token the cluster has: the one that
	// initialised it, as the run found it.
	Seed func() *VM
	// Redact registers the token with the run's redactor.
	Redact func(values ...string)
}

var _ step.Step = (*ClusterToken)(nil)

// ID implements step.Step.
func (s *ClusterToken) ID() string { return "cluster-token" }

// Host implements step.Step.
func (s *ClusterToken) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *ClusterToken) Check(ctx context.Context) (step.Plan, error) {
	first := s.Seed()
	if first == s.V {
		return step.Plan{Note: "this server initialises the cluster: k3s makes its token here"}, nil
	}
	var token []byte
	if first.Host != nil {
		b, err := first.Host.ReadFile(ctx, ServerTokenPath, true)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return step.Plan{}, fmt.Errorf("read the cluster token on %s: %w", first.Name(), err)
		}
		token = bytes.TrimSpace(b)
	}
	if len(token) > 0 && s.Redact != nil {
		s.Redact(string(token))
	}
	cur, action, err := s.V.current(ctx, TokenPath)
	if err != nil {
		return step.Plan{}, err
	}
	if len(token) > 0 && bytes.Equal(bytes.TrimSpace(cur), token) {
		return step.Plan{Note: TokenPath + " holds the cluster token"}, nil
	}
	c := step.Change{Target: TokenPath, Action: action,
		Summary: fmt.Sprintf("%s %s with the cluster token of %s", action, TokenPath, first.Name())}
	if len(token) > 0 {
		c.Effects = []effect.Effect{s.V.write(remote.File{Path: TokenPath, Content: append(token, '\n'), Mode: 0o600, Owner: "root:root", Sudo: true})}
	} else {
		c.Summary += ", once k3s runs there"
	}
	return step.Plan{Changes: []step.Change{c}}, nil
}

// JoinsCluster says a config.yaml makes its server join a cluster
// (server:) rather than initialise one.
func JoinsCluster(config []byte) bool {
	for _, line := range strings.Split(string(config), "\n") {
		if strings.HasPrefix(line, "server:") {
			return true
		}
	}
	return false
}

// KubeVIPSpec is kube-vip's part of mgmt.yaml.
type KubeVIPSpec struct {
	Address        netip.Addr
	Interface      string
	Image, Version string
}

var kubeVIPTemplate = template.Must(template.New("kube-vip").Parse(`# Managed by mgmtctl: changes are overwritten on the next apply.
# kube-vip {{.Version}} in ARP mode with control-plane leader election, as
# "kube-vip manifest daemonset --inCluster --taint --controlplane --arp
# --leaderElection" writes it, with its RBAC (kube-vip.io/manifests/rbac.yaml).
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-vip
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:kube-vip-role
rules:
  - apiGroups: [""]
    resources: ["services/status"]
    verbs: ["update"]
  - apiGroups: [""]
    resources: ["services", "endpoints"]
    verbs: ["list", "get", "watch", "update"]
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["list", "get", "watch", "update", "patch"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["list", "get", "watch", "update", "create"]
  - apiGroups: ["discovery.k8s.io"]
    resources: ["endpointslices"]
    verbs: ["list", "get", "watch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:kube-vip-binding
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kube-vip-role
subjects:
  - kind: ServiceAccount
    name: kube-vip
    namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-vip-ds
  namespace: kube-system
  labels:
    app.kubernetes.io/name: kube-vip-ds
    app.kubernetes.io/version: {{.Version}}
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: kube-vip-ds
  template:
    metadata:
      labels:
        app.kubernetes.io/name: kube-vip-ds
        app.kubernetes.io/version: {{.Version}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - key: node-role.kubernetes.io/control-plane
                    operator: Exists
      containers:
        - name: kube-vip
          image: {{.Image}}:{{.Version}}
          imagePullPolicy: IfNotPresent
          args: ["manager"]
          env:
            - {name: vip_arp, value: "true"}
            - {name: port, value: "6443"}
            - name: vip_nodename
              valueFrom:
                fieldRef: {fieldPath: spec.nodeName}
            - {name: vip_interface, value: {{.Interface}}}
            - {name: vip_cidr, value: "32"}
            - {name: cp_enable, value: "true"}
            - {name: cp_namespace, value: kube-system}
            - {name: vip_leaderelection, value: "true"}
            - {name: vip_leasename, value: plndr-cp-lock}
            - {name: vip_leaseduration, value: "5"}
            - {name: vip_renewdeadline, value: "3"}
            - {name: vip_retryperiod, value: "1"}
            - {name: address, value: "{{.Address}}"}
          securityContext:
            capabilities:
              add: ["NET_ADMIN", "NET_RAW"]
      hostNetwork: true
      serviceAccountName: kube-vip
      tolerations:
        - {effect: NoSchedule, operator: Exists}
        - {effect: NoExecute, operator: Exists}
`))

// KubeVIPDaemonSet is the name of kube-vip's DaemonSet in kube-system (its
// manifest, KubeVIPManifest).
const KubeVIPDaemonSet = "kube-vip-ds"

// KubeVIPManifest renders kube-vip's manifest for k3s to deploy.
func KubeVIPManifest(s KubeVIPSpec) []byte {
	var b bytes.Buffer
	if err := kubeVIPTemplate.Execute(&b, s); err != nil {
		panic(err) // the template and its input are both ours
	}
	return b.Bytes()
}

// KubeVIP writes kube-vip's manifest into k3s's manifests directory on a
// server, before k3s is installed there, so k3s deploys it as it starts.
// Every server has it: a server that restarts keeps deploying it.
type KubeVIP struct {
	V        *VM
	Manifest []byte
}

var _ step.Step = (*KubeVIP)(nil)

// ID implements step.Step.
func (s *KubeVIP) ID() string { return "kube-vip" }

// Independent implements step.Independent: its Check reads the manifest file on the VM,
// nothing an earlier step left.
func (s *KubeVIP) Independent() {}

// Host implements step.Step.
func (s *KubeVIP) Host() string { return s.V.Name() }

// Check implements step.Step.
func (s *KubeVIP) Check(ctx context.Context) (step.Plan, error) {
	return s.V.filePlan(ctx, KubeVIPPath, s.Manifest)
}

// APIAddressTimeout is the default bound of the wait for the VIP.
const APIAddressTimeout = 2 * time.Minute

// APIAddress waits until the cluster's API answers at its VIP: kube-vip
// runs, one server holds its lease and has the address. It dials from the
// first server's VM, the way every other call to the cluster goes.
type APIAddress struct {
	V    *VM
	Addr netip.Addr
	API  func(ctx context.Context) (*kube.Reader, error)
	// Timeout bounds the wait; zero means APIAddressTimeout.
	Timeout time.Duration
}

var _ step.Waiter = (*APIAddress)(nil)

// ID implements step.Step.
func (s *APIAddress) ID() string { return "api-vip" }

// Host implements step.Step.
func (s *APIAddress) Host() string { return s.V.Name() }

// Check implements step.Step: who holds the VIP is observed, never set.
func (s *APIAddress) Check(ctx context.Context) (step.Plan, error) {
	holder, err := s.holder(ctx)
	if err != nil {
		// Who holds the VIP is only told: a lease that cannot be read
		// is said, not taken for an answer.
		return step.Plan{Note: fmt.Sprintf("kube-vip's lease %s not read: %v", KubeVIPLease, err)}, nil
	}
	if holder == "" {
		return step.Plan{Note: "the API answers at " + s.Addr.String()}, nil
	}
	return step.Plan{Note: fmt.Sprintf("the API answers at %s, held by %s", s.Addr, holder)}, nil
}

// holder is the current holder of kube-vip's lease, "" before there is one.
func (s *APIAddress) holder(ctx context.Context) (string, error) {
	cl, err := s.API(ctx)
	if err != nil || cl == nil {
		return "", err
	}
	l, err := cl.Leases("kube-system").Get(ctx, KubeVIPLease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return leaseHolder(l), nil
}

func leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Observe implements step.Waiter.
func (s *APIAddress) Observe(ctx context.Context) (bool, string, error) {
	if s.V.Host == nil || s.V.Installed == "" {
		return false, "k3s is not installed yet", nil
	}
	if err := s.dial(ctx); err != nil {
		return false, fmt.Sprintf("nothing answers at %s yet (%v)", net.JoinHostPort(s.Addr.String(), "6443"), err), nil
	}
	return true, "", nil
}

func (s *APIAddress) dial(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return s.V.Host.Probe(dctx, netip.AddrPortFrom(s.Addr, 6443))
}

// Bound implements step.Waiter.
func (s *APIAddress) Bound() time.Duration {
	if s.Timeout <= 0 {
		return APIAddressTimeout
	}
	return s.Timeout
}

// Wait implements step.Waiter: it watches kube-vip's lease until a server
// holds it and the address answers.
func (s *APIAddress) Wait(ctx context.Context) error {
	cl, err := s.API(ctx)
	if err != nil {
		return fmt.Errorf("reach the API of k3s: %w", err)
	}
	if cl == nil {
		return fmt.Errorf("%s does not exist: is k3s installed?", KubeconfigPath)
	}
	step.Progress(ctx, "waiting for kube-vip to bring up "+s.Addr.String())
	leases := cl.Leases("kube-system")
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", KubeVIPLease).String()}
	last := "no server holds kube-vip's lease " + KubeVIPLease + " yet"
	err = kube.Until(ctx, []kube.WatchFunc{func(ctx context.Context) (watch.Interface, error) { return leases.Watch(ctx, sel) }},
		func(ctx context.Context) (bool, error) {
			l, err := leases.Get(ctx, KubeVIPLease, metav1.GetOptions{})
			if err != nil {
				// Not there yet, or the API between two servers: the
				// next event looks again, and the deadline says this.
				last = "read kube-vip's lease " + KubeVIPLease + ": " + err.Error()
				return false, nil
			}
			if leaseHolder(l) == "" {
				return false, nil
			}
			// The holder adds the address as it takes the lease: a
			// dial that fails now is retried at the lease's next renewal.
			if err := s.dial(ctx); err != nil {
				last = fmt.Sprintf("%s holds the lease but %s does not answer (%v)", leaseHolder(l), s.Addr, err)
				return false, nil
			}
			return true, nil
		})
	if err != nil && ctx.Err() != nil {
		return step.Timeout(s.Bound(), ctx.Err(), "the API does not answer at %s after %s: %s (kube-vip's pods log why: kubectl -n kube-system logs ds/kube-vip-ds)", s.Addr, s.Bound(), last)
	}
	return err
}
