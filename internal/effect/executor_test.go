package effect_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
	"github.com/mgmtctl/mgmtctl/internal/remote/sshtest"
)

// sshHost connects to a real sshd as the host named name.
func sshHost(t *testing.T, name string) (remote.Host, *sshtest.Server) {
	t.Helper()
	s := sshtest.Start(t)
	d := &remote.Dialer{Retry: remote.Retry{Attempts: 3, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}}
	c, err := d.Connect(context.Background(), remote.Target{Name: name, Addr: s.Addr, User: s.User, KnownHosts: []string{s.KnownHosts},
		Identities: []string{s.ClientKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, s
}

// hostOnly is an executor over one host.
func hostOnly(h remote.Host) *effect.Executor {
	return &effect.Executor{Host: func(ctx context.Context, name string) (remote.Host, error) {
		if name != h.Name() {
			return nil, errors.New("no host " + name)
		}
		return h, nil
	}}
}

// TestHostEffects: over a real sshd, Run runs its command and returns its
// output, Write writes its file (content, mode), Download copies a file to
// the laptop 0600 and refuses one whose sha256 is not the planned one; the
// first failure stops the rest but for Always commands, which still run.
func TestHostEffects(t *testing.T) {
	h, _ := sshHost(t, "pve")
	x := hostOnly(h)
	ctx := context.Background()
	dir := t.TempDir()
	remoteFile := filepath.Join(dir, "host", "keys.pub")
	log := filepath.Join(dir, "host", "log")
	local := filepath.Join(dir, "laptop", "copy")
	sum := sha256.Sum256([]byte("ssh-ed25519 AAAA\n"))

	out, err := x.Do(ctx, []effect.Effect{
		effect.Write{Host: "pve", File: remote.File{Path: remoteFile, Content: []byte("ssh-ed25519 AAAA\n"), Mode: 0o640}},
		effect.Run{Host: "pve", Cmd: remote.Command("sh", "-c", `cat "$1"; echo ran >> "$2"`, "sh", remoteFile, log)},
		effect.Download{Host: "pve", Path: remoteFile, To: local, SHA256: hex.EncodeToString(sum[:])},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || string(out[1].Stdout) != "ssh-ed25519 AAAA\n" {
		t.Errorf("results %+v", out)
	}
	if fi, err := os.Stat(remoteFile); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("written file: %v %v", fi, err)
	}
	if b, err := os.ReadFile(local); err != nil || string(b) != "ssh-ed25519 AAAA\n" {
		t.Errorf("copy: %q %v", b, err)
	}
	if fi, _ := os.Stat(local); fi.Mode().Perm() != 0o600 {
		t.Errorf("copy mode %v", fi.Mode())
	}

	// A failure: the next effect does not run, the Always one does.
	out, err = x.Do(ctx, []effect.Effect{
		effect.Run{Host: "pve", Cmd: remote.Command("sh", "-c", "echo boom >&2; exit 3")},
		effect.Run{Host: "pve", Cmd: remote.Command("sh", "-c", `echo not >> "$1"`, "sh", log)},
		effect.Run{Host: "pve", Cmd: remote.Command("sh", "-c", `echo cleanup >> "$1"`, "sh", log), Always: true},
	})
	var ee *remote.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || len(out) != 2 {
		t.Fatalf("err = %v, %d results", err, len(out))
	}
	if b, _ := os.ReadFile(log); string(b) != "ran\ncleanup\n" {
		t.Errorf("ran %q: the effect after the failure ran, or the cleanup did not", b)
	}

	// A copy whose bytes are not the planned ones is not kept.
	os.Remove(local)
	_, err = x.Do(ctx, []effect.Effect{effect.Download{Host: "pve", Path: remoteFile, To: local, SHA256: strings.Repeat("0", 64)}})
	var mm *effect.MismatchError
	if !errors.As(err, &mm) {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(local); !os.IsNotExist(err) {
		t.Errorf("the mismatched copy was kept: %v", err)
	}

	// A host the run has no connection to is an error, not a guess.
	if _, err := x.Do(ctx, []effect.Effect{effect.Run{Host: "other", Cmd: remote.Command("true")}}); err == nil {
		t.Error("an effect on an unknown host ran")
	}
}

// TestLaptopEffects: WriteLocal writes 0600 in a 0700 directory,
// RemoveLocal removes a file, a tree, or nothing when absent, and
// ForgetHostKey removes the address's entries only, RememberHostKey adds
// one.
func TestLaptopEffects(t *testing.T) {
	dir := t.TempDir()
	x := &effect.Executor{}
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "new", "kubeconfig")
	tree := filepath.Join(dir, "backup")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o700)
	os.WriteFile(filepath.Join(tree, "sub", "snapshot"), []byte("x"), 0o600)
	kh := filepath.Join(dir, "known_hosts")
	os.WriteFile(kh, []byte("192.0.2.50 ssh-ed25519 AAAAvm\n192.0.2.60 ssh-ed25519 AAAAother\n"), 0o600)

	if _, err := x.Do(context.Background(), []effect.Effect{
		effect.WriteLocal{Path: f, Content: []byte("apiVersion: v1\n")},
		effect.RemoveLocal{Path: tree, Tree: true},
		effect.RemoveLocal{Path: filepath.Join(dir, "absent")},
		effect.ForgetHostKey{File: kh, Addr: "192.0.2.50:22"},
		effect.RememberHostKey{File: kh, Addr: "192.0.2.70:22", Key: key},
	}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("written: %v %v", fi, err)
	}
	if fi, _ := os.Stat(filepath.Dir(f)); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", fi.Mode())
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
	if b, _ := os.ReadFile(kh); string(b) != "192.0.2.60 ssh-ed25519 AAAAother\n192.0.2.70 "+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))+"\n" {
		t.Errorf("known_hosts %q", b)
	}
	if _, err := x.Do(context.Background(), []effect.Effect{effect.RemoveLocal{Path: f}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f); !os.IsNotExist(err) {
		t.Errorf("file still there: %v", err)
	}
}

// TestClusterEffects: Apply is one server-side apply patch of the object
// with mgmtctl's field manager and force; Delete one delete (an absent
// object is deleted already); TokenKubeconfig one TokenRequest, whose
// token is handed to the redactor and written into a 0600 kubeconfig.
// Nothing else is requested.
func TestClusterEffects(t *testing.T) {
	var sent []string
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		line := a.GetVerb() + " " + a.GetResource().Resource + " " + a.GetNamespace()
		switch a := a.(type) {
		case k8stesting.PatchActionImpl:
			line += "/" + a.GetName() + " " + string(a.GetPatchType()) + " " + string(a.GetPatch())
		case k8stesting.DeleteActionImpl:
			line += "/" + a.GetName()
			if a.GetName() == "gone" {
				sent = append(sent, line)
				return true, nil, errNotFound()
			}
		}
		sent = append(sent, line)
		return true, &unstructured.Unstructured{Object: map[string]any{}}, nil
	})
	typed := fake.NewClientset()
	typed.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sent = append(sent, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource()+" "+a.GetNamespace())
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetSubresource() == "token" {
			if tr := ca.GetObject().(*authv1.TokenRequest); *tr.Spec.ExpirationSeconds != 3600 {
				t.Errorf("ttl %d", *tr.Spec.ExpirationSeconds)
			}
			return true, &authv1.TokenRequest{Status: authv1.TokenRequestStatus{Token: "minted"}}, nil
		}
		return true, nil, errors.New("not expected")
	})
	var redacted []string
	x := &effect.Executor{
		Cluster: func(context.Context) (*kube.Cluster, error) { return &kube.Cluster{Typed: typed, Dynamic: dyn}, nil },
		Redact:  func(v ...string) { redacted = append(redacted, v...) },
	}
	secrets := corev1.SchemeGroupVersion.WithResource("secrets")
	apply, err := effect.ApplyOf(secrets, corev1ac.Secret("vars", "capmox-system").WithStringData(map[string]string{"K": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "ro.kubeconfig")
	if _, err := x.Do(context.Background(), []effect.Effect{
		apply,
		effect.Delete{Resource: secrets, Object: types.NamespacedName{Namespace: "capmox-system", Name: "old"}},
		effect.Delete{Resource: secrets, Object: types.NamespacedName{Namespace: "capmox-system", Name: "gone"}},
		effect.TokenKubeconfig{ServiceAccount: types.NamespacedName{Namespace: "kube-system", Name: "ro"}, TTL: time.Hour, Name: "ro", Server: "https://192.0.2.50:6443", CA: []byte("CA"), Path: kc},
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`patch secrets capmox-system/vars application/apply-patch+yaml {"apiVersion":"v1","kind":"Secret","metadata":{"name":"vars","namespace":"capmox-system"},"stringData":{"K":"v"}}` + "\n",
		"delete secrets capmox-system/old",
		"delete secrets capmox-system/gone",
		"create serviceaccounts/token kube-system",
	}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("sent\n%q\nwant\n%q", sent, want)
	}
	if !reflect.DeepEqual(redacted, []string{"minted"}) {
		t.Errorf("redacted %q", redacted)
	}
	b, err := os.ReadFile(kc)
	if fi, _ := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 || !strings.Contains(string(b), "token: minted") || !strings.Contains(string(b), "server: https://192.0.2.50:6443") {
		t.Errorf("kubeconfig %v:\n%s", err, b)
	}
}

func errNotFound() error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "gone")
}

// TestAlwaysSkipsALostHost: after a failure that lost the connection to a
// host, an Always command on that host is not tried (it could only wait
// out a reconnection on a dead link); on another host, or after any
// other failure, it runs.
func TestAlwaysSkipsALostHost(t *testing.T) {
	dropped := &remote.DroppedError{Host: "pve", Addr: "192.0.2.10:22", Cmd: "write /root/keys", Err: errors.New("no answer to keepalives")}
	for _, c := range []struct {
		name    string
		fail    error
		host    string
		cleanup bool
	}{
		{"dropped, same host", dropped, "pve", false},
		{"unreachable, same host", &remote.UnreachableError{Host: "pve", Addr: "192.0.2.10:22", Err: errors.New("no route")}, "pve", false},
		{"dropped, another host", dropped, "pve2", true},
		{"a command failed", &remote.ExitError{Code: 3}, "pve", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			hosts := map[string]*remotetest.Host{}
			for _, n := range []string{"pve", "pve2"} {
				hosts[n] = &remotetest.Host{HostName: n}
			}
			hosts["pve"].Answer = func(cmd remote.Cmd) (remote.Result, error) {
				if cmd.Args[0] == "qm" {
					return remote.Result{}, c.fail
				}
				return remote.Result{}, nil
			}
			x := &effect.Executor{Host: func(ctx context.Context, name string) (remote.Host, error) { return hosts[name], nil }}
			_, err := x.Do(context.Background(), []effect.Effect{
				effect.Run{Host: "pve", Cmd: remote.Command("qm", "create", "110")},
				effect.Run{Host: c.host, Cmd: remote.Command("rm", "-f", "--", "/root/keys"), Always: true},
			})
			if !errors.Is(err, c.fail) {
				t.Errorf("err = %v, want the failure", err)
			}
			ran := len(hosts[c.host].Ran()) > 0 && hosts[c.host].Ran()[len(hosts[c.host].Ran())-1].Args[0] == "rm"
			if ran != c.cleanup {
				t.Errorf("cleanup ran = %v, want %v", ran, c.cleanup)
			}
		})
	}
}
