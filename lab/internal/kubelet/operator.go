// Package kubelet stands in for the kubelet (and the deployment
// controller's status) for the pods of a management cluster, since the lab
// has neither container runtime nor kubelet:
//
//   - the cluster-api-operator's pod is really run: upstream's operator
//     binary (built from its Go module in lab/upstream) as a process on the
//     server, with its container's args and env, the ServiceAccount's
//     projected token and the cluster's CA where a pod finds them, the
//     webhook certificate Secret where its volumeMount puts it; its
//     readiness probe decides the Deployment's availability and its
//     webhook Service's EndpointSlice, as the endpoint-slice controller
//     would;
//   - the providers' pods (their controllers cannot run here) start and
//     become Available, except where a fault or CAPMOX's credentials check
//     would keep them down (providers.go).
package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mgmtctl/mgmtctl/lab/internal/helmctl"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// Names the operator's chart gives its pod's pieces
// (hack/charts/cluster-api-operator of cluster-api-operator v0.28.0).
const (
	OperatorSelector = "clusterctl.cluster.x-k8s.io/core=capi-operator"
	// Where a pod finds its ServiceAccount (k8s.io/client-go/rest
	// InClusterConfig reads these paths).
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// The kubelet's defaults for a projected token: an hour, refreshed
	// at 80% of its life.
	tokenTTL = 3607 * time.Second
)

// Operator runs the operator's pod on this server while it leads.
type Operator struct {
	CS kubernetes.Interface
	// LabDir holds bin/cluster-api-operator-<version>, one per released
	// image tag.
	LabDir string
	NodeIP string
	// CA is the cluster's CA, the pod's ca.crt.
	CA  []byte
	Log io.Writer

	mu      sync.Mutex
	running *container
	restart int // restarts since the pod template last changed
	next    time.Time
}

// container is one run of the operator's process.
type container struct {
	key   string // the pod template it runs
	cmd   *exec.Cmd
	done  chan struct{}
	ready bool
	stop  context.CancelFunc
}

func (o *Operator) logf(format string, args ...any) { logf(o.Log, format, args...) }

// logf writes a line to the server's log as k3s logs, from the kubelet.
func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), "kubelet: "+fmt.Sprintf(format, args...))
	}
}

// Run keeps the operator's pod running as its Deployment says until ctx
// ends, then stops it.
func (o *Operator) Run(ctx context.Context) {
	defer o.kill()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		o.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (o *Operator) deployment(ctx context.Context) (*appsv1.Deployment, error) {
	list, err := o.CS.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: OperatorSelector})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// key is what makes a new pod: the template's container, its env and
// ServiceAccount.
func key(d *appsv1.Deployment) string {
	h := sha256.New()
	spec := d.Spec.Template.Spec
	fmt.Fprintln(h, d.Namespace, spec.ServiceAccountName)
	for _, c := range spec.Containers {
		fmt.Fprintln(h, c.Image, strings.Join(c.Command, " "), strings.Join(c.Args, " "))
		for _, e := range c.Env {
			fmt.Fprintln(h, e.Name, e.Value)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (o *Operator) sync(ctx context.Context) {
	d, err := o.deployment(ctx)
	if err != nil {
		return
	}
	o.mu.Lock()
	c := o.running
	o.mu.Unlock()
	if d == nil || len(d.Spec.Template.Spec.Containers) == 0 {
		o.kill()
		return
	}
	k := key(d)
	if c != nil && c.key != k {
		o.logf("pod template of %s/%s changed: stopping the operator", d.Namespace, d.Name)
		o.kill()
		o.mu.Lock()
		o.restart, o.next = 0, time.Time{}
		o.mu.Unlock()
		c = nil
	}
	if c != nil {
		select {
		case <-c.done:
			// Exited: CrashLoopBackOff, 10 s doubling to 5 min.
			o.mu.Lock()
			o.running = nil
			o.restart++
			o.next = time.Now().Add(min(10*time.Second<<min(o.restart-1, 5), 5*time.Minute))
			o.mu.Unlock()
			o.logf("operator exited (%v); back-off until %s", c.cmd.ProcessState, o.next.Format(time.RFC3339))
			o.setAvailable(ctx, d, false, "")
			return
		default:
		}
		if !c.ready && probe(ctx, healthPort(d)) {
			c.ready = true
			o.logf("operator ready")
		}
		if c.ready {
			if err := o.publishEndpoints(ctx, d.Namespace); err != nil {
				o.logf("webhook endpoints: %v", err)
			}
		}
		o.setAvailable(ctx, d, c.ready, "")
		return
	}
	o.mu.Lock()
	wait := time.Until(o.next)
	o.mu.Unlock()
	if wait > 0 {
		return
	}
	if err := o.start(ctx, d, k); err != nil {
		o.logf("start operator: %v", err)
		o.setAvailable(ctx, d, false, "")
		o.mu.Lock()
		o.next = time.Now().Add(10 * time.Second)
		o.mu.Unlock()
	}
}

func (o *Operator) setAvailable(ctx context.Context, d *appsv1.Deployment, ok bool, msg string) {
	if err := simkube.WriteDeploymentStatus(ctx, o.CS, d, simkube.Availability{Available: ok, Message: msg}); err != nil {
		o.logf("%v", err)
	}
}

// binary is the operator build for the container's image tag.
func (o *Operator) binary(image string) (string, error) {
	i := strings.LastIndex(image, ":")
	if i < 0 {
		return "", fmt.Errorf("image %s has no tag", image)
	}
	p := filepath.Join(o.LabDir, "bin", "cluster-api-operator-"+image[i+1:])
	if _, err := os.Stat(p); err != nil {
		// What a kubelet reports for an image no registry has.
		return "", fmt.Errorf("ErrImagePull: failed to pull image %q: not found (the lab has no %s)", image, p)
	}
	return p, nil
}

// start writes what the pod's volumes hold and starts the container.
func (o *Operator) start(ctx context.Context, d *appsv1.Deployment, k string) error {
	spec := d.Spec.Template.Spec
	ctr := spec.Containers[0]
	bin, err := o.binary(ctr.Image)
	if err != nil {
		return err
	}
	// The webhook certificate: a missing Secret keeps the pod in
	// ContainerCreating, as the kubelet waits for a secret volume.
	for _, vm := range ctr.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			sec, err := o.CS.CoreV1().Secrets(d.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", v.Name, err)
			}
			if err := writeDir(vm.MountPath, sec.Data); err != nil {
				return err
			}
		}
	}
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	if err := o.writeToken(ctx, d.Namespace, sa); err != nil {
		return err
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/var/lib/lab-pods/" + d.Name,
		// No kube-proxy routes the kubernetes Service here: the pod
		// reaches this server's API server, whose certificate names
		// the node IP.
		"KUBERNETES_SERVICE_HOST=" + o.NodeIP, "KUBERNETES_SERVICE_PORT=6443",
		// clusterctl's library then reads releases through GitHub's API
		// rather than a Go module proxy (repository_github.go), which
		// the lab does not impersonate.
		"GOPROXY=off",
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if err := os.MkdirAll("/var/lib/lab-pods/"+d.Name, 0o700); err != nil {
		return err
	}
	logDir := filepath.Join("/var/log/pods", d.Namespace+"_"+d.Name, ctr.Name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "0.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(cctx, bin, ctr.Args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	// The container dies with k3s (a stopped VM's processes all go).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second // terminationGracePeriodSeconds
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		return err
	}
	c := &container{key: k, cmd: cmd, done: make(chan struct{}), stop: cancel}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	o.mu.Lock()
	o.running = c
	o.mu.Unlock()
	o.logf("started operator %s (pid %d) for %s/%s: %s %s", ctr.Image, cmd.Process.Pid, d.Namespace, d.Name, filepath.Base(bin), strings.Join(ctr.Args, " "))
	go o.refreshToken(cctx, d.Namespace, sa)
	return nil
}

// Stop stops the operator's container, if it runs, and waits for it.
func (o *Operator) Stop() { o.kill() }

// kill stops the running container, if any, and waits for it.
func (o *Operator) kill() {
	o.mu.Lock()
	c := o.running
	o.running = nil
	o.mu.Unlock()
	if c == nil {
		return
	}
	c.stop()
	<-c.done
	o.logf("operator stopped")
}

// writeToken puts a fresh token for the ServiceAccount, the CA and the
// namespace where a pod's projected volume has them.
func (o *Operator) writeToken(ctx context.Context, ns, sa string) error {
	exp := int64(tokenTTL / time.Second)
	tr, err := o.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, sa, err)
	}
	return writeDir(saDir, map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": o.CA, "namespace": []byte(ns)})
}

func (o *Operator) refreshToken(ctx context.Context, ns, sa string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tokenTTL * 8 / 10):
		}
		if err := o.writeToken(ctx, ns, sa); err != nil {
			o.logf("%v", err)
		}
	}
}

// writeDir replaces dir's files with files, each written whole (the
// kubelet's atomic writer swaps a directory; a rename per file is enough
// for readers that reopen a file).
func writeDir(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		tmp := filepath.Join(dir, "."+n+".tmp")
		if err := os.WriteFile(tmp, files[n], 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// healthPort is the readiness probe's port (the chart's healthAddr),
// the manager's default 9440 without one.
func healthPort(d *appsv1.Deployment) int {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			return c.ReadinessProbe.HTTPGet.Port.IntValue()
		}
	}
	return 9440
}

// probe is the readiness probe: GET /readyz answers 200.
func probe(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// publishEndpoints points the webhook Service's EndpointSlice at this
// server, as the endpoint-slice controller does for a ready pod (and
// moves it when the pod moves to another server).
func (o *Operator) publishEndpoints(ctx context.Context, ns string) error {
	ready, name, tcp, port := true, "", corev1.ProtocolTCP, int32(helmctl.WebhookPort)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: helmctl.WebhookService + "-lab", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: helmctl.WebhookService, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{o.NodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}},
	}
	slices := o.CS.DiscoveryV1().EndpointSlices(ns)
	cur, err := slices.Get(ctx, es.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = slices.Create(ctx, es, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if len(cur.Endpoints) == 1 && len(cur.Endpoints[0].Addresses) == 1 && cur.Endpoints[0].Addresses[0] == o.NodeIP {
		return nil
	}
	cur.Endpoints = es.Endpoints
	_, err = slices.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}
