// Package cmd is what the lab's cert-manager commands share: a context
// cancelled on SIGTERM or SIGINT (the kubelet stops a container with
// SIGTERM), flag parsing as upstream's commands parse (pflag, an unknown
// flag an error, exit 1), and logging set up from the --v and --logging-format
// flags through cert-manager's logs package.
package cmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cert-manager/cert-manager/internal/apis/config/shared"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
)

// Context is cancelled when the process is asked to stop.
func Context() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// Parse parses args into fs and applies the logging configuration; a bad
// flag or value ends the process as upstream's cobra commands do (the error
// on stderr, exit 1).
func Parse(fs *pflag.FlagSet, args []string, logging *logsapi.LoggingConfiguration) {
	if err := fs.Parse(args); err != nil {
		Exit(err)
	}
	if err := logf.ValidateAndApply(logging); err != nil {
		Exit(err)
	}
}

// ParseFlagsOnly is Parse for a command the lab configures by flags
// alone: it takes upstream's --config (a configuration file) and refuses
// it (configUsage is upstream's help for it), then sets the feature gates
// the flags named.
func ParseFlagsOnly(fs *pflag.FlagSet, args []string, configUsage string, logging *logsapi.LoggingConfiguration, gates *map[string]bool) {
	var configFile string
	fs.StringVar(&configFile, "config", "", configUsage)
	Parse(fs, args, logging)
	if configFile != "" {
		Exit(fmt.Errorf("--config: the lab's %s takes its configuration from flags only", fs.Name()))
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(*gates); err != nil {
		Exit(fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err))
	}
}

// AddLeaderElectionFlags are the leader-election flags the controller and
// cainjector both take, named and described as their --help lists them;
// electUsage is each one's own help for --leader-elect.
func AddLeaderElectionFlags(fs *pflag.FlagSet, c *shared.LeaderElectionConfig, electUsage string) {
	fs.BoolVar(&c.Enabled, "leader-elect", c.Enabled, electUsage)
	fs.StringVar(&c.Namespace, "leader-election-namespace", c.Namespace, "Namespace used to perform leader election.")
	fs.DurationVar(&c.LeaseDuration, "leader-election-lease-duration", c.LeaseDuration, "The duration that non-leader candidates will wait after observing a leadership renewal.")
	fs.DurationVar(&c.RenewDeadline, "leader-election-renew-deadline", c.RenewDeadline, "The interval between attempts by the acting master to renew a leadership slot.")
	fs.DurationVar(&c.RetryPeriod, "leader-election-retry-period", c.RetryPeriod, "The duration the clients should wait between attempting acquisition and renewal of a leadership.")
}

// Exit prints err and exits 1.
func Exit(err error) {
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	logf.FlushLogs()
	os.Exit(1)
}
