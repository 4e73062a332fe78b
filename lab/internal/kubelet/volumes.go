package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// bind is a volume's directory and where the container sees it.
type bind struct{ dir, mountPath string }

// tokenVolume is a projected ServiceAccount token to keep fresh.
type tokenVolume struct{ sa, dir string }

// volumes lays out, under the pod's directory as the kubelet keeps them
// (/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~<type>/<name>), the
// volumes ctr mounts: a Secret's or ConfigMap's keys (or its items) as
// files, an emptyDir, and the projected kube-api-access volume the
// ServiceAccount admission plugin adds (a token bound to the pod, the
// cluster's CA, the namespace). A Secret or ConfigMap that is not there
// (and not optional) is an error: the container waits.
func (k *Kubelet) volumes(ctx context.Context, p *corev1.Pod, ctr corev1.Container) ([]bind, []tokenVolume, error) {
	var binds []bind
	var tokens []tokenVolume
	for _, m := range ctr.VolumeMounts {
		var vol *corev1.Volume
		for i := range p.Spec.Volumes {
			if p.Spec.Volumes[i].Name == m.Name {
				vol = &p.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, nil, fmt.Errorf("volume %q of mount %s not in the pod", m.Name, m.MountPath)
		}
		dir := func(kind string) string {
			return filepath.Join(k.podDir(), string(p.UID), "volumes", "kubernetes.io~"+kind, vol.Name)
		}
		var d string
		switch {
		case vol.Secret != nil:
			d = dir("secret")
			sec, err := k.CS.CoreV1().Secrets(p.Namespace).Get(ctx, vol.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				if vol.Secret.Optional != nil && *vol.Secret.Optional {
					sec = &corev1.Secret{}
				} else {
					return nil, nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
				}
			}
			files, err := items(sec.Data, vol.Secret.Items, "secret")
			if err != nil {
				return nil, nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
			}
			if err := writeDir(d, files); err != nil {
				return nil, nil, err
			}
		case vol.ConfigMap != nil:
			d = dir("configmap")
			cm, err := k.CS.CoreV1().ConfigMaps(p.Namespace).Get(ctx, vol.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if vol.ConfigMap.Optional != nil && *vol.ConfigMap.Optional {
					cm = &corev1.ConfigMap{}
				} else {
					return nil, nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
				}
			}
			data := map[string][]byte{}
			for key, v := range cm.Data {
				data[key] = []byte(v)
			}
			files, err := items(data, vol.ConfigMap.Items, "config")
			if err != nil {
				return nil, nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
			}
			if err := writeDir(d, files); err != nil {
				return nil, nil, err
			}
		case vol.Projected != nil && serviceAccountToken(vol.Projected):
			d = dir("projected")
			sa := serviceAccount(p)
			if err := k.writeToken(ctx, p, sa, d); err != nil {
				return nil, nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", vol.Name, err)
			}
			tokens = append(tokens, tokenVolume{sa, d})
		case vol.EmptyDir != nil:
			d = dir("empty-dir")
			if err := writeDir(d, nil); err != nil {
				return nil, nil, err
			}
		default:
			return nil, nil, fmt.Errorf("volume %q: the lab's kubelet mounts Secret, ConfigMap, emptyDir and ServiceAccount token volumes only", vol.Name)
		}
		if m.SubPath != "" {
			d = filepath.Join(d, m.SubPath)
		}
		binds = append(binds, bind{d, m.MountPath})
	}
	return binds, tokens, nil
}

// serviceAccount is the pod's ServiceAccount: "default" when it names
// none, as the ServiceAccount admission plugin sets it.
func serviceAccount(p *corev1.Pod) string {
	if p.Spec.ServiceAccountName == "" {
		return "default"
	}
	return p.Spec.ServiceAccountName
}

// apiAccess writes, where the kubelet keeps a pod's volumes, the token
// volume a container reads in-cluster config from (for the stand-ins that
// run in the kubelet, not in a container of their own: kube-vip's
// election, klipper-helm's work), and returns its token file: client-go
// rereads it as the kubelet refreshes it.
func (k *Kubelet) apiAccess(ctx context.Context, p *corev1.Pod) (string, error) {
	dir := filepath.Join(k.podDir(), string(p.UID), "volumes", "kubernetes.io~projected", "kube-api-access")
	if err := k.writeToken(ctx, p, serviceAccount(p), dir); err != nil {
		return "", err
	}
	return filepath.Join(dir, "token"), nil
}

// podConfig is the in-cluster config a pod's container makes from its
// token file: this server's API server (no kube-proxy routes the
// kubernetes Service here), the cluster's CA.
func (k *Kubelet) podConfig(tokenFile string) *rest.Config {
	return &rest.Config{Host: "https://" + net.JoinHostPort(k.IP, "6443"), BearerTokenFile: tokenFile,
		TLSClientConfig: rest.TLSClientConfig{CAData: k.CA}}
}

// serviceAccountToken tells a projected volume with a token in it (the
// admission plugin's kube-api-access-xxxxx).
func serviceAccountToken(v *corev1.ProjectedVolumeSource) bool {
	for _, s := range v.Sources {
		if s.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// items are a Secret's or ConfigMap's files in a volume: every key under
// its name, or the items' keys at their paths; kind words a missing key as
// the kubelet does ("secret", "config").
func items(data map[string][]byte, list []corev1.KeyToPath, kind string) (map[string][]byte, error) {
	if len(list) == 0 {
		return data, nil
	}
	files := map[string][]byte{}
	for _, it := range list {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("references non-existent %s key: %s", kind, it.Key)
		}
		files[it.Path] = v
	}
	return files, nil
}

// containerEnv is the container's environment as the kubelet makes it:
// values, with $(VAR) references to earlier variables expanded, and the
// downward API's fields (valueFrom.fieldRef).
func (k *Kubelet) containerEnv(p *corev1.Pod, st *podState, ctr corev1.Container) map[string]string {
	vars := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = expansion.Expand(e.Value, expansion.MappingFuncFor(vars))
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				vars[e.Name] = p.Namespace
			case "metadata.name":
				vars[e.Name] = p.Name
			case "metadata.uid":
				vars[e.Name] = string(p.UID)
			case "spec.nodeName":
				vars[e.Name] = p.Spec.NodeName
			case "spec.serviceAccountName":
				vars[e.Name] = p.Spec.ServiceAccountName
			case "status.hostIP":
				vars[e.Name] = k.IP
			case "status.podIP":
				vars[e.Name] = st.ip
			}
		}
	}
	return vars
}

// expandArgs expands $(VAR) in a container's command and args, as the
// kubelet does.
func expandArgs(args []string, vars map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expansion.Expand(a, expansion.MappingFuncFor(vars))
	}
	return out
}

// ready runs the container's readiness probe, an HTTP GET on the pod's
// address (HTTPS unverified, as the kubelet probes); a container without
// one is ready once it runs.
func (k *Kubelet) ready(ctx context.Context, p *corev1.Pod, st *podState) bool {
	ctr := p.Spec.Containers[0]
	pr := ctr.ReadinessProbe
	if pr == nil || pr.HTTPGet == nil {
		return true
	}
	port := portNumber(ctr, pr.HTTPGet.Port)
	scheme := "http"
	if pr.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(st.ip, strconv.Itoa(port))+pr.HTTPGet.Path, nil)
	if err != nil {
		return false
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the kubelet's HTTPS probe
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// portNumber resolves a probe's port, by number or by the container's
// port name.
func portNumber(ctr corev1.Container, port intstr.IntOrString) int {
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	for _, cp := range ctr.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}
