package remote

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func newKey(t *testing.T) ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRememberAndForgetHostKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mgmtctl", "known_hosts")
	if err := ForgetHostKey(file, "192.0.2.50:22"); err != nil {
		t.Fatalf("forget in a missing file: %v", err)
	}
	other, old, fresh := newKey(t), newKey(t), newKey(t)
	for _, step := range []struct {
		addr string
		key  ssh.PublicKey
	}{{"192.0.2.60:22", other}, {"192.0.2.50:22", old}, {"192.0.2.50:22", fresh}} {
		if err := RememberHostKey(file, step.addr, step.key); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(file)
	s := string(b)
	enc := func(k ssh.PublicKey) string { return strings.Fields(string(ssh.MarshalAuthorizedKey(k)))[1] }
	if strings.Count(s, "\n") != 2 || !strings.Contains(s, "192.0.2.60 ssh-ed25519 "+enc(other)) || !strings.Contains(s, "192.0.2.50 ssh-ed25519 "+enc(fresh)) || strings.Contains(s, enc(old)) {
		t.Errorf("known_hosts:\n%s", s)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if err := ForgetHostKey(file, "192.0.2.50:22"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != "192.0.2.60 ssh-ed25519 "+enc(other)+"\n" {
		t.Errorf("after forget:\n%s", b)
	}
}
