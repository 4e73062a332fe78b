// Command k3s is the lab's stand-in for the k3s binary: `k3s --version`
// in upstream's format for the version it was released as, and `k3s server`
// running a real kube-apiserver (with an embedded etcd) configured from
// /etc/rancher/k3s/config.yaml, as k3s does.
package main

import (
	"os"

	"github.com/mgmtctl/mgmtctl/lab/internal/k3s"
)

func main() { os.Exit(k3s.Main(os.Args[1:], os.Stdout, os.Stderr)) }
