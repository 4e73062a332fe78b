// Package controller is cert-manager's controller as its image runs it
// (quay.io/jetstack/cert-manager-controller): the configuration's defaults,
// upstream's flags, then, once it holds the Lease cert-manager-controller,
// every enabled controller of pkg/controller over shared informers, with
// /livez on the healthz address as the chart probes it.
//
// One difference: the Venafi issuer's controllers are not built. They need
// github.com/Venafi/vcert/v5, which the Go module proxy here does not
// serve; so neither is upstream's defaults package
// (internal/apis/config/controller/v1alpha1), which imports every
// controller: newConfiguration sets the same defaults, cited.
package controller

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/cmd"
	config "github.com/cert-manager/cert-manager/internal/apis/config/controller"
	"github.com/cert-manager/cert-manager/internal/apis/config/shared"
	cm "github.com/cert-manager/cert-manager/pkg/apis/certmanager"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	challengescontroller "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	orderscontroller "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	shimgatewaycontroller "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/gateways"
	shimingresscontroller "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	cracmecontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/acme"
	crapprovercontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crcacontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsignedcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	crvaultcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/vault"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	certificatesmetricscontroller "github.com/cert-manager/cert-manager/pkg/controller/certificates/metrics"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	clusterissuerscontroller "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	issuerscontroller "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	"github.com/cert-manager/cert-manager/pkg/healthz"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The controller's feature gates, and the issuers its controllers
	// sign with, registered as upstream's command registers them.
	_ "github.com/cert-manager/cert-manager/internal/controller/feature"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/vault"
)

// defaultEnabled is upstream's DefaultEnabledControllers
// (internal/apis/config/controller/v1alpha1/defaults.go) without
// certificaterequests-issuer-venafi; allControllers its AllControllers
// without the two Venafi ones and the experimental CSR controllers.
var (
	defaultEnabled = []string{
		issuerscontroller.ControllerName, clusterissuerscontroller.ControllerName, certificatesmetricscontroller.ControllerName,
		shimingresscontroller.ControllerName, orderscontroller.ControllerName, challengescontroller.ControllerName,
		cracmecontroller.CRControllerName, crapprovercontroller.ControllerName, crcacontroller.CRControllerName,
		crselfsignedcontroller.CRControllerName, crvaultcontroller.CRControllerName,
		trigger.ControllerName, issuing.ControllerName, keymanager.ControllerName, requestmanager.ControllerName,
		readiness.ControllerName, revisionmanager.ControllerName,
	}
	allControllers = append(slices.Clone(defaultEnabled), shimgatewaycontroller.ControllerName)
)

// Main runs the command with os.Args, as its image's entrypoint does.
func Main() {
	ctx, stop := cmd.Context()
	defer stop()
	logf.InitLogs()

	cfg, err := newConfiguration()
	if err != nil {
		cmd.Exit(err)
	}
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	addFlags(fs, cfg)
	cmd.ParseFlagsOnly(fs, os.Args[1:], "Path to a file containing a ControllerConfiguration object used to configure the controller", &cfg.Logging, &cfg.FeatureGates)
	enabled, err := enabledControllers(cfg.Controllers)
	if err != nil {
		cmd.Exit(err)
	}
	log := logf.Log.WithName("controller")
	ctx = logf.NewContext(ctx, log)
	if err := run(ctx, cfg, enabled); err != nil {
		cmd.Exit(err)
	}
}

// newConfiguration is the configuration upstream defaults to (cert-manager
// v1.21.2's internal/apis/config/controller/v1alpha1/defaults.go, and the
// leader election defaults of the v1alpha1 package of its shared config
// types).
func newConfiguration() (*config.ControllerConfiguration, error) {
	cfg := &config.ControllerConfiguration{
		KubernetesAPIQPS: 20, KubernetesAPIBurst: 50,
		ClusterResourceNamespace: "kube-system",
		LeaderElectionConfig: config.LeaderElectionConfig{
			LeaderElectionConfig: shared.LeaderElectionConfig{Enabled: true, Namespace: "kube-system",
				LeaseDuration: 60 * time.Second, RenewDeadline: 40 * time.Second, RetryPeriod: 15 * time.Second},
			HealthzTimeout: 20 * time.Second,
		},
		Controllers:                     []string{"*"},
		ClusterIssuerAmbientCredentials: true,
		NumberOfConcurrentWorkers:       5,
		MaxConcurrentChallenges:         60,
		MetricsListenAddress:            "0.0.0.0:9402",
		HealthzListenAddress:            "0.0.0.0:9403",
		PprofAddress:                    "localhost:6060",
		IngressShimConfig: config.IngressShimConfig{DefaultIssuerKind: "Issuer", DefaultIssuerGroup: cm.GroupName,
			DefaultAutoCertificateAnnotations: []string{"kubernetes.io/tls-acme"}},
		ACMEHTTP01Config: config.ACMEHTTP01Config{
			SolverImage:                 "quay.io/jetstack/cert-manager-acmesolver:" + util.AppVersion,
			SolverResourceRequestCPU:    "10m",
			SolverResourceRequestMemory: "64Mi",
			SolverResourceLimitsCPU:     "100m",
			SolverResourceLimitsMemory:  "64Mi",
			SolverRunAsNonRoot:          true,
		},
		ACMEDNS01Config:                          config.ACMEDNS01Config{CheckRetryPeriod: 10 * time.Second},
		CertificateRequestMinimumBackoffDuration: time.Hour,
		CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
	}
	logsapi.SetRecommendedLoggingConfiguration(&cfg.Logging)
	return cfg, nil
}

// enabledControllers reads --controllers as upstream does: "*" is the
// default set, "-name" takes one out, "name" adds one; an unknown name is
// an error.
func enabledControllers(list []string) ([]string, error) {
	on := sets.New[string]()
	var off []string
	for _, c := range list {
		name := c
		if len(c) > 1 && c[0] == '-' {
			name = c[1:]
		}
		switch {
		case c == "*":
			on.Insert(defaultEnabled...)
		case !slices.Contains(allControllers, name):
			return nil, fmt.Errorf("unknown controller %q in --controllers", name)
		case name != c:
			off = append(off, name)
		default:
			on.Insert(name)
		}
	}
	on.Delete(off...)
	return sets.List(on), nil
}

func run(ctx context.Context, cfg *config.ControllerConfiguration, enabled []string) error {
	log := logf.FromContext(ctx)
	quantity := func(s string) resource.Quantity {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			cmd.Exit(fmt.Errorf("invalid ACME HTTP-01 solver resource %q: %w", s, err))
		}
		return q
	}
	acme := cfg.ACMEHTTP01Config
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         cfg.KubeConfig,
		APIServerHost:      cfg.APIServerHost, //nolint:staticcheck // as upstream
		KubernetesAPIQPS:   cfg.KubernetesAPIQPS,
		KubernetesAPIBurst: cfg.KubernetesAPIBurst,
		Namespace:          cfg.Namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        cfg.ClusterResourceNamespace,
			ClusterIssuerAmbientCredentials: cfg.ClusterIssuerAmbientCredentials,
			IssuerAmbientCredentials:        cfg.IssuerAmbientCredentials,
		},
		ACMEOptions: controllerpkg.ACMEOptions{
			HTTP01SolverImage:                 acme.SolverImage,
			HTTP01SolverResourceRequestCPU:    quantity(acme.SolverResourceRequestCPU),
			HTTP01SolverResourceRequestMemory: quantity(acme.SolverResourceRequestMemory),
			HTTP01SolverResourceLimitsCPU:     quantity(acme.SolverResourceLimitsCPU),
			HTTP01SolverResourceLimitsMemory:  quantity(acme.SolverResourceLimitsMemory),
			ACMEHTTP01SolverRunAsNonRoot:      acme.SolverRunAsNonRoot,
			HTTP01SolverRuntimeClassName:      acme.SolverRuntimeClassName,
			HTTP01SolverNameservers:           acme.SolverNameservers,
			DNS01CheckAuthoritative:           !cfg.ACMEDNS01Config.RecursiveNameserversOnly,
			DNS01Nameservers:                  cfg.ACMEDNS01Config.RecursiveNameservers,
			DNS01CheckRetryPeriod:             cfg.ACMEDNS01Config.CheckRetryPeriod,
		},
		IngressShimOptions: controllerpkg.IngressShimOptions{
			DefaultIssuerName:                 cfg.IngressShimConfig.DefaultIssuerName,
			DefaultIssuerKind:                 cfg.IngressShimConfig.DefaultIssuerKind,
			DefaultIssuerGroup:                cfg.IngressShimConfig.DefaultIssuerGroup,
			DefaultAutoCertificateAnnotations: cfg.IngressShimConfig.DefaultAutoCertificateAnnotations,
			ExtraCertificateAnnotations:       cfg.IngressShimConfig.ExtraCertificateAnnotations,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef:                           cfg.EnableCertificateOwnerRef,
			CopiedAnnotationPrefixes:                 cfg.CopiedAnnotationPrefixes,
			CertificateRequestMinimumBackoffDuration: cfg.CertificateRequestMinimumBackoffDuration,
			CertificateRequestMaximumBackoffDuration: cfg.CertificateRequestMaximumBackoffDuration,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: cfg.MaxConcurrentChallenges},
		ConfigOptions:    controllerpkg.ConfigOptions{EnableGatewayAPI: cfg.GatewayAPIConfig.Enabled, EnableGatewayAPIListenerSet: cfg.GatewayAPIConfig.EnableListenerSet},
	})
	if err != nil {
		return fmt.Errorf("error building controller context: %w", err)
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}

	le := cfg.LeaderElectionConfig
	health := healthz.NewServer(le.HealthzTimeout)
	lis, err := net.Listen("tcp", cfg.HealthzListenAddress)
	if err != nil {
		return fmt.Errorf("failed to listen on healthz address %s: %w", cfg.HealthzListenAddress, err)
	}
	go func() { _ = health.Start(ctx, lis) }()

	start := func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, name := range enabled {
			if name == "clusterissuers" && cfg.Namespace != "" {
				continue
			}
			c, err := controllerpkg.Known()[name](factory)
			if err != nil {
				cmd.Exit(fmt.Errorf("error starting controller %s: %w", name, err))
			}
			log.V(logf.InfoLevel).Info("starting controller", "controller", name)
			wg.Go(func() {
				if err := c.Run(cfg.NumberOfConcurrentWorkers, ctx); err != nil {
					cmd.Exit(fmt.Errorf("error starting controller %s: %w", name, err))
				}
			})
		}
		shared.SharedInformerFactory.Start(ctx.Done())
		shared.KubeSharedInformerFactory.Start(ctx.Done())
		shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
		if shared.GatewaySolverEnabled {
			shared.GWShared.Start(ctx.Done())
		}
		wg.Wait()
		log.V(logf.InfoLevel).Info("control loops exited")
	}
	if !le.Enabled {
		start(ctx)
		return nil
	}
	id, err := os.Hostname()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(shared.RESTConfig)
	if err != nil {
		return err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, "cert-manager-controller", cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id + "-external-cert-manager-controller", EventRecorder: shared.Recorder})
	if err != nil {
		return err
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		ReleaseOnCancel: true, WatchDog: health.LeaderHealthzAdaptor, Name: "cert-manager-controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: start,
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					cmd.Exit(fmt.Errorf("leader election lost"))
				}
			},
		},
	})
	return nil
}

// addFlags are upstream's controller flags that the chart passes or a
// user may set through its values (cert-manager's cmd/controller/app/
// options, named as its --help lists them).
func addFlags(fs *pflag.FlagSet, c *config.ControllerConfiguration) {
	fs.StringVar(&c.KubeConfig, "kubeconfig", c.KubeConfig, "Paths to a kubeconfig. Only required if out-of-cluster.")
	fs.Float32Var(&c.KubernetesAPIQPS, "kube-api-qps", c.KubernetesAPIQPS, "indicates the maximum queries-per-second requests to the Kubernetes apiserver")
	fs.IntVar(&c.KubernetesAPIBurst, "kube-api-burst", c.KubernetesAPIBurst, "the maximum burst queries-per-second of requests sent to the Kubernetes apiserver")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "If set, this limits the scope of cert-manager to a single namespace and ClusterIssuers are disabled.")
	fs.StringVar(&c.ClusterResourceNamespace, "cluster-resource-namespace", c.ClusterResourceNamespace, "Namespace to store resources owned by cluster scoped resources such as ClusterIssuer in.")
	cmd.AddLeaderElectionFlags(fs, &c.LeaderElectionConfig.LeaderElectionConfig, "If true, cert-manager will perform leader election between instances to ensure no more than one instance of cert-manager operates at a time")
	fs.StringSliceVar(&c.Controllers, "controllers", c.Controllers, "A list of controllers to enable. '--controllers=*' enables all on-by-default controllers, '--controllers=foo' enables just the controller named 'foo', '--controllers=*,-foo' disables the controller named 'foo'.")
	fs.BoolVar(&c.IssuerAmbientCredentials, "issuer-ambient-credentials", c.IssuerAmbientCredentials, "Whether an issuer may make use of ambient credentials.")
	fs.BoolVar(&c.ClusterIssuerAmbientCredentials, "cluster-issuer-ambient-credentials", c.ClusterIssuerAmbientCredentials, "Whether a cluster-issuer may make use of ambient credentials.")
	fs.BoolVar(&c.EnableCertificateOwnerRef, "enable-certificate-owner-ref", c.EnableCertificateOwnerRef, "Whether to set the certificate resource as an owner of secret where the tls certificate is stored.")
	fs.StringSliceVar(&c.CopiedAnnotationPrefixes, "copied-annotation-prefixes", c.CopiedAnnotationPrefixes, "Specify which annotations should/shouldn't be copied from Certificate to CertificateRequest and Order.")
	fs.IntVar(&c.NumberOfConcurrentWorkers, "concurrent-workers", c.NumberOfConcurrentWorkers, "The number of concurrent workers for each controller.")
	fs.IntVar(&c.MaxConcurrentChallenges, "max-concurrent-challenges", c.MaxConcurrentChallenges, "The maximum number of challenges that can be scheduled as 'processing' at once.")
	fs.StringVar(&c.ACMEHTTP01Config.SolverImage, "acme-http01-solver-image", c.ACMEHTTP01Config.SolverImage, "The docker image to use to solve ACME HTTP01 challenges.")
	fs.StringVar(&c.ACMEHTTP01Config.SolverRuntimeClassName, "acme-http01-solver-runtime-class-name", c.ACMEHTTP01Config.SolverRuntimeClassName, "The runtime class for the ACME HTTP01 solver pods.")
	fs.StringSliceVar(&c.ACMEDNS01Config.RecursiveNameservers, "dns01-recursive-nameservers", c.ACMEDNS01Config.RecursiveNameservers, "A list of comma separated dns server endpoints used for DNS01 and DNS-over-HTTPS (DoH) check requests.")
	fs.BoolVar(&c.ACMEDNS01Config.RecursiveNameserversOnly, "dns01-recursive-nameservers-only", c.ACMEDNS01Config.RecursiveNameserversOnly, "When true, cert-manager will only ever query the configured DNS resolvers to perform the ACME DNS01 self check.")
	fs.StringVar(&c.IngressShimConfig.DefaultIssuerName, "default-issuer-name", c.IngressShimConfig.DefaultIssuerName, "Name of the Issuer to use when the tls is requested but issuer name is not specified on the ingress resource.")
	fs.StringVar(&c.IngressShimConfig.DefaultIssuerKind, "default-issuer-kind", c.IngressShimConfig.DefaultIssuerKind, "Kind of the Issuer to use when the tls is requested but issuer kind is not specified on the ingress resource.")
	fs.StringVar(&c.IngressShimConfig.DefaultIssuerGroup, "default-issuer-group", c.IngressShimConfig.DefaultIssuerGroup, "Group of the Issuer to use when the tls is requested but issuer group is not specified on the ingress resource.")
	fs.StringVar(&c.HealthzListenAddress, "healthz-listen-address", c.HealthzListenAddress, "The host and port that the healthz server should listen on.")
	fs.StringVar(&c.MetricsListenAddress, "metrics-listen-address", c.MetricsListenAddress, "The host and port that the metrics endpoint should listen on.")
	fs.Var(cliflag.NewMapStringBool(&c.FeatureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features.")
	logf.AddFlags(&c.Logging, fs)
}
