package controlplane

import (
	"strings"
	"testing"

	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// TestArgs: the flags are k3s's (pkg/daemons/control/server.go), and each
// parses as upstream's own flag sets define it, so a flag renamed or
// dropped upstream fails here, not in a lab.
func TestArgs(t *testing.T) {
	c := Config{ServerCADir: "/tls/server-ca", ClientCADir: "/tls/client-ca", ServiceKey: "/tls/service.key",
		ServiceCIDR: "10.43.0.0/16", ClusterCIDR: "10.42.0.0/16"}
	kcm := strings.Join(c.ControllerManagerArgs("/cred/controller.kubeconfig"), " ")
	for _, want := range []string{"--controllers=*,tokencleaner,-service,-route,-cloud-node-lifecycle",
		"--allocate-node-cidrs=true", "--cluster-cidr=10.42.0.0/16", "--use-service-account-credentials=true",
		"--secure-port=10257", "--bind-address=127.0.0.1", "--root-ca-file=/tls/server-ca/ca.crt",
		"--cluster-signing-kubelet-serving-cert-file=/tls/server-ca/ca.crt", "--cluster-signing-kube-apiserver-client-key-file=/tls/client-ca/ca.key"} {
		if !strings.Contains(kcm, want) {
			t.Errorf("kube-controller-manager args lack %s:\n%s", want, kcm)
		}
	}
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	named := s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err := parse("kube-controller-manager", named.FlagSets, c.ControllerManagerArgs("/cred/controller.kubeconfig")); err != nil {
		t.Errorf("kube-controller-manager: %v", err)
	}
	if got := s.Generic.Controllers; strings.Join(got, ",") != "*,tokencleaner,-service,-route,-cloud-node-lifecycle" {
		t.Errorf("controllers parsed as %v", got)
	}
	o := schedoptions.NewOptions()
	if err := parse("kube-scheduler", o.Flags.FlagSets, c.SchedulerArgs("/cred/scheduler.kubeconfig")); err != nil {
		t.Errorf("kube-scheduler: %v", err)
	}
	if o.SecureServing.BindPort != 10259 {
		t.Errorf("scheduler secure port %d", o.SecureServing.BindPort)
	}
	// A typo is refused, not ignored.
	if err := parse("kube-scheduler", schedoptions.NewOptions().Flags.FlagSets, []string{"--secure-prot=1"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}
