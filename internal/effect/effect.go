// Package effect is everything a plan can do, as values: a closed set of
// types (run a command on a host, write a file there, copy one from it to
// the laptop, write or remove a laptop file, forget a host key, apply or
// delete a Kubernetes object, mint a token into a kubeconfig), and the one
// Executor that carries them out.
//
// A step's Check returns changes holding these values; the engine hands
// them to the Executor, and nothing else in the tool writes on a step's
// behalf. The set is sealed (Effect has an unexported method), so a plan
// is a list the compiler checks. Go's type switch is not exhaustive, so
// the Executor's is by test: exhaustive_test.go fails on an Effect type
// without its case.
package effect

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Effect is one thing a plan does. Only this package's types are effects.
type Effect interface {
	// String says what the effect does, for --diff, errors and the debug
	// log; it never holds a file's content or a command's stdin.
	String() string
	effect()
}

// Run runs a command on a host. Host is a connection's name (a Proxmox
// node's, a VM's): the Executor holds the connections, a plan only names
// them.
type Run struct {
	Host string
	Cmd  remote.Cmd
	// Always runs the command even when an earlier effect of its change
	// failed: a cleanup, such as removing a key file qm has read.
	Always bool
}

// Write writes a file on a host atomically; a file that already has the
// content, mode and owner is left alone.
type Write struct {
	Host string
	File remote.File
}

// Download copies a file from a host to the laptop (0600), checked against
// SHA256 when it is set: a copy that does not match is not kept.
type Download struct {
	Host, Path string
	Sudo       bool
	To         string
	SHA256     string
}

// WriteLocal writes a laptop file atomically, mode 0600 (localfile.Write).
type WriteLocal struct {
	Path    string
	Content []byte
}

// RemoveLocal removes a laptop file (an absent one is removed already),
// or with Tree a directory and all it holds.
type RemoveLocal struct {
	Path string
	Tree bool
}

// ForgetHostKey removes an address's entries from a known_hosts file.
type ForgetHostKey struct {
	File, Addr string
}

// RememberHostKey records a host's key in a known_hosts file, replacing
// what the file said about the address: the key a new VM presented on
// first contact.
type RememberHostKey struct {
	File, Addr string
	Key        ssh.PublicKey
}

// Apply server-side applies an object, with mgmtctl's field manager and
// force (mgmtctl owns the fields it sets).
type Apply struct {
	Resource schema.GroupVersionResource
	Object   *unstructured.Unstructured
}

// Delete deletes an object; one already gone is deleted.
type Delete struct {
	Resource schema.GroupVersionResource
	Object   types.NamespacedName
}

// TokenKubeconfig asks the TokenRequest API for a token of TTL for a
// ServiceAccount, then writes the kubeconfig that carries it (server,
// CA, one context named Name) to Path on the laptop. The token is the one
// value of a plan that cannot exist before the plan is carried out, so
// minting it and writing it are one effect: nothing outside it ever holds
// the token but the file and the run's redactor.
type TokenKubeconfig struct {
	ServiceAccount types.NamespacedName
	TTL            time.Duration
	Name, Server   string
	CA             []byte
	Path           string
}

// Call is a call to the Proxmox VE API (spec.proxmox.access: api):
// Method on Path (under /api2/json) with Params. A call that starts a
// task (its answer a UPID) is waited for, and the task's failure is the
// effect's. The Executor holds the API's client.
type Call struct {
	Method, Path string
	Params       url.Values
}

func (Run) effect()             {}
func (Call) effect()            {}
func (Write) effect()           {}
func (Download) effect()        {}
func (WriteLocal) effect()      {}
func (RemoveLocal) effect()     {}
func (ForgetHostKey) effect()   {}
func (RememberHostKey) effect() {}
func (Apply) effect()           {}
func (Delete) effect()          {}
func (TokenKubeconfig) effect() {}

func (e Run) String() string {
	s := "on " + e.Host + ": " + e.Cmd.Display()
	if e.Cmd.Sudo {
		s += " (as root)"
	}
	if e.Always {
		s += " (whatever happened before)"
	}
	return s
}

func (e Call) String() string {
	s := "Proxmox API: " + e.Method + " " + e.Path
	if len(e.Params) > 0 {
		// url.Values.Encode sorts by key; unescaped, so --diff reads as
		// the user would type the values.
		q, err := url.QueryUnescape(e.Params.Encode())
		if err != nil {
			q = e.Params.Encode()
		}
		s += " " + strings.ReplaceAll(q, "&", " ")
	}
	return s
}

func (e Write) String() string {
	s := fmt.Sprintf("on %s: write %s (%d bytes, %04o", e.Host, e.File.Path, len(e.File.Content), e.File.Mode.Perm())
	if e.File.Owner != "" {
		s += ", " + e.File.Owner
	}
	return s + ")"
}

func (e Download) String() string {
	s := fmt.Sprintf("copy %s:%s to %s (0600)", e.Host, e.Path, e.To)
	if e.SHA256 != "" {
		s += ", sha256 " + e.SHA256
	}
	return s
}

func (e WriteLocal) String() string {
	return fmt.Sprintf("write %s (%d bytes, 0600)", e.Path, len(e.Content))
}

func (e RemoveLocal) String() string {
	if e.Tree {
		return "remove " + e.Path + " and all it holds"
	}
	return "remove " + e.Path
}

func (e ForgetHostKey) String() string { return "remove " + e.Addr + " from " + e.File }

func (e RememberHostKey) String() string {
	return fmt.Sprintf("record %s's host key %s in %s", e.Addr, ssh.FingerprintSHA256(e.Key), e.File)
}

func (e Apply) String() string {
	return "server-side apply " + objectName(e.Resource, types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
}

func (e Delete) String() string { return "delete " + objectName(e.Resource, e.Object) }

func (e TokenKubeconfig) String() string {
	return fmt.Sprintf("request a %s token for serviceaccount/%s and write %s around it", e.TTL, e.ServiceAccount, e.Path)
}

func objectName(r schema.GroupVersionResource, n types.NamespacedName) string {
	if n.Namespace == "" {
		return r.Resource + "/" + n.Name
	}
	return r.Resource + "/" + n.Namespace + "/" + n.Name
}
