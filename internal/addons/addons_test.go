package addons

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/internal/config"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestRenderGolden pins the HelmChart manifests; each must also parse as
// the HelmChart a user would kubectl apply.
func TestRenderGolden(t *testing.T) {
	for name, c := range map[string]Chart{
		"cert-manager.yaml":         CertManager(config.Chart{Repo: config.DefaultCertManagerRepo, Version: config.DefaultCertManager}),
		"cluster-api-operator.yaml": Operator(config.Chart{Repo: config.DefaultOperatorRepo, Version: config.DefaultOperator}),
	} {
		t.Run(name, func(t *testing.T) {
			got := c.Render()
			golden := filepath.Join("testdata", name)
			if *update {
				os.WriteFile(golden, got, 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
			var hc struct {
				Kind     string
				Metadata struct{ Name, Namespace string }
				Spec     struct {
					Repo, Chart, Version, TargetNamespace, ValuesContent string
					CreateNamespace                                      bool
				}
			}
			if err := yaml.Unmarshal(got, &hc); err != nil {
				t.Fatal(err)
			}
			if hc.Kind != "HelmChart" || hc.Metadata.Name != c.Name || hc.Spec.Version != c.Version || hc.Spec.Repo != c.Repo || !hc.Spec.CreateNamespace ||
				hc.Spec.ValuesContent+"\n" != c.ValuesContent && c.ValuesContent != "" {
				t.Errorf("parsed back: %+v", hc)
			}
		})
	}
}

func TestOperatorChartHasNoProviders(t *testing.T) {
	if v := Operator(config.Chart{Version: "0.28.0"}).ValuesContent; v != "" {
		t.Errorf("the operator chart's values must stay empty (upstream #406/#1052), got %q", v)
	}
}

func TestDeploymentAvailable(t *testing.T) {
	tests := []struct {
		name  string
		conds []appsv1.DeploymentCondition
		ok    bool
	}{
		{"available", []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}, true},
		{"unavailable", []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"}}, false},
		{"no condition yet", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := DeploymentAvailable(&appsv1.Deployment{Status: appsv1.DeploymentStatus{Conditions: tt.conds}})
			if ok != tt.ok || (!ok && why == "") {
				t.Errorf("got %v %q", ok, why)
			}
		})
	}
}

func TestJobFailedErrorNamesJobAndEvents(t *testing.T) {
	e := &JobFailedError{Chart: "cert-manager", Job: "helm-install-cert-manager", Message: "Error: UPGRADE FAILED: boom\n",
		Events: []string{"Warning BackOff (Pod/p): Back-off restarting failed container helm"}}
	want := "HelmChart cert-manager: Job kube-system/helm-install-cert-manager failed: Error: UPGRADE FAILED: boom\nevents:\n  Warning BackOff (Pod/p): Back-off restarting failed container helm"
	if e.Error() != want {
		t.Errorf("got %q", e.Error())
	}
}

func TestGroupEventsCountsRepeats(t *testing.T) {
	type ev struct {
		line string
		n    int32
	}
	for _, c := range []struct {
		name string
		in   []ev
		want []string
	}{
		{"none", nil, []string{}},
		{"distinct", []ev{{"a", 1}, {"b", 1}}, []string{"a", "b"}},
		{"repeats folded into the first, counted", []ev{{"Warning BackOff (Pod/p): back-off", 1}, {"Normal Pulled (Pod/p): pulled", 1}, {"Warning BackOff (Pod/p): back-off", 1}, {"Warning BackOff (Pod/p): back-off", 6}},
			[]string{"Warning BackOff (Pod/p): back-off (x8)", "Normal Pulled (Pod/p): pulled"}},
		{"an aggregated event keeps its count", []ev{{"Warning BackOff (Pod/p): back-off", 5}}, []string{"Warning BackOff (Pod/p): back-off (x5)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := groupEvents(c.in, func(e ev) (string, int32) { return e.line, e.n })
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
