// Package kubelet is the lab's kubelet, the one simulated part of k3s's
// node (the lab has no container runtime): it registers its server's
// Node, renews the node's Lease, posts its status, and runs the pods the
// scheduler binds to it (kubelet.go, pods.go). What a pod's container does
// is stood in for by its kind:
//
//   - the cluster-api-operator's container is really run: upstream's
//     operator binary (built from its Go module in lab/upstream) as a
//     process on the server, with its container's args and env, the
//     ServiceAccount's projected token and the cluster's CA where a pod
//     finds them, the webhook certificate Secret where its volumeMount
//     puts it; its readiness probe decides the container's readiness, and
//     upstream's controllers take it from there (the Deployment's
//     availability, the webhook Service's EndpointSlice);
//   - a provider's manager (its controllers cannot run here) starts and is
//     ready, except where a fault or CAPMOX's credentials check would keep
//     it down (providers.go);
//   - any other container starts and is ready.
package kubelet

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// Where a pod finds its ServiceAccount (k8s.io/client-go/rest
	// InClusterConfig reads these paths).
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// The kubelet's defaults for a projected token: an hour, refreshed
	// at 80% of its life.
	tokenTTL = 3607 * time.Second
)

// upstreamImages are the images whose containers run upstream's own
// binary, built from its Go module (make build puts each in the lab's
// bin/ as <name>-<tag>): the image's repository names the build.
var upstreamImages = map[string]string{
	"registry.k8s.io/capi-operator/cluster-api-operator": "cluster-api-operator",
	"quay.io/jetstack/cert-manager-controller":           "cert-manager-controller",
	"quay.io/jetstack/cert-manager-webhook":              "cert-manager-webhook",
	"quay.io/jetstack/cert-manager-cainjector":           "cert-manager-cainjector",
	"quay.io/jetstack/cert-manager-startupapicheck":      "cert-manager-startupapicheck",
}

// splitImage is an image's repository and tag.
func splitImage(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

// isUpstream tells whether the image's container is upstream's binary.
func isUpstream(image string) bool {
	repo, _ := splitImage(image)
	_, ok := upstreamImages[repo]
	return ok
}

// logf writes a line to the server's log as k3s logs, from the kubelet.
func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), "kubelet: "+fmt.Sprintf(format, args...))
	}
}

// process is one run of a container: upstream's binary (cmd), or
// klipper-helm's work in a goroutine (code, set before done closes).
type process struct {
	cmd  *exec.Cmd
	code int32
	done chan struct{}
	stop context.CancelFunc
}

// kill stops the process and waits for it.
func (p *process) kill() {
	p.stop()
	<-p.done
}

// runBinary starts a container of upstream's binary, notices its exit
// (restarted with back-off, or the pod done, by its restartPolicy) and
// probes its readiness.
func (k *Kubelet) runBinary(ctx context.Context, p *corev1.Pod, st *podState, now time.Time) {
	ctr := p.Spec.Containers[0]
	if st.proc != nil {
		select {
		case <-st.proc.done:
			ps := st.proc.cmd.ProcessState
			st.proc = nil
			code := int32(1)
			if ps != nil {
				code = int32(ps.ExitCode())
			}
			switch policy := p.Spec.RestartPolicy; {
			case code == 0 && policy != corev1.RestartPolicyAlways:
				st.complete(now)
				k.logf("%s in %s/%s completed", ctr.Name, p.Namespace, p.Name)
			case code != 0 && policy == corev1.RestartPolicyNever:
				st.fail(now, code)
				k.logf("%s in %s/%s failed (%v)", ctr.Name, p.Namespace, p.Name, ps)
			default:
				st.exit(now, code, "")
				k.logf("%s in %s/%s exited (%v); back-off until %s", ctr.Name, p.Namespace, p.Name, ps, st.next.Format(time.RFC3339))
			}
		default:
			if !st.ready && k.ready(ctx, p, st) {
				st.ready = true
				k.logf("%s in %s/%s ready", ctr.Name, p.Namespace, p.Name)
			}
		}
		return
	}
	if st.done != nil || now.Before(st.next) {
		return
	}
	proc, reason, err := k.startBinary(ctx, p, st)
	if err != nil {
		// Not started: the reason is the kubelet's (a volume not
		// mountable yet, an image not pulled); it tries again.
		st.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
		st.next = now.Add(10 * time.Second)
		k.logf("start %s in %s/%s: %v", ctr.Name, p.Namespace, p.Name, err)
		return
	}
	st.proc = proc
}

// binary is upstream's build for the container's image.
func (k *Kubelet) binary(image string) (string, error) {
	repo, tag := splitImage(image)
	name, ok := upstreamImages[repo]
	if !ok {
		return "", fmt.Errorf("failed to pull image %q: the lab builds no binary for it", image)
	}
	p := filepath.Join(k.LabDir, "bin", name+"-"+tag)
	if _, err := os.Stat(p); err != nil {
		// What a kubelet reports for an image no registry has.
		return "", fmt.Errorf("failed to pull image %q: not found (the lab has no %s)", image, p)
	}
	return p, nil
}

// bindScript runs a container's process in a mount namespace of its own
// with each volume bound at its mountPath: "$@" is pairs of directory
// and mountPath, "--", then the command. Every value is an argument, none
// is read by the shell as code.
const bindScript = `while [ "$1" != -- ]; do mkdir -p "$2" && mount --bind "$1" "$2" || exit 1; shift 2; done; shift; exec "$@"`

// startBinary lays out the pod's volumes and starts its container; a
// failure comes with the waiting reason a kubelet gives.
func (k *Kubelet) startBinary(ctx context.Context, p *corev1.Pod, st *podState) (*process, string, error) {
	spec := p.Spec
	ctr := spec.Containers[0]
	bin, err := k.binary(ctr.Image)
	if err != nil {
		return nil, "ErrImagePull", err
	}
	binds, tokens, err := k.volumes(ctx, p, ctr)
	if err != nil {
		// A Secret not there yet keeps the pod in ContainerCreating,
		// as the kubelet waits for a secret volume.
		return nil, "ContainerCreating", err
	}
	home := "/var/lib/lab-pods/" + p.Namespace + "_" + p.Name
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		// No kube-proxy routes the kubernetes Service here: the pod
		// reaches this server's API server, whose certificate names
		// the node IP.
		"KUBERNETES_SERVICE_HOST=" + k.IP, "KUBERNETES_SERVICE_PORT=6443",
		// clusterctl's library then reads releases through GitHub's API
		// rather than a Go module proxy (repository_github.go), which
		// the lab does not impersonate.
		"GOPROXY=off",
	}
	vars := k.containerEnv(p, st, ctr)
	for _, e := range ctr.Env {
		env = append(env, e.Name+"="+vars[e.Name])
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, "RunContainerError", err
	}
	// Where the kubelet keeps a container's log: one file per start.
	logFile, err := k.openLog(p, ctr.Name, st)
	if err != nil {
		return nil, "RunContainerError", err
	}
	cw := &criWriter{f: logFile}
	stdout, stderr := cw.stream("stdout"), cw.stream("stderr")
	cctx, cancel := context.WithCancel(context.Background())
	argv := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", bindScript, "sh"}
	for _, b := range binds {
		argv = append(argv, b.dir, b.mountPath)
	}
	argv = append(append(argv, "--", bin), expandArgs(ctr.Command[min(1, len(ctr.Command)):], vars)...)
	argv = append(argv, expandArgs(ctr.Args, vars)...)
	if k.Net != nil && !p.Spec.HostNetwork {
		// In the pod's network namespace, as the container joins its
		// sandbox's.
		argv = append([]string{"nsenter", "--net=" + k.Net.Path(string(p.UID)), "--"}, argv...)
	}
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdout, stderr
	// The container dies with k3s (a stopped VM's processes all go).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	cmd.WaitDelay = grace
	closeLog := func() {
		stdout.Close()
		stderr.Close()
		cw.wait()
		logFile.Close()
	}
	if err := cmd.Start(); err != nil {
		cancel()
		closeLog()
		return nil, "RunContainerError", err
	}
	proc := &process{cmd: cmd, done: make(chan struct{}), stop: cancel}
	go func() {
		_ = cmd.Wait()
		closeLog()
		close(proc.done)
	}()
	st.start(time.Now())
	k.logf("started %s %s (pid %d) in %s/%s: %s %s", ctr.Name, ctr.Image, cmd.Process.Pid, p.Namespace, p.Name, filepath.Base(bin), strings.Join(ctr.Args, " "))
	for _, t := range tokens {
		go k.refreshToken(cctx, p, t.sa, t.dir)
	}
	return proc, "", nil
}

// writeToken puts a fresh token for the ServiceAccount, bound to the pod,
// the CA and the namespace in dir, as a pod's projected volume has them.
func (k *Kubelet) writeToken(ctx context.Context, p *corev1.Pod, sa, dir string) error {
	exp := int64(tokenTTL / time.Second)
	tr, err := k.CS.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", p.Namespace, sa, err)
	}
	return writeDir(dir, map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": k.CA, "namespace": []byte(p.Namespace)})
}

func (k *Kubelet) refreshToken(ctx context.Context, p *corev1.Pod, sa, dir string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tokenTTL * 8 / 10):
		}
		if err := k.writeToken(ctx, p, sa, dir); err != nil {
			k.logf("%v", err)
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
