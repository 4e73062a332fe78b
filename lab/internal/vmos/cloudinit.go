// Package vmos simulates the parts of Ubuntu 24.04 the phases touch on the
// VM, each after the version noble ships: cloud-init's status command
// (cloud-init 24.1, cloudinit/cmd/status.py), apt-get and dpkg-query
// (apt 2.7 cmdline/apt-get.cc, dpkg 1.22 src/query/main.c, the
// ${Status} field) and systemctl's start, stop, restart, enable, disable,
// is-active, is-enabled, status and show (systemd 255 src/systemctl/).
package vmos

import (
	"fmt"
	"io"
	"os"
	"time"
)

const (
	statusFile = "/run/cloud-init/status.json"
	resultFile = "/run/cloud-init/result.json"
)

// CloudInit implements `cloud-init status [--wait] [--long]`: "status:
// running" until cloud-init's result is written, then "status: done";
// --wait prints a dot per check while it waits, as upstream does.
func CloudInit(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, "usage: cloud-init status [--wait] [--long]")
		return 2
	}
	wait := false
	for _, a := range args[1:] {
		switch a {
		case "--wait", "-w":
			wait = true
		case "--long", "-l", "--format=tabular":
		default:
			fmt.Fprintf(stderr, "cloud-init status: error: unrecognized arguments: %s\n", a)
			return 2
		}
	}
	state := func() string {
		if _, err := os.Stat(resultFile); err == nil {
			return "done"
		}
		if _, err := os.Stat(statusFile); err == nil {
			return "running"
		}
		return "not started"
	}
	if wait {
		dots := false
		for state() != "done" {
			fmt.Fprint(stdout, ".")
			dots = true
			// A simulated binary on the guest: it checks its own state
			// files, as the real one checks /run/cloud-init.
			<-time.After(250 * time.Millisecond)
		}
		if dots {
			fmt.Fprintln(stdout)
		}
	}
	fmt.Fprintf(stdout, "status: %s\n", state())
	return 0
}
