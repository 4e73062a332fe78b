// Package webhook is cert-manager's webhook as its image runs it
// (quay.io/jetstack/cert-manager-webhook): the flags of
// pkg/webhook/options, then the server internal/webhook builds with every
// cert-manager resource's validation, defaulting and conversion, serving
// with a certificate from its dynamic CA (the chart's
// --dynamic-serving-ca-secret-* flags) until SIGTERM.
package webhook

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/cmd"
	"github.com/cert-manager/cert-manager/internal/apis/config/webhook/validation"
	cmwebhook "github.com/cert-manager/cert-manager/internal/webhook"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/webhook/configfile"
	"github.com/cert-manager/cert-manager/pkg/webhook/options"
)

// Main runs the command with os.Args, as its image's entrypoint does.
func Main() {
	ctx, stop := cmd.Context()
	defer stop()
	logf.InitLogs()

	cfg, err := options.NewWebhookConfiguration()
	if err != nil {
		cmd.Exit(err)
	}
	flags := options.NewWebhookFlags()
	fs := pflag.NewFlagSet("webhook", pflag.ContinueOnError)
	flags.AddFlags(fs)
	options.AddConfigFlags(fs, cfg)
	cmd.Parse(fs, os.Args[1:], &cfg.Logging)
	if flags.Config != "" {
		// The file is read first and the flags win, as upstream's
		// command loads it.
		data, err := os.ReadFile(flags.Config)
		if err != nil {
			cmd.Exit(fmt.Errorf("failed to load config file %s: %w", flags.Config, err))
		}
		file := configfile.New()
		if err := file.DecodeAndConfigure(data); err != nil {
			cmd.Exit(fmt.Errorf("failed to load config file %s: %w", flags.Config, err))
		}
		cfg = file.Config
		options.AddConfigFlags(fs, cfg)
		cmd.Parse(fs, os.Args[1:], &cfg.Logging)
	}
	if errs := validation.ValidateWebhookConfiguration(cfg, field.NewPath("config")); len(errs) > 0 {
		cmd.Exit(fmt.Errorf("error validating flags: %w", errs.ToAggregate()))
	}

	log := logf.Log.WithName("webhook")
	ctx = logf.NewContext(ctx, log)
	srv, err := cmwebhook.NewCertManagerWebhookServer(log, *cfg)
	if err != nil {
		cmd.Exit(err)
	}
	if err := srv.Run(ctx); err != nil {
		cmd.Exit(err)
	}
}
