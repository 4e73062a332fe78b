// Command mgmtctl builds a Cluster API management cluster on Proxmox VE.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"golang.org/x/term"

	"github.com/mgmtctl/mgmtctl/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	// The first Ctrl-C cancels the run's context: the engine stops after
	// the step in flight (a mutating remote command runs to its end) and
	// prints the recap. A second one exits at once.
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "\ninterrupt: stopping after the step in flight (press Ctrl-C again to exit now)")
		cancel()
		<-sig
		os.Exit(cli.ExitInterrupted)
	}()

	home, _ := os.UserHomeDir()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	hostname, _ := os.Hostname()
	code := cli.Execute(ctx, os.Args[1:], cli.Options{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		Terminal: term.IsTerminal(int(os.Stdout.Fd())),
		Getenv:   os.Getenv,
		Home:     home, CacheDir: cache, Hostname: hostname, Pid: os.Getpid(),
		Version: buildVersion(),
	})
	cancel()
	os.Exit(code)
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
		return v + " " + bi.GoVersion
	}
	return "dev"
}
