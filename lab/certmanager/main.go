// Command cert-manager is upstream's cert-manager controller, webhook,
// cainjector and startupapicheck in one binary, as the lab's kubelet runs
// them for the pods of their images: which one runs is the name it is run
// by (bin/cert-manager-<component>-<version>, links to this binary), or,
// run by hand, its first argument. One binary per version, linked once,
// rather than four: the lab builds two versions in every test process.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/cainjector"
	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/controller"
	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/startupapicheck"
	"github.com/cert-manager/cert-manager/cmd/mgmtctl-lab/internal/webhook"
)

// Components are the images' entrypoints, by the name the images carry
// (quay.io/jetstack/cert-manager-<component>).
var Components = map[string]func(){
	"controller":      controller.Main,
	"webhook":         webhook.Main,
	"cainjector":      cainjector.Main,
	"startupapicheck": startupapicheck.Main,
}

// component is the component a binary name names: cert-manager-<component>
// or cert-manager-<component>-<version>.
func component(name string) (func(), bool) {
	rest, ok := strings.CutPrefix(filepath.Base(name), "cert-manager-")
	if !ok {
		return nil, false
	}
	for c, run := range Components {
		if rest == c || strings.HasPrefix(rest, c+"-") {
			return run, true
		}
	}
	return nil, false
}

func main() {
	if run, ok := component(os.Args[0]); ok {
		run()
		return
	}
	if len(os.Args) > 1 {
		if run, ok := Components[os.Args[1]]; ok {
			os.Args = append([]string{"cert-manager-" + os.Args[1]}, os.Args[2:]...)
			run()
			return
		}
	}
	fmt.Fprintln(os.Stderr, "usage: cert-manager {controller|webhook|cainjector|startupapicheck} [flags], or run as cert-manager-<component>[-<version>]")
	os.Exit(2)
}
