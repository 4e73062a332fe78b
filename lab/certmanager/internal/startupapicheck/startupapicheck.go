// Package startupapicheck is what cert-manager's startupapicheck image
// runs as the chart's post-install hook Job: `check api --wait=<d>`,
// cmctl's check (cert-manager/cmctl pkg/check/api) on
// pkg/util/cmapichecker: a dry-run CertificateRequest through the API
// server, which only passes once the CRDs are served, the webhook
// answers and cainjector has injected its CA. It polls until the check
// passes or --wait runs out; then it exits 1, and helm's hook (and so the
// install) fails.
package startupapicheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/cmd"
	"github.com/cert-manager/cert-manager/pkg/util/cmapichecker"
)

// Main runs the command with os.Args, as its image's entrypoint does.
func Main() {
	ctx, stop := cmd.Context()
	defer stop()
	fs := pflag.NewFlagSet("startupapicheck", pflag.ContinueOnError)
	waitFor := fs.Duration("wait", 0, "Wait until the cert-manager API is ready (default 0s = poll once)")
	interval := fs.Duration("interval", 5*time.Second, "Time between checks when waiting")
	verbose := fs.BoolP("verbose", "v", false, "Print detailed error messages")
	kubeconfig := fs.String("kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	namespace := fs.StringP("namespace", "n", os.Getenv("POD_NAMESPACE"), "If present, the namespace scope for this CLI request")
	if err := fs.Parse(os.Args[1:]); err != nil {
		cmd.Exit(err)
	}
	if args := fs.Args(); len(args) != 2 || args[0] != "check" || args[1] != "api" {
		cmd.Exit(fmt.Errorf("unknown command %q: the lab's startupapicheck runs `check api` only", fs.Args()))
	}
	if *namespace == "" {
		*namespace = "default"
	}
	restcfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		cmd.Exit(err)
	}
	checker, err := cmapichecker.New(restcfg, *namespace)
	if err != nil {
		cmd.Exit(err)
	}
	var last error
	check := func(ctx context.Context) (bool, error) {
		if last = checker.Check(ctx); last != nil {
			simple := cmapichecker.TranslateToSimpleError(last)
			if simple == nil {
				simple = last
			}
			if *verbose && !errors.Is(simple, last) {
				fmt.Fprintf(os.Stderr, "Not ready: %v (%v)\n", simple, last)
			} else {
				fmt.Fprintf(os.Stderr, "Not ready: %v\n", simple)
			}
			return false, nil
		}
		return true, nil
	}
	if *waitFor <= 0 {
		// No --wait: one check.
		if ok, _ := check(ctx); !ok {
			cmd.Exit(fmt.Errorf("the cert-manager API is not ready: %w", last))
		}
	} else {
		wctx, cancel := context.WithTimeout(ctx, *waitFor)
		defer cancel()
		if err := wait.PollUntilContextCancel(wctx, *interval, true, check); err != nil {
			if last != nil {
				cmd.Exit(fmt.Errorf("timed out waiting for the cert-manager API to be ready: %w", last))
			}
			cmd.Exit(err)
		}
	}
	fmt.Println("The cert-manager API is ready")
}
