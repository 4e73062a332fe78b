package kubelet

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// configDir is where klipper-helm reads its values files: helm-
// controller mounts the values volume there (chart.go, setValuesSecret).
const configDir = "/config"

// runHelm runs a klipper-helm container: one run of the Job's helm work
// (klipperhelm.Runner) stands for the container's process. It exits 0 and
// the pod has Succeeded (restartPolicy OnFailure), or it exits 1 and is
// restarted with the kubelet's back-off, as the Job's pod of a failing
// install is on k3s.
func (k *Kubelet) runHelm(ctx context.Context, p *corev1.Pod, st *podState, now time.Time) {
	if st.proc != nil {
		select {
		case <-st.proc.done:
			code := st.proc.code
			st.proc = nil
			if code == 0 {
				st.complete(now)
				k.logf("helm in %s/%s completed", p.Namespace, p.Name)
				return
			}
			st.exit(now, code, "")
			simkube.Event(ctx, k.CS, corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, Namespace: p.Namespace, UID: p.UID,
				FieldPath: "spec.containers{" + p.Spec.Containers[0].Name + "}"}, "kubelet", corev1.EventTypeWarning, "BackOff",
				fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", p.Spec.Containers[0].Name, p.Name, p.Namespace, p.UID))
			k.logf("helm in %s/%s exited %d; back-off until %s", p.Namespace, p.Name, code, st.next.Format(time.RFC3339))
		default:
		}
		return
	}
	if st.done != nil || now.Before(st.next) {
		return
	}
	if k.Helm == nil {
		st.waiting = &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "the lab's kubelet runs no klipper-helm here"}
		return
	}
	ctr := p.Spec.Containers[0]
	values, err := k.volumeFiles(ctx, p, ctr, configDir)
	if err != nil {
		// A volume not mountable yet: the pod stays ContainerCreating
		// and the kubelet tries again.
		st.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		st.next = now.Add(2 * time.Second)
		k.logf("mount volumes of %s/%s: %v", p.Namespace, p.Name, err)
		return
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	// The container's credentials: its ServiceAccount's projected token
	// (helm-controller binds helm-<name> to its job ClusterRole), read
	// by helm as in-cluster config.
	tokenFile, err := k.apiAccess(ctx, p)
	if err != nil {
		st.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		st.next = now.Add(2 * time.Second)
		k.logf("mount volumes of %s/%s: %v", p.Namespace, p.Name, err)
		return
	}
	logFile, err := k.openLog(p, ctr.Name, st)
	if err != nil {
		st.waiting = &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		return
	}
	cctx, cancel := context.WithCancel(context.Background())
	proc := &process{done: make(chan struct{}), stop: cancel}
	job := klipperhelm.Job{Env: env, Args: ctr.Args, Values: values, Kube: k.podConfig(tokenFile)}
	go func() {
		defer close(proc.done)
		cw := &criWriter{f: logFile}
		stdout, stderr := cw.stream("stdout"), cw.stream("stderr")
		out, err := k.Helm.Run(cctx, job)
		_, _ = io.WriteString(stdout, out)
		proc.code = 0
		if err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			proc.code = 1
		}
		stdout.Close()
		stderr.Close()
		cw.wait()
		logFile.Close()
	}()
	st.proc = proc
	st.start(now)
	k.logf("started helm %s in %s/%s: %s", ctr.Image, p.Namespace, p.Name, strings.Join(ctr.Args, " "))
}

// volumeFiles are the files of the volume ctr mounts at dir, as the
// kubelet lays out a Secret or projected Secret volume: each item's key
// at its path, or every key under its own name; in name order.
func (k *Kubelet) volumeFiles(ctx context.Context, p *corev1.Pod, ctr corev1.Container, dir string) ([]klipperhelm.File, error) {
	var vol *corev1.Volume
	for _, m := range ctr.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for i := range p.Spec.Volumes {
			if p.Spec.Volumes[i].Name == m.Name {
				vol = &p.Spec.Volumes[i]
			}
		}
	}
	if vol == nil {
		return nil, nil
	}
	type source struct {
		name     string
		items    []corev1.KeyToPath
		optional bool
	}
	var sources []source
	switch {
	case vol.Secret != nil:
		sources = append(sources, source{vol.Secret.SecretName, vol.Secret.Items, vol.Secret.Optional != nil && *vol.Secret.Optional})
	case vol.Projected != nil:
		for _, s := range vol.Projected.Sources {
			if s.Secret != nil {
				sources = append(sources, source{s.Secret.Name, s.Secret.Items, s.Secret.Optional != nil && *s.Secret.Optional})
			}
		}
	}
	var files []klipperhelm.File
	for _, s := range sources {
		sec, err := k.CS.CoreV1().Secrets(p.Namespace).Get(ctx, s.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && s.optional {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
		}
		named, err := items(sec.Data, s.items, "secret")
		if err != nil {
			return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
		}
		for name, data := range named {
			files = append(files, klipperhelm.File{Name: name, Data: data})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}
