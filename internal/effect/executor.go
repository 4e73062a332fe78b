package effect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/localfile"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// FieldManager is mgmtctl's server-side apply identity.
const FieldManager = "mgmtctl"

// Executor carries out effects: the one place in the tool that writes on
// a plan's behalf.
type Executor struct {
	// Host returns the read-write connection of a host by name.
	Host func(ctx context.Context, name string) (remote.Host, error)
	// API returns the Proxmox VE API's client (api access).
	API func(ctx context.Context) (*pve.Client, error)
	// Cluster returns the management cluster's clients.
	Cluster func(ctx context.Context) (*kube.Cluster, error)
	// Redact registers a secret an effect made (a minted token) with the
	// run's redactor before anything could print it.
	Redact func(values ...string)
	// Progress, when set, hears what a long effect (a named script, a
	// copy, a large upload) is doing as it starts.
	Progress func(ctx context.Context, msg string)
}

// Do carries out effects in order and returns each one's result (a Run's
// output; the zero Result for the others), as many as were attempted. At
// the first failure it stops, but still runs the Always commands after it;
// the error is the failure's, joined with any of theirs. An Always command
// on a host whose connection the failure lost is not tried: it could only
// wait out the reconnection's attempts on a link known dead, and the run
// would say so 25 s later than it knows (the next run's plan redoes what
// the cleanup would have undone).
func (x *Executor) Do(ctx context.Context, effects []Effect) ([]remote.Result, error) {
	var out []remote.Result
	var failed error
	for _, e := range effects {
		if failed != nil {
			if r, ok := e.(Run); ok && r.Always && !lostHost(failed, r.Host) {
				res, err := x.run(ctx, r)
				out = append(out, res)
				failed = errors.Join(failed, err)
			}
			continue
		}
		res, err := x.do(ctx, e)
		out = append(out, res)
		failed = err
	}
	return out, failed
}

// lostHost reports whether err is the loss of the connection to host: it
// dropped, or could not be made.
func lostHost(err error, host string) bool {
	var d *remote.DroppedError
	var u *remote.UnreachableError
	return errors.As(err, &d) && d.Host == host || errors.As(err, &u) && u.Host == host
}

// progressAbove is the upload size from which a Write is said as it starts.
const progressAbove = 1 << 20

func (x *Executor) do(ctx context.Context, e Effect) (remote.Result, error) {
	if x.Progress != nil {
		switch e := e.(type) {
		case Run:
			if e.Cmd.Name != "" {
				x.Progress(ctx, e.Cmd.Name)
			}
		case Download:
			x.Progress(ctx, e.String())
		case Call:
			x.Progress(ctx, e.Method+" "+e.Path)
		case Write:
			if len(e.File.Content) > progressAbove {
				x.Progress(ctx, e.String())
			}
		}
	}
	return x.dispatch(ctx, e)
}

// dispatch carries out e. Its switch has a case for every Effect type:
// Go's type switch is not exhaustive, so exhaustive_test.go reads this
// function and the package's effect() methods, and fails on a type
// without its case.
func (x *Executor) dispatch(ctx context.Context, e Effect) (remote.Result, error) {
	switch e := e.(type) {
	case Run:
		return x.run(ctx, e)
	case Call:
		return remote.Result{}, x.call(ctx, e)
	case Write:
		h, err := x.host(ctx, e.Host)
		if err != nil {
			return remote.Result{}, err
		}
		_, err = h.WriteFile(ctx, e.File)
		return remote.Result{}, err
	case Download:
		return remote.Result{}, x.download(ctx, e)
	case WriteLocal:
		return remote.Result{}, localfile.Write(e.Path, e.Content)
	case RemoveLocal:
		return remote.Result{}, removeLocal(e)
	case ForgetHostKey:
		return remote.Result{}, remote.ForgetHostKey(e.File, e.Addr)
	case RememberHostKey:
		return remote.Result{}, remote.RememberHostKey(e.File, e.Addr, e.Key)
	case Apply:
		return remote.Result{}, x.apply(ctx, e)
	case Delete:
		return remote.Result{}, x.delete(ctx, e)
	case TokenKubeconfig:
		return remote.Result{}, x.tokenKubeconfig(ctx, e)
	}
	// Unreachable while exhaustive_test.go passes: Effect is sealed and
	// every type of it has its case above.
	return remote.Result{}, fmt.Errorf("effect %T has no executor", e)
}

func (x *Executor) host(ctx context.Context, name string) (remote.Host, error) {
	if x.Host == nil {
		return nil, fmt.Errorf("no connection to %s in this run", name)
	}
	return x.Host(ctx, name)
}

func (x *Executor) run(ctx context.Context, e Run) (remote.Result, error) {
	h, err := x.host(ctx, e.Host)
	if err != nil {
		return remote.Result{}, err
	}
	return h.Run(ctx, e.Cmd)
}

func (x *Executor) call(ctx context.Context, e Call) error {
	if x.API == nil {
		return fmt.Errorf("%s: no Proxmox API in this run", e)
	}
	c, err := x.API(ctx)
	if err != nil {
		return err
	}
	return c.Call(ctx, e.Method, e.Path, e.Params)
}

func (x *Executor) download(ctx context.Context, e Download) error {
	h, err := x.host(ctx, e.Host)
	if err != nil {
		return err
	}
	b, err := h.ReadFile(ctx, e.Path, e.Sudo)
	if err != nil {
		return err
	}
	if e.SHA256 != "" {
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != e.SHA256 {
			return &MismatchError{Path: e.Host + ":" + e.Path, Want: e.SHA256, Got: got}
		}
	}
	return localfile.Write(e.To, b)
}

// MismatchError is a copy whose bytes are not the ones planned.
type MismatchError struct{ Path, Want, Got string }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("copy %s: sha256 %s, planned %s; the copy was not kept", e.Path, e.Got, e.Want)
}

func removeLocal(e RemoveLocal) error {
	var err error
	if e.Tree {
		err = os.RemoveAll(e.Path)
	} else {
		err = os.Remove(e.Path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// cluster is the cluster e acts on; a failure to reach it is e's.
func (x *Executor) cluster(ctx context.Context, e Effect) (*kube.Cluster, error) {
	if x.Cluster == nil {
		return nil, fmt.Errorf("%s: no connection to the cluster in this run", e)
	}
	cl, err := x.Cluster(ctx)
	if err == nil && cl == nil {
		err = errors.New("the cluster does not exist yet")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e, err)
	}
	return cl, nil
}

func (x *Executor) apply(ctx context.Context, e Apply) error {
	cl, err := x.cluster(ctx, e)
	if err != nil {
		return err
	}
	r := cl.Dynamic.Resource(e.Resource).Namespace(e.Object.GetNamespace())
	if _, err := r.Apply(ctx, e.Object.GetName(), e.Object, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("%s: %w", e, err)
	}
	return nil
}

func (x *Executor) delete(ctx context.Context, e Delete) error {
	cl, err := x.cluster(ctx, e)
	if err != nil {
		return err
	}
	err = cl.Dynamic.Resource(e.Resource).Namespace(e.Object.Namespace).Delete(ctx, e.Object.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w", e, err)
	}
	return nil
}

func (x *Executor) tokenKubeconfig(ctx context.Context, e TokenKubeconfig) error {
	cl, err := x.cluster(ctx, e)
	if err != nil {
		return err
	}
	secs := int64(e.TTL / time.Second)
	tr, err := cl.Typed.CoreV1().ServiceAccounts(e.ServiceAccount.Namespace).CreateToken(ctx, e.ServiceAccount.Name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token for serviceaccount/%s: %w", e.ServiceAccount, err)
	}
	tok := tr.Status.Token
	if tok == "" {
		return fmt.Errorf("request a token for serviceaccount/%s: the API returned none", e.ServiceAccount)
	}
	if x.Redact != nil {
		x.Redact(tok)
	}
	b, err := TokenKubeconfigBytes(e.Name, e.Server, e.CA, tok)
	if err != nil {
		return err
	}
	return localfile.Write(e.Path, b)
}

// TokenKubeconfigBytes renders a kubeconfig around a bearer token: one
// cluster, user and context, all named name, and current.
func TokenKubeconfigBytes(name, server string, ca []byte, token string) ([]byte, error) {
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	return clientcmd.Write(*c)
}

// ApplyOf is the Apply of a typed object or apply configuration (anything
// that marshals to the object's JSON with its apiVersion and kind), for
// the resource r.
func ApplyOf(r schema.GroupVersionResource, obj any) (Apply, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return Apply{}, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return Apply{}, fmt.Errorf("%s: %w", r.Resource, err)
	}
	return Apply{Resource: r, Object: u}, nil
}
