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

	logf "github.com/cert-manager/cert-manager/pkg/logs"
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

// Exit prints err and exits 1.
func Exit(err error) {
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	logf.FlushLogs()
	os.Exit(1)
}
