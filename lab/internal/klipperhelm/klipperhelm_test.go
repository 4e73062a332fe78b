package klipperhelm

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSpec: a Job as helm-controller writes it (chart.go, args and job)
// read as klipper-helm reads it: namespace and version from the
// arguments, values files merged in name order as helm merges --values.
func TestSpec(t *testing.T) {
	env := map[string]string{"NAME": "cm", "CHART": "cm/cert-manager", "REPO": "https://charts.jetstack.io", "VERSION": "v1.21.2", "TARGET_NAMESPACE": "ignored", "CONFIG_HASH": "h"}
	for _, tc := range []struct {
		name   string
		args   []string
		values []File
		want   Spec
		err    string
	}{
		{name: "install", args: []string{"install", "--namespace", "cert-manager", "--create-namespace", "--version", "v1.21.2"},
			values: []File{{"values-0-000-HelmChart-ValuesContent.yaml", []byte("crds:\n  enabled: true\n  keep: true\n")}, {"values-1-000-HelmChartConfig-ValuesContent.yaml", []byte("crds:\n  keep: false\nx: 1\n")}, {"ca-file.pem", []byte("not values")}},
			want: Spec{Chart: "cert-manager", Repo: "https://charts.jetstack.io", Version: "v1.21.2", TargetNamespace: "cert-manager", CreateNamespace: true, ConfigHash: "h",
				Values: map[string]any{"crds": map[string]any{"enabled": true, "keep": false}, "x": float64(1)}}},
		{name: "delete", args: []string{"delete"},
			want: Spec{Chart: "cert-manager", Repo: "https://charts.jetstack.io", Version: "v1.21.2", TargetNamespace: "ignored", ConfigHash: "h", Values: map[string]any{}}},
		{name: "not helm-controller's", args: []string{"template"}, err: `klipper-helm: unexpected arguments ["template"]`},
		{name: "a flag without its value", args: []string{"install", "--namespace"}, err: "unexpected arguments"},
		{name: "values that are not YAML", args: []string{"install"}, values: []File{{"values-0.yaml", []byte("a: [")}}, err: "Error: failed to parse /config/values-0.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := spec(Job{Env: env, Args: tc.args, Values: tc.values})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("spec = %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
	var ae *ArgsError
	if _, err := spec(Job{Args: nil}); !errors.As(err, &ae) {
		t.Errorf("no arguments: %v", err)
	}
}

// TestRunConfigHash: a release already deployed from the Job's config is
// left alone; another config upgrades it, superseding the old revision;
// delete removes the release.
func TestRunConfigHash(t *testing.T) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}})
	r := &Runner{CS: cs, LabDir: t.TempDir()}
	ctx := context.Background()
	job := func(hash string, args ...string) Job {
		return Job{Env: map[string]string{"NAME": "demo", "CHART": "demo", "CONFIG_HASH": hash}, Args: append([]string{"install", "--namespace", "t"}, args...)}
	}
	releases := func() string {
		l, _ := cs.CoreV1().Secrets("t").List(ctx, metav1.ListOptions{})
		var s []string
		for _, x := range l.Items {
			s = append(s, x.Name+"="+x.Labels["status"]+"/"+x.Labels[ConfigHashLabel])
		}
		return strings.Join(s, " ")
	}
	if out, err := r.Run(ctx, job("h1")); err != nil || out != "Installing helm chart\n" {
		t.Fatalf("install: %q %v", out, err)
	}
	if out, err := r.Run(ctx, job("h1")); err != nil || !strings.Contains(out, "already deployed with config hash h1") {
		t.Errorf("same config: %q %v", out, err)
	}
	if out, err := r.Run(ctx, job("h2")); err != nil || out != "Upgrading helm chart\n" {
		t.Errorf("new config: %q %v", out, err)
	}
	if got := releases(); got != "sh.helm.release.v1.demo.v1=superseded/h1 sh.helm.release.v1.demo.v2=deployed/h2" {
		t.Errorf("releases: %s", got)
	}
	if out, err := r.Run(ctx, Job{Env: map[string]string{"NAME": "demo", "TARGET_NAMESPACE": "t"}, Args: []string{"delete"}}); err != nil || out != "release \"demo\" uninstalled\n" || releases() != "" {
		t.Errorf("delete: %q %v, left %s", out, err, releases())
	}
}
