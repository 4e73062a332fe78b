// Package controlplane runs upstream's kube-controller-manager and
// kube-scheduler inside the lab's `k3s server`, as k3s embeds them: built
// from the same k8s.io/kubernetes release as the lab's kube-apiserver,
// started with the flags k3s passes, each with its own kubeconfig and
// client certificate, leader-elected across servers by their own Leases
// (kube-system/kube-controller-manager and kube-system/kube-scheduler).
//
// The flags are k3s's (k3s-io/k3s v1.35.7+k3s1
// pkg/daemons/control/server.go, controllerManager() and scheduler());
// the binaries are Kubernetes v1.36.3's (the lab module's k8s.io/kubernetes,
// cmd/kube-controller-manager/app and cmd/kube-scheduler/app): the controllers
// "*,tokencleaner" less the cloud controllers k3s's own cloud controller
// manager runs ("-service,-route,-cloud-node-lifecycle"), node CIDRs
// allocated from the cluster CIDR, every controller with its own
// ServiceAccount's credentials, the cluster's CAs as signers, the secure
// ports 10257 and 10259 on loopback.
package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/mgmtctl/mgmtctl/lab/internal/pki"
)

// Config is what both components are started with.
type Config struct {
	// DataDir is k3s's server data directory (/var/lib/rancher/k3s/server):
	// the components' kubeconfigs go to cred/, as k3s keeps them.
	DataDir string
	// APIServer is this server's kube-apiserver (k3s points its
	// components at the local one).
	APIServer string
	// ServerCA signs the API server's certificate and the kubelets'
	// serving certificates; ClientCA the client certificates. Their
	// files are the controller manager's signers.
	ServerCA, ClientCA       *pki.CA
	ServerCADir, ClientCADir string
	// ServiceKey signs ServiceAccount tokens (the API server's
	// --service-account-signing-key-file).
	ServiceKey               string
	ServiceCIDR, ClusterCIDR string
	Log                      io.Writer
}

// Controllers is the --controllers value: k3s's with its cloud
// controller manager.
const Controllers = "*,tokencleaner,-service,-route,-cloud-node-lifecycle"

// ControllerManagerArgs are the flags k3s passes to kube-controller-manager.
func (c Config) ControllerManagerArgs(kubeconfig string) []string {
	ca := func(dir, f string) string { return filepath.Join(dir, f) }
	return []string{
		"--controllers=" + Controllers,
		"--kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--service-account-private-key-file=" + c.ServiceKey,
		"--allocate-node-cidrs=true",
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--cluster-cidr=" + c.ClusterCIDR,
		"--root-ca-file=" + ca(c.ServerCADir, "ca.crt"),
		"--profiling=false",
		"--bind-address=127.0.0.1",
		"--secure-port=10257",
		"--use-service-account-credentials=true",
		"--cluster-signing-kube-apiserver-client-cert-file=" + ca(c.ClientCADir, "ca.crt"),
		"--cluster-signing-kube-apiserver-client-key-file=" + ca(c.ClientCADir, "ca.key"),
		"--cluster-signing-kubelet-client-cert-file=" + ca(c.ClientCADir, "ca.crt"),
		"--cluster-signing-kubelet-client-key-file=" + ca(c.ClientCADir, "ca.key"),
		"--cluster-signing-kubelet-serving-cert-file=" + ca(c.ServerCADir, "ca.crt"),
		"--cluster-signing-kubelet-serving-key-file=" + ca(c.ServerCADir, "ca.key"),
		"--cluster-signing-legacy-unknown-cert-file=" + ca(c.ServerCADir, "ca.crt"),
		"--cluster-signing-legacy-unknown-key-file=" + ca(c.ServerCADir, "ca.key"),
		"--configure-cloud-routes=false",
	}
}

// SchedulerArgs are the flags k3s passes to kube-scheduler.
func (c Config) SchedulerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=10259",
		"--profiling=false",
	}
}

// kubeconfig writes cred/<name>.kubeconfig for user (a client
// certificate of the cluster's client CA), as k3s writes
// controller.kubeconfig and scheduler.kubeconfig.
func (c Config) kubeconfig(name, user string) (string, error) {
	cert, key, err := c.ClientCA.IssueClient(user, nil)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: c.APIServer, CertificateAuthorityData: c.ServerCA.CertPEM}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	kc.CurrentContext = "local"
	p := filepath.Join(c.DataDir, "cred", name+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		return "", err
	}
	return p, os.Chmod(p, 0o600)
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
	}
}

// RunControllerManager runs kube-controller-manager until the process
// ends. As in k3s, a controller manager that loses its Lease exits the
// process (upstream's OnStoppedLeading), and systemd starts k3s again.
func RunControllerManager(ctx context.Context, c Config) error {
	kc, err := c.kubeconfig("controller", "system:kube-controller-manager")
	if err != nil {
		return fmt.Errorf("kube-controller-manager kubeconfig: %w", err)
	}
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("kube-controller-manager options: %w", err)
	}
	named := s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	s.ParsedFlags = &named
	args := c.ControllerManagerArgs(kc)
	if err := parse("kube-controller-manager", named.FlagSets, args); err != nil {
		return err
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	c.logf("Running kube-controller-manager %s", strings.Join(args, " "))
	cfg, err := s.Config(ctx, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return fmt.Errorf("kube-controller-manager config: %w", err)
	}
	return kcmapp.Run(ctx, cfg.Complete())
}

// RunScheduler runs kube-scheduler until ctx ends. Its library entry
// points are called rather than its command, which would install a
// second signal handler in the process (the API server has one).
func RunScheduler(ctx context.Context, c Config) error {
	kc, err := c.kubeconfig("scheduler", "system:kube-scheduler")
	if err != nil {
		return fmt.Errorf("kube-scheduler kubeconfig: %w", err)
	}
	opts := schedoptions.NewOptions()
	args := c.SchedulerArgs(kc)
	if err := parse("kube-scheduler", opts.Flags.FlagSets, args); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	c.logf("Running kube-scheduler %s", strings.Join(args, " "))
	cc, sched, err := schedapp.Setup(ctx, opts)
	if err != nil {
		return fmt.Errorf("kube-scheduler setup: %w", err)
	}
	return schedapp.Run(ctx, cc, sched)
}

func parse(name string, sets map[string]*pflag.FlagSet, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, f := range sets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s flags: %w", name, err)
	}
	return nil
}
