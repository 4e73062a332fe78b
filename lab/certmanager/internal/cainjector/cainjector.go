// Package cainjector is cert-manager's CA injector as its image runs it
// (quay.io/jetstack/cert-manager-cainjector): with the configuration's
// defaults (internal/apis/config/cainjector/v1alpha1) and the flags
// upstream's command takes, a controller-runtime manager with a
// reconciler per injectable kind (pkg/controller/cainjector), leader
// elected on the Lease cert-manager-cainjector-leader-election. It writes
// the CA of a Certificate's Secret (cert-manager.io/inject-ca-from) or of
// a Secret (cert-manager.io/inject-ca-from-secret) into the webhook
// configurations and CRDs that ask for it.
package cainjector

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/cmd"
	config "github.com/cert-manager/cert-manager/internal/apis/config/cainjector"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/cainjector/scheme"
	"github.com/cert-manager/cert-manager/internal/apis/config/cainjector/validation"
	configv1alpha1 "github.com/cert-manager/cert-manager/pkg/apis/config/cainjector/v1alpha1"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The cainjector's feature gates, registered as upstream's command registers them.
	_ "github.com/cert-manager/cert-manager/internal/cainjector/feature"
)

// Main runs the command with os.Args, as its image's entrypoint does.
func Main() {
	ctx, stop := cmd.Context()
	defer stop()
	logf.InitLogs()

	cfg, err := defaults()
	if err != nil {
		cmd.Exit(err)
	}
	fs := pflag.NewFlagSet("cainjector", pflag.ContinueOnError)
	addFlags(fs, cfg)
	cmd.ParseFlagsOnly(fs, os.Args[1:], "Path to a file containing a CAInjectorConfiguration object used to configure the cainjector", &cfg.Logging, &cfg.FeatureGates)
	if errs := validation.ValidateCAInjectorConfiguration(cfg, field.NewPath("config")); len(errs) > 0 {
		cmd.Exit(fmt.Errorf("error validating flags: %w", errs.ToAggregate()))
	}
	log := logf.Log.WithName("cainjector")
	ctx = logf.NewContext(ctx, log)
	ctrl.SetLogger(log)

	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.KubeConfig)
	if err != nil {
		cmd.Exit(err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")

	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	var namespaces map[string]cache.Config
	if cfg.Namespace != "" {
		namespaces = map[string]cache.Config{cfg.Namespace: {}}
	}
	le := cfg.LeaderElectionConfig
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: namespaces},
		// Secrets are read from the API server, not cached: upstream
		// keeps every Secret of a cluster out of its memory.
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:                le.Enabled,
		LeaderElectionNamespace:       le.Namespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionLabels:          map[string]string{"app.kubernetes.io/managed-by": "cert-manager-cainjector"},
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaseDuration:                 &le.LeaseDuration,
		RenewDeadline:                 &le.RenewDeadline,
		RetryPeriod:                   &le.RetryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsListenAddress},
	})
	if err != nil {
		cmd.Exit(fmt.Errorf("error creating manager: %v", err))
	}

	// With Certificates as a data source, wait (up to five minutes) for
	// their CRD, as upstream's command does before it registers.
	if cfg.EnableDataSourceConfig.Certificates {
		direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			cmd.Exit(fmt.Errorf("failed to create client: %w", err))
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			var crd apiext.CustomResourceDefinition
			err := direct.Get(ctx, types.NamespacedName{Name: "certificates.cert-manager.io"}, &crd)
			if apierrors.IsNotFound(err) {
				log.Info("cainjector has been configured to watch certificates, but certificates.cert-manager.io CRD not found, retrying with a backoff...")
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			cmd.Exit(err)
		}
	}

	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    cfg.Namespace,
		IgnoreNamespaces:             cfg.IgnoreNamespaces,
		EnableCertificatesDataSource: cfg.EnableDataSourceConfig.Certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   cfg.EnableInjectableConfig.MutatingWebhookConfigurations,
			cainjector.ValidatingWebhookConfigurationName: cfg.EnableInjectableConfig.ValidatingWebhookConfigurations,
			cainjector.APIServiceName:                     cfg.EnableInjectableConfig.APIServices,
			cainjector.CustomResourceDefinitionName:       cfg.EnableInjectableConfig.CustomResourceDefinitions,
		},
	})
	if err != nil {
		cmd.Exit(fmt.Errorf("failed to register controllers: %w", err))
	}
	if err := mgr.Start(ctx); err != nil {
		cmd.Exit(fmt.Errorf("error running manager: %v", err))
	}
}

// defaults is the configuration upstream defaults to: the versioned
// type's defaults, converted to the internal one.
func defaults() (*config.CAInjectorConfiguration, error) {
	scheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return nil, err
	}
	versioned := &configv1alpha1.CAInjectorConfiguration{}
	scheme.Default(versioned)
	cfg := &config.CAInjectorConfiguration{}
	if err := scheme.Convert(versioned, cfg, nil); err != nil {
		return nil, err
	}
	return cfg, nil
}

// addFlags are upstream's cainjector flags (cert-manager's
// cmd/cainjector/app/options, named as its --help lists them).
func addFlags(fs *pflag.FlagSet, c *config.CAInjectorConfiguration) {
	fs.StringVar(&c.KubeConfig, "kubeconfig", c.KubeConfig, "Paths to a kubeconfig. Only required if out-of-cluster.")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "If set, this limits the scope of cainjector to a single namespace.")
	fs.StringSliceVar(&c.IgnoreNamespaces, "ignore-namespaces", c.IgnoreNamespaces, "Namespaces cainjector does not inject into.")
	cmd.AddLeaderElectionFlags(fs, &c.LeaderElectionConfig, "If true, cainjector will perform leader election.")
	fs.BoolVar(&c.EnableDataSourceConfig.Certificates, "enable-certificates-data-source", c.EnableDataSourceConfig.Certificates, "Enable configuring cert-manager.io Certificate resources as potential sources for CA data.")
	fs.BoolVar(&c.EnableInjectableConfig.ValidatingWebhookConfigurations, "enable-validatingwebhookconfigurations-injectable", c.EnableInjectableConfig.ValidatingWebhookConfigurations, "Inject CA data into annotated ValidatingWebhookConfigurations.")
	fs.BoolVar(&c.EnableInjectableConfig.MutatingWebhookConfigurations, "enable-mutatingwebhookconfigurations-injectable", c.EnableInjectableConfig.MutatingWebhookConfigurations, "Inject CA data into annotated MutatingWebhookConfigurations.")
	fs.BoolVar(&c.EnableInjectableConfig.CustomResourceDefinitions, "enable-customresourcedefinitions-injectable", c.EnableInjectableConfig.CustomResourceDefinitions, "Inject CA data into annotated CustomResourceDefinitions.")
	fs.BoolVar(&c.EnableInjectableConfig.APIServices, "enable-apiservices-injectable", c.EnableInjectableConfig.APIServices, "Inject CA data into annotated APIServices.")
	fs.BoolVar(&c.EnablePprof, "enable-profiling", c.EnablePprof, "Enable profiling for cainjector.")
	fs.StringVar(&c.PprofAddress, "profiler-address", c.PprofAddress, "The host and port that Go profiler should listen on.")
	fs.Var(cliflag.NewMapStringBool(&c.FeatureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features.")
	fs.StringVar(&c.MetricsListenAddress, "metrics-listen-address", c.MetricsListenAddress, "The host and port that the metrics endpoint should listen on. The value '0' disables the metrics server")
	logf.AddFlags(&c.Logging, fs)
}
