package klipperhelm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
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
// delete uninstalls it.
func TestRunConfigHash(t *testing.T) {
	repoURL := chartRepo(t)
	r, cs := testRunner(t)
	ctx := context.Background()
	job := func(hash string) Job {
		return Job{Env: map[string]string{"NAME": "demo", "CHART": "demo/demo", "REPO": repoURL, "CONFIG_HASH": hash}, Args: []string{"install", "--namespace", "t"}}
	}
	releases := func() string {
		l, _ := cs.CoreV1().Secrets("t").List(ctx, metav1.ListOptions{})
		var s []string
		for _, x := range l.Items {
			s = append(s, x.Name+"="+x.Labels["status"]+"/"+x.Labels[ConfigHashLabel])
		}
		return strings.Join(s, " ")
	}
	if out, err := r.Run(ctx, job("h1")); err != nil || !strings.HasPrefix(out, "NAME: demo\n") || !strings.Contains(out, "REVISION: 1\n") {
		t.Fatalf("install: %q %v", out, err)
	}
	if out, err := r.Run(ctx, job("h1")); err != nil || out != "Release demo is already deployed with config hash h1\n" {
		t.Errorf("same config: %q %v", out, err)
	}
	if out, err := r.Run(ctx, job("h2")); err != nil || !strings.HasPrefix(out, "Already installed demo\nUpgrading demo\nNAME: demo\n") || !strings.Contains(out, "REVISION: 2\n") {
		t.Errorf("new config: %q %v", out, err)
	}
	if got := releases(); got != "sh.helm.release.v1.demo.v1=superseded/h1 sh.helm.release.v1.demo.v2=deployed/h2" {
		t.Errorf("releases: %s", got)
	}
	del := Job{Env: map[string]string{"NAME": "demo", "TARGET_NAMESPACE": "t"}, Args: []string{"delete"}}
	if out, err := r.Run(ctx, del); err != nil || out != "release \"demo\" uninstalled\n" || releases() != "" {
		t.Errorf("delete: %q %v, left %s", out, err, releases())
	}
	if out, err := r.Run(ctx, del); err != nil || out != "" {
		t.Errorf("delete of no release: %q %v", out, err)
	}
}

// TestRunFailurePolicy: a release left failed is uninstalled and
// installed again (FAILURE_POLICY reinstall, the default), upgraded
// (retry) or left for the operator (abort); an unknown policy stops. One
// left pending by an interrupted run is set failed first, and a pending
// upgrade is retried as an upgrade.
func TestRunFailurePolicy(t *testing.T) {
	repoURL := chartRepo(t)
	ctx := context.Background()
	job := func(policy string) Job {
		return Job{Env: map[string]string{"NAME": "demo", "CHART": "demo/demo", "REPO": repoURL, "FAILURE_POLICY": policy}, Args: []string{"install", "--namespace", "t"}}
	}
	status := func(cs *fake.Clientset) string {
		rels, _ := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets("t"))).History("demo")
		var s []string
		for _, r := range rels {
			s = append(s, fmt.Sprintf("v%d=%s", r.Version, r.Info.Status))
		}
		sort.Strings(s)
		return strings.Join(s, " ")
	}
	// A release whose install failed (helm install records it failed
	// when the API server refuses its objects).
	failing := func(t *testing.T) (*Runner, *fake.Clientset) {
		r, cs := testRunner(t)
		if _, err := r.Run(ctx, job("")); err != nil {
			t.Fatal(err)
		}
		st := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets("t")))
		rel, _ := st.Last("demo")
		rel.Info.Status, rel.Info.Description = release.StatusFailed, "Release \"demo\" failed: admission webhook denied the request"
		if err := st.Update(rel); err != nil {
			t.Fatal(err)
		}
		return r, cs
	}
	t.Run("reinstall", func(t *testing.T) {
		r, cs := failing(t)
		out, err := r.Run(ctx, job(""))
		if err != nil || !strings.HasPrefix(out, "Deleted\nNAME: demo\n") || status(cs) != "v1=deployed" {
			t.Errorf("reinstall: %q %v, releases %s", out, err, status(cs))
		}
	})
	t.Run("abort", func(t *testing.T) {
		r, cs := failing(t)
		_, err := r.Run(ctx, job("abort"))
		if err == nil || err.Error() != "Release status is 'failed' and failure policy is 'abort'; waiting for operator intervention" || status(cs) != "v1=failed" {
			t.Errorf("abort: %v, releases %s", err, status(cs))
		}
	})
	t.Run("retry", func(t *testing.T) {
		r, cs := failing(t)
		out, err := r.Run(ctx, job("retry"))
		if err != nil || !strings.HasPrefix(out, "NAME: demo\n") || status(cs) != "v1=superseded v2=deployed" {
			t.Errorf("retry: %q %v, releases %s", out, err, status(cs))
		}
	})
	t.Run("unknown policy", func(t *testing.T) {
		r, cs := failing(t)
		if _, err := r.Run(ctx, job("later")); err == nil || err.Error() != "Unknown failure policy 'later'" || status(cs) != "v1=failed" {
			t.Errorf("unknown policy: %v, releases %s", err, status(cs))
		}
	})
	t.Run("pending upgrade", func(t *testing.T) {
		r, cs := testRunner(t)
		if _, err := r.Run(ctx, job("")); err != nil {
			t.Fatal(err)
		}
		st := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets("t")))
		rel, _ := st.Last("demo")
		rel.Info.Status = release.StatusPendingUpgrade
		if err := st.Update(rel); err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(ctx, job(""))
		if err != nil || !strings.HasPrefix(out, "Previous helm job was interrupted, updating status from pending-upgrade to failed\nRetrying upgrade of demo\n") || status(cs) != "v1=superseded v2=deployed" {
			t.Errorf("pending upgrade: %q %v, releases %s", out, err, status(cs))
		}
	})
}
