package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/mgmtctl/mgmtctl/internal/localfile"
)

// hostKeys verifies host keys against known_hosts files. A missing file is
// an empty one: the host is then unknown, which is an error like any other.
type hostKeys struct {
	files []string
	cb    ssh.HostKeyCallback
	// acceptNew trusts the key of an unknown host (never a changed one)
	// and records it in learned.
	acceptNew bool
	learned   ssh.PublicKey
	// presented is the key the host showed in the last handshake that
	// passed verification.
	presented ssh.PublicKey
}

func newHostKeys(files []string) (*hostKeys, error) {
	var present []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			present = append(present, f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
	}
	hk := &hostKeys{files: files}
	if len(present) > 0 {
		cb, err := knownhosts.New(present...)
		if err != nil {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
		hk.cb = cb
	}
	return hk, nil
}

// algorithms returns the host key algorithms known_hosts has for addr, so
// the server is asked for a key we can verify rather than its favourite one
// (which would look like a changed key).
func (hk *hostKeys) algorithms(addr string) []string {
	// For a host known_hosts says nothing about, ask for ed25519 first, so
	// a learned key is the one people compare (ssh-keygen -lf ..._ed25519_key.pub).
	preferred := []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	if hk.cb == nil {
		return preferred
	}
	err := hk.cb(addr, &net.TCPAddr{}, probeKey{})
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return preferred
	}
	var algos []string
	seen := map[string]bool{}
	for _, k := range ke.Want {
		t := k.Key.Type()
		var list []string
		switch t {
		case ssh.KeyAlgoRSA:
			list = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		default:
			list = []string{t}
		}
		for _, a := range list {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	return algos
}

// callback verifies the key for name (the address as dialled).
func (hk *hostKeys) callback(name string) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := hk.verify(name, remote, key)
		if err == nil {
			hk.presented = key
		}
		return err
	}
}

func (hk *hostKeys) verify(name string, remote net.Addr, key ssh.PublicKey) error {
	{
		host := knownhosts.Normalize(name)
		hkErr := &HostKeyError{Host: host, Addr: name, Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(),
			KnownHosts: strings.Join(hk.files, ", ")}
		h, port, _ := net.SplitHostPort(name)
		portFlag := ""
		if port != "" && port != "22" {
			portFlag = " -p " + port
		}
		hkErr.Hint = fmt.Sprintf("add it with: ssh-keyscan -t %s%s %s >> %s", keyFileName(key.Type()), portFlag, h, firstOr(hk.files, "~/.ssh/known_hosts"))
		if hk.cb == nil {
			if hk.acceptNew {
				hk.learned = key
				return nil
			}
			return hkErr
		}
		err := hk.cb(name, remote, key)
		if err == nil {
			return nil
		}
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) {
			return err
		}
		for _, k := range ke.Want {
			hkErr.Known = append(hkErr.Known, fmt.Sprintf("%s %s (%s:%d)", k.Key.Type(), ssh.FingerprintSHA256(k.Key), k.Filename, k.Line))
		}
		if hkErr.Changed() {
			hkErr.Hint = fmt.Sprintf("remove the old entry with: ssh-keygen -R %s -f %s", host, ke.Want[0].Filename)
		} else if hk.acceptNew {
			hk.learned = key
			return nil
		}
		return hkErr
	}
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// probeKey is a key no known_hosts line matches; checking it makes the
// callback list the keys it does know.
type probeKey struct{}

func (probeKey) Type() string                        { return "mgmtctl-probe" }
func (probeKey) Marshal() []byte                     { return []byte("mgmtctl-probe") }
func (probeKey) Verify([]byte, *ssh.Signature) error { return errors.New("probe") }

// RememberHostKey records key for addr in the known_hosts file, replacing
// whatever that file said about addr before (a VM re-created by this run
// brings a new key). The file is rewritten atomically, mode 0600.
func RememberHostKey(file, addr string, key ssh.PublicKey) error {
	keep, _, err := linesWithout(file, addr)
	if err != nil {
		return err
	}
	keep = append(keep, knownhosts.Line([]string{knownhosts.Normalize(addr)}, key))
	return localfile.Write(file, []byte(strings.Join(keep, "\n")+"\n"))
}

// ForgetHostKey removes what the known_hosts file says about addr.
func ForgetHostKey(file, addr string) error {
	keep, exists, err := linesWithout(file, addr)
	if err != nil || !exists {
		return err
	}
	out := ""
	if len(keep) > 0 {
		out = strings.Join(keep, "\n") + "\n"
	}
	return localfile.Write(file, []byte(out))
}

// KnowsHost reports whether the known_hosts file has an entry for addr.
func KnowsHost(file, addr string) (bool, error) {
	old, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	host := knownhosts.Normalize(addr)
	for _, line := range strings.Split(string(old), "\n") {
		if f := strings.Fields(line); len(f) > 0 && containsHost(f[0], host) {
			return true, nil
		}
	}
	return false, nil
}

// linesWithout reads a known_hosts file without its blank lines and the
// lines naming addr; a missing file is empty.
func linesWithout(file, addr string) (keep []string, exists bool, err error) {
	old, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	host := knownhosts.Normalize(addr)
	for _, line := range strings.Split(string(old), "\n") {
		if f := strings.Fields(line); len(f) == 0 || containsHost(f[0], host) {
			continue
		}
		keep = append(keep, line)
	}
	return keep, true, nil
}

func containsHost(field, host string) bool {
	for _, h := range strings.Split(field, ",") {
		if h == host {
			return true
		}
	}
	return false
}
