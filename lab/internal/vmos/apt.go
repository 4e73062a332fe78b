package vmos

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Root is "/" on a VM; tests point it elsewhere.
var Root = "/"

func p(rel string) string { return filepath.Join(Root, rel) }

// archive is what the simulated Ubuntu archive offers: package -> version,
// and the systemd unit the package ships.
var archive = map[string]struct{ version, unit string }{
	"qemu-guest-agent": {"1:8.2.2+ds-0ubuntu1.4", "qemu-guest-agent.service"},
	"curl":             {"8.5.0-2ubuntu10.6", ""},
}

const dpkgDir = "var/lib/labsim/dpkg"

func installed(pkg string) bool {
	_, err := os.Stat(p(filepath.Join(dpkgDir, pkg)))
	return err == nil
}

// AptGet implements `apt-get [-y] [-q] update|install PKG...`, with apt's
// messages and exit code 100 on errors, including the lock that cloud-init
// holds while it still runs on first boot.
func AptGet(args []string, stdout, stderr io.Writer) int {
	var words []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
		}
	}
	if len(words) == 0 {
		fmt.Fprintln(stderr, "E: Invalid operation")
		return 100
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)")
		fmt.Fprintln(stderr, "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?")
		return 100
	}
	if _, err := os.Stat(p(resultFile)); err != nil {
		fmt.Fprintln(stderr, "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1342 (apt-get)")
		fmt.Fprintln(stderr, "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?")
		return 100
	}
	switch words[0] {
	case "update":
		fmt.Fprintln(stdout, "Hit:1 http://archive.ubuntu.com/ubuntu noble InRelease\nReading package lists...")
		return 0
	case "install":
	default:
		fmt.Fprintf(stderr, "E: Invalid operation %s\n", words[0])
		return 100
	}
	fmt.Fprintln(stdout, "Reading package lists...\nBuilding dependency tree...\nReading state information...")
	var missing []string
	for _, pkg := range words[1:] {
		if _, ok := archive[pkg]; !ok {
			fmt.Fprintf(stderr, "E: Unable to locate package %s\n", pkg)
			return 100
		}
		if installed(pkg) {
			fmt.Fprintf(stdout, "%s is already the newest version (%s).\n", pkg, archive[pkg].version)
			continue
		}
		missing = append(missing, pkg)
	}
	if len(missing) > 0 {
		fmt.Fprintf(stdout, "The following NEW packages will be installed:\n  %s\n", strings.Join(missing, " "))
	}
	fmt.Fprintf(stdout, "0 upgraded, %d newly installed, 0 to remove and 0 not upgraded.\n", len(missing))
	for _, pkg := range missing {
		a := archive[pkg]
		fmt.Fprintf(stdout, "Selecting previously unselected package %s.\nUnpacking %s (%s) ...\nSetting up %s (%s) ...\n", pkg, pkg, a.version, pkg, a.version)
		if err := os.MkdirAll(p(dpkgDir), 0o755); err != nil {
			fmt.Fprintln(stderr, "E:", err)
			return 100
		}
		if err := os.WriteFile(p(filepath.Join(dpkgDir, pkg)), []byte(a.version+"\n"), 0o644); err != nil {
			fmt.Fprintln(stderr, "E:", err)
			return 100
		}
		if a.unit != "" {
			unit := fmt.Sprintf("[Unit]\nDescription=QEMU Guest Agent\n\n[Service]\nExecStart=/usr/sbin/qemu-ga\n\n[Install]\nWantedBy=multi-user.target\n")
			_ = os.MkdirAll(p("usr/lib/systemd/system"), 0o755)
			_ = os.WriteFile(p(filepath.Join("usr/lib/systemd/system", a.unit)), []byte(unit), 0o644)
		}
	}
	return 0
}

// DpkgQuery implements `dpkg-query -W -f=FORMAT PKG` for ${Status} and
// ${Version}.
func DpkgQuery(args []string, stdout, stderr io.Writer) int {
	format := "${Package}\t${Version}\n"
	var pkgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-W" || a == "--show":
		case strings.HasPrefix(a, "-f="), strings.HasPrefix(a, "--showformat="):
			format = a[strings.Index(a, "=")+1:]
		case a == "-f":
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		default:
			pkgs = append(pkgs, a)
		}
	}
	code := 0
	for _, pkg := range pkgs {
		if !installed(pkg) {
			fmt.Fprintf(stderr, "dpkg-query: no packages found matching %s\n", pkg)
			code = 1
			continue
		}
		v := archive[pkg].version
		out := strings.NewReplacer("${Status}", "install ok installed", "${Version}", v, "${Package}", pkg, `\n`, "\n").Replace(format)
		fmt.Fprint(stdout, out)
	}
	return code
}
