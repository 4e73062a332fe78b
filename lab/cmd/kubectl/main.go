// Command kubectl is upstream's kubectl, built from the same Kubernetes
// release as the lab's apiserver, for tests that check what a user would
// check with it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
