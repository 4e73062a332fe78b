package kubelet

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestVolumes: each mount's volume is laid out where the kubelet keeps a
// pod's volumes (a Secret's items at their paths, a ConfigMap's keys, an
// emptyDir, the ServiceAccount token volume with a token bound to the pod)
// and bound at its mountPath; a Secret that is not there keeps the
// container waiting, unless it is optional.
func TestVolumes(t *testing.T) {
	dir := t.TempDir()
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cert", Namespace: "ns"}, Data: map[string][]byte{"tls.crt": []byte("C"), "tls.key": []byte("K")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns"}, Data: map[string]string{"config.yaml": "a: 1\n"}})
	var bound *authenticationv1.BoundObjectReference
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		bound = a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).Spec.BoundObjectRef
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "tok"}}, nil
	})
	k := &Kubelet{CS: cs, CA: []byte("CA"), PodDir: dir}
	p := pod(nil, "quay.io/jetstack/cert-manager-webhook:v1.21.2")
	p.Spec.ServiceAccountName = "webhook"
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cert", Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "crt.pem"}}}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "kube-api-access-x1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
	}
	ctr := corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "cert", MountPath: "/certs"}, {Name: "config", MountPath: "/var/cert-manager/config"},
		{Name: "tmp", MountPath: "/tmp/x", SubPath: "sub"}, {Name: "kube-api-access-x1", MountPath: saDir}}}
	binds, tokens, err := k.volumes(context.Background(), p, ctr)
	if err != nil {
		t.Fatal(err)
	}
	vol := func(kind, name string) string {
		return filepath.Join(dir, "u1", "volumes", "kubernetes.io~"+kind, name)
	}
	want := []bind{{vol("secret", "cert"), "/certs"}, {vol("configmap", "config"), "/var/cert-manager/config"},
		{filepath.Join(vol("empty-dir", "tmp"), "sub"), "/tmp/x"}, {vol("projected", "kube-api-access-x1"), saDir}}
	if !reflect.DeepEqual(binds, want) {
		t.Errorf("binds:\n%v\nwant\n%v", binds, want)
	}
	if !reflect.DeepEqual(tokens, []tokenVolume{{"webhook", vol("projected", "kube-api-access-x1")}}) {
		t.Errorf("tokens: %v", tokens)
	}
	for file, data := range map[string]string{
		filepath.Join(vol("secret", "cert"), "crt.pem"): "C", filepath.Join(vol("configmap", "config"), "config.yaml"): "a: 1\n",
		filepath.Join(vol("projected", "kube-api-access-x1"), "token"): "tok", filepath.Join(vol("projected", "kube-api-access-x1"), "ca.crt"): "CA",
		filepath.Join(vol("projected", "kube-api-access-x1"), "namespace"): "ns",
	} {
		if b, err := os.ReadFile(file); err != nil || string(b) != data {
			t.Errorf("%s: %q %v, want %q", file, b, err, data)
		}
	}
	if _, err := os.Stat(filepath.Join(vol("secret", "cert"), "tls.key")); err == nil {
		t.Error("a key not in the items was written")
	}
	if bound == nil || bound.Kind != "Pod" || bound.UID != "u1" {
		t.Errorf("token not bound to the pod: %+v", bound)
	}

	p.Spec.Volumes[0].Secret.SecretName = "missing"
	if _, _, err := k.volumes(context.Background(), p, ctr); err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "cert"`) {
		t.Errorf("missing Secret: %v", err)
	}
	optional := true
	p.Spec.Volumes[0].Secret.Optional = &optional
	p.Spec.Volumes[0].Secret.Items = nil
	if _, _, err := k.volumes(context.Background(), p, ctr); err != nil {
		t.Errorf("missing optional Secret: %v", err)
	}
	p.Spec.Volumes[2] = corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}
	if _, _, err := k.volumes(context.Background(), p, ctr); err == nil || !strings.Contains(err.Error(), `volume "tmp": the lab's kubelet mounts`) {
		t.Errorf("hostPath: %v", err)
	}
}

// TestContainerEnv: values, the downward API's fields, and $(VAR)
// references in env and args expanded as the kubelet expands them
// ($$ escapes, an unknown name stays as written).
func TestContainerEnv(t *testing.T) {
	k := &Kubelet{IP: "192.0.2.50"}
	p := pod(nil, "img")
	p.Spec.NodeName = "lab-mgmt"
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	ctr := corev1.Container{Env: []corev1.EnvVar{
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")}, {Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")}, {Name: "POD_IP", ValueFrom: field("status.podIP")}, {Name: "HOST_IP", ValueFrom: field("status.hostIP")},
		{Name: "SVC", Value: "webhook.$(POD_NAMESPACE).svc"},
	}}
	vars := k.containerEnv(p, &podState{ip: "10.42.0.7"}, ctr)
	want := map[string]string{"POD_NAMESPACE": "ns", "POD_NAME": "p-abc", "NODE": "lab-mgmt", "POD_IP": "10.42.0.7", "HOST_IP": "192.0.2.50", "SVC": "webhook.ns.svc"}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("env: %v\nwant %v", vars, want)
	}
	got := expandArgs([]string{"--cluster-resource-namespace=$(POD_NAMESPACE)", "--dns-names=$(SVC)", "$$(POD_NAME)", "$(UNSET)"}, vars)
	if w := []string{"--cluster-resource-namespace=ns", "--dns-names=webhook.ns.svc", "$(POD_NAME)", "$(UNSET)"}; !reflect.DeepEqual(got, w) {
		t.Errorf("args: %q, want %q", got, w)
	}
}

// TestReady: the readiness probe GETs its path on the pod's address at
// its port, by number or by the container port's name; 2xx and 3xx are
// ready; no probe is ready once running.
func TestReady(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(port)
	k := &Kubelet{}
	st := &podState{ip: host}
	p := pod(nil, "img")
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "healthcheck", ContainerPort: int32(n)}}
	probe := func(port intstr.IntOrString, path string) {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port}}}
	}
	ctx := context.Background()
	if !k.ready(ctx, p, st) {
		t.Error("no probe: not ready")
	}
	probe(intstr.FromString("healthcheck"), "/healthz")
	if !k.ready(ctx, p, st) {
		t.Error("named port: not ready")
	}
	probe(intstr.FromInt32(int32(n)), "/healthz")
	if !k.ready(ctx, p, st) {
		t.Error("port number: not ready")
	}
	status = http.StatusServiceUnavailable
	if k.ready(ctx, p, st) {
		t.Error("503: ready")
	}
	status = http.StatusOK
	probe(intstr.FromString("healthcheck"), "/readyz")
	if k.ready(ctx, p, st) {
		t.Error("404: ready")
	}
}

// TestBindScript: the container's command runs with each volume's
// directory at its mountPath, in a mount namespace of its own: the
// binding is not seen outside it, and a value with shell syntax in it is
// only ever an argument.
func TestBindScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces need root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	src, mnt := t.TempDir(), filepath.Join(t.TempDir(), "mnt $(touch pwned)")
	if err := os.WriteFile(filepath.Join(src, "token"), []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", bindScript, "sh",
		src, mnt, "--", "cat", filepath.Join(mnt, "token")).CombinedOutput()
	if err != nil || string(out) != "tok" {
		t.Fatalf("in the container: %q %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "token")); err == nil {
		t.Error("the binding is seen outside the container's mount namespace")
	}
	if _, err := os.Stat("pwned"); err == nil {
		os.Remove("pwned")
		t.Error("a mountPath was run as shell code")
	}
}

// TestRunBinary: a container of upstream's binary runs with its args
// expanded and its env; a Job's pod (restartPolicy OnFailure) that exits 0
// has Succeeded, one that exits 1 is restarted with back-off, and under
// Never it has Failed.
func TestRunBinary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the container's mount namespace needs root")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "cert-manager-startupapicheck-v1.21.2")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	// Stands for the binary: prints its args, exits with $CODE.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\"\nexit $CODE\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	k := &Kubelet{CS: cs, Node: "lab-mgmt", IP: "192.0.2.50", LabDir: dir, LogDir: filepath.Join(dir, "logs"), PodDir: filepath.Join(dir, "pods")}
	run := func(policy corev1.RestartPolicy, code string) (*podState, string) {
		t.Helper()
		p := pod(nil, "quay.io/jetstack/cert-manager-startupapicheck:v1.21.2")
		p.UID = types.UID("u-" + code + string(policy))
		p.Spec.RestartPolicy = policy
		p.Spec.Containers[0].Args = []string{"check", "api", "--namespace=$(POD_NAMESPACE)"}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "CODE", Value: code},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}
		st := &podState{uid: p.UID, kind: kindOf(p), ip: "10.42.0.9", ref: "c"}
		now := time.Now()
		k.runBinary(context.Background(), p, st, now)
		if st.proc == nil {
			t.Fatalf("not started: %+v", st.waiting)
		}
		<-st.proc.done
		k.runBinary(context.Background(), p, st, now)
		logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*"+string(p.UID), "*", "0.log"))
		b, _ := os.ReadFile(strings.Join(logs, ""))
		return st, string(b)
	}
	st, log := run(corev1.RestartPolicyOnFailure, "0")
	if st.done == nil || st.done.ExitCode != 0 || !strings.Contains(log, " stdout F check api --namespace=ns") {
		t.Errorf("exit 0: %+v, log %q", st.done, log)
	}
	if s := k.podStatus(pod(nil, "img"), st, apiNow()); s.Phase != corev1.PodSucceeded {
		t.Errorf("exit 0: phase %s", s.Phase)
	}
	st, _ = run(corev1.RestartPolicyOnFailure, "1")
	if st.done != nil || st.waiting == nil || st.waiting.Reason != "CrashLoopBackOff" || st.last.ExitCode != 1 {
		t.Errorf("exit 1, OnFailure: done %+v waiting %+v last %+v", st.done, st.waiting, st.last)
	}
	st, _ = run(corev1.RestartPolicyNever, "1")
	if s := k.podStatus(pod(nil, "img"), st, apiNow()); st.done == nil || s.Phase != corev1.PodFailed || s.ContainerStatuses[0].State.Terminated.ExitCode != 1 {
		t.Errorf("exit 1, Never: %+v %s", st.done, s.Phase)
	}
}
