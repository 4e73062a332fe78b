// Package k3s is the lab's k3s: the version it was "released" as is
// carried in a trailer appended to the binary (so each version has its own
// bytes and sha256, as upstream's releases do), and `k3s server` runs a real
// kube-apiserver over an embedded etcd, configured the way k3s configures it.
package k3s

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// Trailer marks the version appended to a released binary.
const Trailer = "\n#k3s-lab-version:"

// Version reads the version from the running binary's trailer.
func Version() string {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return "v0.0.0+k3s-dev"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < 128 {
		return "v0.0.0+k3s-dev"
	}
	buf := make([]byte, 128)
	if _, err := f.ReadAt(buf, fi.Size()-128); err != nil {
		return "v0.0.0+k3s-dev"
	}
	i := bytes.LastIndex(buf, []byte(Trailer))
	if i < 0 {
		return "v0.0.0+k3s-dev"
	}
	return strings.TrimSpace(string(buf[i+len(Trailer):]))
}

// commit is the 8-hex "git commit" printed beside the version.
func commit(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:4])
}

// Main dispatches k3s's subcommands.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "Incorrect Usage. See 'k3s --help'.")
		return 1
	}
	switch args[0] {
	case "--version", "-v", "version":
		v := Version()
		// docs/upstream.md §2.2: two lines, version with the commit's first 8
		// hex digits, then the Go runtime version.
		fmt.Fprintf(stdout, "k3s version %s (%s)\ngo version %s\n", v, commit(v), runtime.Version())
		return 0
	case "etcd-snapshot":
		return EtcdSnapshot(args[1:], stdout, stderr)
	case "secrets-encrypt":
		return SecretsEncrypt(args[1:], stdout, stderr)
	case "server":
		if err := Server(args[1:], stderr); err != nil {
			fmt.Fprintf(stderr, "level=fatal msg=%q\n", err.Error())
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "No help topic for '%s'\n", args[0])
	return 3
}
