package kubelet

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm"
	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm/helmtest"
)

// helmPod is a Pod of a helm-controller Job as upstream writes it
// (chart.go: job, args, setValuesSecret): klipper-helm's image, its
// environment, and the values Secret projected at /config.
func helmPod(name, repo string, uid types.UID) *corev1.Pod {
	p := pod(map[string]string{"job-name": "helm-install-" + name}, "rancher/klipper-helm:v0.9.8-build20250709")
	p.Name, p.Namespace, p.UID = "helm-install-"+name+"-x1", "kube-system", uid
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	c := &p.Spec.Containers[0]
	c.Name = "helm"
	c.Args = []string{"install", "--namespace", "target", "--create-namespace", "--version", "1.0.0"}
	c.Env = []corev1.EnvVar{{Name: "NAME", Value: name}, {Name: "VERSION", Value: "1.0.0"}, {Name: "CHART", Value: name + "/demo"}, {Name: "REPO", Value: repo},
		{Name: "TARGET_NAMESPACE", Value: "target"}, {Name: "CONFIG_HASH", Value: "abc123"}, {Name: "EXPECTED_RELEASE_REVISION", Value: "0"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "values", MountPath: "/config"}}
	p.Spec.Volumes = []corev1.Volume{{Name: "values", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "chart-values-" + name},
			Items: []corev1.KeyToPath{{Key: "HelmChartValuesContent", Path: "values-0-000-HelmChart-ValuesContent.yaml"}}}}}}}}}
	return p
}

// TestHelmPod: klipper-helm's Pod runs to completion (phase Succeeded,
// the container terminated Completed, the release recorded with the
// Job's config hash, helm's output in the container's log); a failing
// run exits 1 and waits in CrashLoopBackOff with the kubelet's BackOff
// Event, and its log is the previous container's.
func TestHelmPod(t *testing.T) {
	dir := t.TempDir()
	values := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "chart-values-demo", Namespace: "kube-system"},
		Data: map[string][]byte{"HelmChartValuesContent": []byte("replicas: 2\n")}}
	repo := helmtest.Repo(t)
	cs := fake.NewClientset(helmPod("demo", repo, "u1"), values)
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "helm-token"}}, nil
	})
	// Helm's own stand-in kube client: the release is Helm's, its
	// objects go nowhere.
	k := &Kubelet{CS: cs, Node: "lab-mgmt", IP: "192.0.2.50", LabDir: dir, LogDir: filepath.Join(dir, "pods"), PodDir: filepath.Join(dir, "kubelet-pods"),
		pods: map[types.UID]*podState{}, Helm: &klipperhelm.Runner{CS: cs, KubeClient: &kubefake.PrintingKubeClient{Out: io.Discard}, LabDir: dir}}
	ctx := context.Background()
	run := func(name string, uid types.UID) *corev1.Pod {
		t.Helper()
		k.syncPods(ctx)
		st := k.pods[uid]
		if st == nil || st.proc == nil {
			t.Fatalf("%s: klipper-helm not started: %+v", name, st)
		}
		select {
		case <-st.proc.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: klipper-helm still runs", name)
		}
		k.syncPods(ctx)
		got, _ := cs.CoreV1().Pods("kube-system").Get(ctx, "helm-install-"+name+"-x1", metav1.GetOptions{})
		return got
	}

	got := run("demo", "u1")
	cst := got.Status.ContainerStatuses[0]
	if got.Status.Phase != corev1.PodSucceeded || cst.State.Terminated == nil || cst.State.Terminated.Reason != "Completed" || cst.Ready {
		t.Errorf("completed: phase %s, %+v", got.Status.Phase, cst)
	}
	rel, err := cs.CoreV1().Secrets("target").Get(ctx, "sh.helm.release.v1.demo.v1", metav1.GetOptions{})
	if err != nil || rel.Labels[klipperhelm.ConfigHashLabel] != "abc123" || rel.Labels["status"] != "deployed" {
		t.Errorf("release: %v %+v", err, rel)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "pods", "kube-system_helm-install-demo-x1_u1", "helm", "0.log"))
	if b, _ := os.ReadFile(strings.Join(logs, "")); !strings.Contains(string(b), " stdout F NAME: demo") || !strings.Contains(string(b), " stdout F STATUS: deployed") {
		t.Errorf("log: %q", b)
	}

	// helm fails: exit 1, back-off, the kubelet's Event.
	os.MkdirAll(filepath.Join(dir, "faults"), 0o755)
	os.WriteFile(filepath.Join(dir, "faults", "helm-fail"), []byte("bad"), 0o644)
	values.Name = "chart-values-bad"
	cs.Tracker().Add(values)
	cs.Tracker().Add(helmPod("bad", repo, "u2"))
	got = run("bad", "u2")
	cst = got.Status.ContainerStatuses[0]
	if got.Status.Phase != corev1.PodRunning || cst.State.Waiting == nil || cst.State.Waiting.Reason != "CrashLoopBackOff" ||
		cst.LastTerminationState.Terminated == nil || cst.LastTerminationState.Terminated.ExitCode != 1 || cst.LastTerminationState.Terminated.Message != "" {
		t.Errorf("failed: phase %s, %+v", got.Status.Phase, cst)
	}
	evs, _ := cs.CoreV1().Events("kube-system").List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != "BackOff" || !strings.HasPrefix(evs.Items[0].Message, "Back-off restarting failed container helm in pod helm-install-bad-x1_kube-system(u2)") {
		t.Errorf("events: %+v", evs.Items)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pods", "kube-system_helm-install-bad-x1_u2", "helm", "0.log"))
	if !strings.Contains(string(b), " stderr F Error: INSTALLATION FAILED: labsim fault helm-fail is on for bad") {
		t.Errorf("failed run's log: %q", b)
	}
}

// TestVolumeFiles: a projected Secret volume's items at their paths, a
// Secret volume's keys under their names, in name order; a missing Secret
// that is not optional is not mountable.
func TestVolumeFiles(t *testing.T) {
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"},
		Data: map[string][]byte{"b": []byte("2"), "a": []byte("1")}})
	k := &Kubelet{CS: cs}
	p := pod(nil, "img")
	ctr := corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/config"}}}
	p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}}
	files, err := k.volumeFiles(context.Background(), p, ctr, "/config")
	if err != nil || len(files) != 2 || files[0].Name != "a" || string(files[1].Data) != "2" {
		t.Errorf("secret volume: %v %+v", err, files)
	}
	p.Spec.Volumes[0].Secret.SecretName = "missing"
	if _, err := k.volumeFiles(context.Background(), p, ctr, "/config"); err == nil || !strings.Contains(err.Error(), "MountVolume.SetUp failed") {
		t.Errorf("missing secret: %v", err)
	}
}
