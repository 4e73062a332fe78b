// Package sshtest starts a real OpenSSH sshd on 127.0.0.1 for tests, with
// a fresh host key and a client key that may log in as the current user.
package sshtest

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Server is a running sshd.
type Server struct {
	Addr       string // 127.0.0.1:port
	Dir        string
	User       string
	HostKey    ssh.PublicKey
	ClientKey  string // path of the client's private key
	KnownHosts string // path of a known_hosts file vouching for HostKey
	cmd        *exec.Cmd
}

// SSHD is where Debian's openssh-server puts the daemon.
const SSHD = "/usr/sbin/sshd"

// Start runs sshd for the duration of the test. It skips, saying why, when
// sshd is not installed or the test does not run as root (sshd needs root
// to switch users and to own its privilege-separation directory).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		t.Skipf("OpenSSH server not installed (%s); .ci/run installs openssh-server", SSHD)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run sshd")
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{Dir: dir, User: "root"}
	hostPriv := writeKey(t, filepath.Join(dir, "ssh_host_ed25519_key"))
	s.HostKey = hostPriv.PublicKey()
	s.ClientKey = filepath.Join(dir, "id_ed25519")
	client := writeKey(t, s.ClientKey)
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(client.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/ssh_host_ed25519_key
PidFile %s/sshd.pid
AuthorizedKeysFile %s/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
MaxSessions 50
MaxStartups 50
LogLevel INFO
`, port, dir, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.KnownHosts = filepath.Join(dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKey) + "\n"
	if err := os.WriteFile(s.KnownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(SSHD, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	// sshd says when it listens; wait for that line rather than polling.
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var lines []string
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Server listening on") {
				ready <- nil
				go func() {
					for sc.Scan() {
						if os.Getenv("SSHTEST_LOG") != "" {
							fmt.Fprintln(os.Stderr, "sshd:", sc.Text())
						}
					}
				}()
				return
			}
			lines = append(lines, sc.Text())
		}
		ready <- fmt.Errorf("sshd exited: %s", strings.Join(lines, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sshd did not start listening in 30s")
	}
	return s
}

func writeKey(t testing.TB, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o644); err != nil {
		t.Fatal(err)
	}
	return signer
}

// Stop kills sshd (to test a host that goes away).
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
