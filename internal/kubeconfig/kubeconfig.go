// Package kubeconfig renders and writes the laptop's kubeconfigs: the admin
// one (from k3s.yaml, pointed at the VM's address, named after the
// cluster) and the inspector's read-only one. Files are written atomically
// with mode 0600 and changed only when their content differs.
package kubeconfig

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Admin renders the admin kubeconfig: server https://<ip>:6443, cluster,
// user and context all named name, credentials from k3s.yaml.
func Admin(k3sYAML []byte, name, server string) ([]byte, error) {
	src, err := clientcmd.Load(k3sYAML)
	if err != nil {
		return nil, fmt.Errorf("parse k3s.yaml: %w", err)
	}
	ctx := src.Contexts[src.CurrentContext]
	if ctx == nil || src.Clusters[ctx.Cluster] == nil || src.AuthInfos[ctx.AuthInfo] == nil {
		return nil, errors.New("k3s.yaml has no current context with a cluster and a user")
	}
	cl, user := src.Clusters[ctx.Cluster], src.AuthInfos[ctx.AuthInfo]
	out := clientcmdapi.NewConfig()
	out.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cl.CertificateAuthorityData}
	out.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: user.ClientCertificateData, ClientKeyData: user.ClientKeyData}
	out.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	out.CurrentContext = name
	return clientcmd.Write(*out)
}

// Secrets returns the credential values in a kubeconfig, for redaction.
func Secrets(kubeconfig []byte) []string {
	c, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range c.AuthInfos {
		if len(a.ClientKeyData) > 0 {
			// As it appears in the file (base64) and decoded.
			out = append(out, base64.StdEncoding.EncodeToString(a.ClientKeyData), string(a.ClientKeyData))
		}
		if a.Token != "" {
			out = append(out, a.Token)
		}
	}
	return out
}

// File is a step that keeps one kubeconfig file on the laptop.
type File struct {
	StepID string
	Path   string
	// Render returns the desired content, or nil content with the reason
	// it cannot be rendered yet (check mode before the cluster exists).
	Render func(ctx context.Context) (want []byte, pending string, err error)
}

var _ step.Step = (*File)(nil)

// ID implements step.Step.
func (f *File) ID() string { return f.StepID }

// Host implements step.Step.
func (f *File) Host() string { return "laptop" }

// Check implements step.Step: the bytes to write, when they or the file's
// mode differ.
func (f *File) Check(ctx context.Context) (step.Plan, error) {
	cur, action, err := Current(f.Path)
	if err != nil {
		return step.Plan{}, err
	}
	want, pending, err := f.Render(ctx)
	if err != nil {
		return step.Plan{}, err
	}
	if want == nil {
		return step.Plan{Changes: []step.Change{{Target: f.Path, Action: action, Summary: fmt.Sprintf("%s %s (%s)", action, f.Path, pending)}}}, nil
	}
	if bytes.Equal(cur, want) && Private(f.Path) {
		return step.Plan{Note: f.Path + " up to date"}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: f.Path, Action: action, Summary: action.String() + " " + f.Path,
		Diff: &step.Diff{Path: f.Path, Before: string(cur), After: string(want)}, Effects: []effect.Effect{effect.WriteLocal{Path: f.Path, Content: want}}}}}, nil
}

// Current reads a laptop file: its bytes, and whether writing it creates
// or updates it.
func Current(path string) ([]byte, step.Action, error) {
	cur, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, step.Create, nil
	}
	return cur, step.Update, err
}

// Private reports whether the file at path is readable by its owner only.
func Private(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm() == 0o600
}

// Merged is the kubeconfig cur (the bytes of the file at target, nil when
// there is none) with the context, cluster and user named name from the
// admin kubeconfig added. It switches the current context only when cur
// has none (a new or empty file: without one, kubectl would go to
// localhost:8080), and says so with switched. It replaces only its own
// entries: an entry of that name pointing at another server is a clash,
// reported, never overwritten. The caller writes the file: mgmtctl
// kubeconfig --merge, a command of its own, not a step.
func Merged(admin []byte, name, target string, cur []byte) (merged []byte, switched bool, err error) {
	src, err := clientcmd.Load(admin)
	if err != nil {
		return nil, false, fmt.Errorf("parse the admin kubeconfig: %w", err)
	}
	cl, user, ctx := src.Clusters[name], src.AuthInfos[name], src.Contexts[name]
	if cl == nil || user == nil || ctx == nil {
		return nil, false, fmt.Errorf("the admin kubeconfig has no cluster, user and context named %q", name)
	}
	dst := clientcmdapi.NewConfig()
	if cur != nil {
		if dst, err = clientcmd.Load(cur); err != nil {
			return nil, false, fmt.Errorf("parse %s: %w", target, err)
		}
	}
	own := dst.Clusters[name] != nil && dst.Clusters[name].Server == cl.Server
	if !own {
		for kind, present := range map[string]bool{"cluster": dst.Clusters[name] != nil, "user": dst.AuthInfos[name] != nil, "context": dst.Contexts[name] != nil} {
			if present {
				return nil, false, fmt.Errorf("%s already has a %s named %q that is not this cluster's (server %s); rename it or choose another metadata.name", target, kind, name, cl.Server)
			}
		}
	}
	dst.Clusters[name], dst.AuthInfos[name], dst.Contexts[name] = cl, user, ctx
	if dst.CurrentContext == "" {
		dst.CurrentContext, switched = name, true
	}
	b, err := clientcmd.Write(*dst)
	if err != nil {
		return nil, false, err
	}
	return b, switched, nil
}
