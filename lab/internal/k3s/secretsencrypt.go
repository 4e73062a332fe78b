package k3s

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiserverconfigv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// `k3s secrets-encrypt status|enable|rotate-keys`, after k3s-io/k3s's
// CLI (pkg/cli/secretsencrypt/secrets_encrypt.go: what is printed) and
// its server's handlers (pkg/server/handlers/secrets-encrypt.go and
// pkg/secretsencrypt/config.go, as they read after pull request #13370,
// "Enable secret encryption on existing clusters", backported to
// release-1.35 by #13403: what each stage checks and writes). Upstream's
// CLI asks the running server over its supervisor port
// (/v1-k3s/encrypt/status and /config); the lab's server has no
// supervisor API, so the CLI does the handler's work itself, against the
// running server's API server (the admin kubeconfig), files and etcd,
// and reads what the running server was started with from runningFile.
// Upstream answers a failed stage with "secret-encrypt error ID n" and
// logs the error in the server's journal, which the lab does not have:
// the lab prints the error itself.

const (
	// encryptionStateFile is ControlRuntime.EncryptionHash: the stage and
	// config hash this server last reached, "<stage>-<sha256>".
	encryptionStateFile = "cred/encryption-state.json"
	// encryptionHashAnnotation is secretsencrypt.EncryptionHashAnnotation.
	encryptionHashAnnotation = "k3s.io/encryption-config-hash"
	controlPlaneLabel        = "node-role.kubernetes.io/control-plane"
	// runningFile records what the running server was started with (the
	// lab's stand-in for asking it over the supervisor port).
	runningFile = "lab-running.json"

	stageStart             = "start"
	stageReencryptActive   = "reencrypt_active"
	stageReencryptFinished = "reencrypt_finished"
)

// running is what the server was started with, as the handlers read it
// from its config.Control.
type running struct {
	EncryptSecrets bool `json:"encryptSecrets"`
}

// encryptionState is handlers.EncryptionState, the status's JSON.
type encryptionState struct {
	Stage        string   `json:"stage"`
	ActiveKey    string   `json:"activekey"`
	Enable       *bool    `json:"enable,omitempty"`
	HashMatch    bool     `json:"hashmatch,omitempty"`
	HashError    string   `json:"hasherror,omitempty"`
	InactiveKeys []string `json:"inactivekeys,omitempty"`
}

// SecretsEncrypt runs `k3s secrets-encrypt`.
func SecretsEncrypt(args []string, stdout, stderr io.Writer) int {
	fatal := func(err error) int {
		fmt.Fprintf(stderr, "time=%q level=fatal msg=%q\n", time.Now().UTC().Format(time.RFC3339), "Error: "+err.Error())
		return 1
	}
	var cmd, output string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				i++
				output = args[i]
			}
		case strings.HasPrefix(a, "--output=") || strings.HasPrefix(a, "-o="):
			_, output, _ = strings.Cut(a, "=")
		case !strings.HasPrefix(a, "-") && cmd == "":
			cmd = a
		}
	}
	ctx := context.Background()
	se, err := connect(ctx)
	if err != nil {
		return fatal(err)
	}
	switch cmd {
	case "status":
		st, err := se.status(ctx)
		if err != nil {
			return fatal(fmt.Errorf("see server log for details: %w", err))
		}
		printStatus(stdout, st, output)
		return 0
	case "enable":
		if err := se.enable(ctx); err != nil {
			return fatal(err)
		}
		fmt.Fprintln(stdout, "secrets-encryption enabled")
		return 0
	case "rotate-keys":
		if err := se.rotateKeys(ctx); err != nil {
			return fatal(fmt.Errorf("see server log for details: %w", err))
		}
		fmt.Fprintln(stdout, "keys rotated, reencryption started")
		return 0
	}
	fmt.Fprintf(stderr, "No help topic for '%s'\n", cmd)
	return 3
}

// printStatus is the CLI's Status: JSON with -o json, else its text.
func printStatus(w io.Writer, st encryptionState, output string) {
	if strings.ToLower(output) == "json" {
		b, _ := json.MarshalIndent(st, "", "\t")
		fmt.Fprintln(w, string(b))
		return
	}
	if st.Enable == nil {
		fmt.Fprintln(w, "Encryption Status: Disabled, no configuration file found")
		return
	}
	out := "Encryption Status: Disabled\n"
	if *st.Enable {
		out = "Encryption Status: Enabled\n"
	}
	out += fmt.Sprintln("Current Rotation Stage:", st.Stage)
	if st.HashMatch {
		out += fmt.Sprintln("Server Encryption Hashes: All hashes match")
	} else {
		out += fmt.Sprintf("Server Encryption Hashes: %s\n", st.HashError)
	}
	var tb bytes.Buffer
	tw := tabwriter.NewWriter(&tb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n")
	fmt.Fprintf(tw, "Active\tKey Type\tName\n")
	fmt.Fprintf(tw, "------\t--------\t----\n")
	if st.ActiveKey != "" {
		fmt.Fprintf(tw, " *\t%s\t%s\n", "AES-CBC", st.ActiveKey)
	}
	for _, k := range st.InactiveKeys {
		fmt.Fprintf(tw, "\t%s\t%s\n", "AES-CBC", k)
	}
	tw.Flush()
	fmt.Fprintln(w, out+tb.String())
}

// encrypter is one server's running state, as the handlers see it.
type encrypter struct {
	run    running
	node   string
	config string // ControlRuntime.EncryptionConfig
	state  string // ControlRuntime.EncryptionHash
	cs     kubernetes.Interface
	token  string
}

func connect(ctx context.Context) (*encrypter, error) {
	b, err := os.ReadFile(filepath.Join(DataDir, runningFile))
	if err != nil {
		return nil, errors.New(`Get "https://127.0.0.1:6443/v1-k3s/encrypt/status": dial tcp 127.0.0.1:6443: connect: connection refused`)
	}
	se := &encrypter{config: filepath.Join(DataDir, encryptionConfigFile), state: filepath.Join(DataDir, encryptionStateFile)}
	if err := json.Unmarshal(b, &se.run); err != nil {
		return nil, err
	}
	se.node, _ = os.Hostname()
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	se.token = strings.TrimSpace(string(tok))
	rc, err := clientcmd.BuildConfigFromFlags("", KubeConfig)
	if err != nil {
		return nil, err
	}
	rc.Timeout = 30 * time.Second
	if se.cs, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, err
	}
	if _, err := se.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf(`Get "https://127.0.0.1:6443/v1-k3s/encrypt/status": %w`, err)
	}
	return se, nil
}

func (se *encrypter) providers() ([]apiserverconfigv1.ProviderConfiguration, error) {
	b, err := os.ReadFile(se.config)
	if err != nil {
		return nil, err
	}
	var c apiserverconfigv1.EncryptionConfiguration
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if len(c.Resources) == 0 || len(c.Resources[0].Providers) == 0 {
		return nil, errors.New("no providers in the encryption configuration")
	}
	return c.Resources[0].Providers, nil
}

// configHash is GenEncryptionConfigHash: the sha256 of the config file at
// path, in hex, which the stages' state and annotations carry.
func configHash(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// status is handlers.encryptionStatus.
func (se *encrypter) status(ctx context.Context) (encryptionState, error) {
	var st encryptionState
	ps, err := se.providers()
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	} else if err != nil {
		return st, err
	}
	t, f := true, false
	switch {
	case ps[len(ps)-1].Identity != nil && (ps[0].AESCBC != nil || ps[0].Secretbox != nil):
		st.Enable = &t
	case se.run.EncryptSecrets && ps[0].Identity != nil && len(ps) == 1:
		st.Enable = &f
	case !se.run.EncryptSecrets || ps[0].Identity != nil && len(ps) > 1 && (ps[1].AESCBC != nil || ps[1].Secretbox != nil):
		st.Enable = &f
	}
	if err := se.verifyHashes(ctx, ""); err != nil {
		st.HashError = err.Error()
	} else {
		st.HashMatch = true
	}
	stage, _, err := se.annotation(ctx)
	if err != nil {
		return st, err
	}
	st.Stage = stage
	active := true
	for _, p := range ps {
		if p.AESCBC != nil {
			for _, k := range p.AESCBC.Keys {
				if active {
					active = false
					st.ActiveKey = "AES-CBC " + k.Name
				} else {
					st.InactiveKeys = append(st.InactiveKeys, "AES-CBC "+k.Name)
				}
			}
		}
		if p.Identity != nil {
			active = false
		}
	}
	return st, nil
}

// annotation is getEncryptionHashAnnotation: this node's stage and hash.
func (se *encrypter) annotation(ctx context.Context) (stage, hash string, err error) {
	n, err := se.cs.CoreV1().Nodes().Get(ctx, se.node, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	if _, ok := n.Labels[controlPlaneLabel]; !ok {
		return "", "", fmt.Errorf("cannot manage secrets encryption on non control-plane node %s", se.node)
	}
	ann, ok := n.Annotations[encryptionHashAnnotation]
	if !ok {
		return "", "", fmt.Errorf("missing annotation on node %s", se.node)
	}
	split := strings.Split(ann, "-")
	if len(split) != 2 {
		return "", "", fmt.Errorf("invalid annotation %s found on node %s", ann, se.node)
	}
	return split[0], split[1], nil
}

// verifyHashes is verifyEncryptionHashAnnotation: every control-plane
// node's annotation alike, and this node's stage among prevStages and
// its hash the config's.
func (se *encrypter) verifyHashes(ctx context.Context, prevStages string) error {
	nodes, err := se.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: controlPlaneLabel + "=true"})
	if err != nil {
		return err
	}
	var first, firstName string
	for _, n := range nodes.Items {
		h, ok := n.Annotations[encryptionHashAnnotation]
		if ok && firstName == "" {
			first, firstName = h, n.Name
		} else if ok && h != first {
			return fmt.Errorf("hash does not match between %s and %s", firstName, n.Name)
		}
	}
	if prevStages == "" {
		return nil
	}
	stage, hash, err := se.annotation(ctx)
	if err != nil {
		return err
	}
	want, err := configHash(se.config)
	if err != nil {
		return err
	}
	if !strings.Contains(prevStages, stage) {
		return fmt.Errorf("incorrect stage: %s found on node %s", stage, nodes.Items[0].Name)
	} else if hash != want {
		return fmt.Errorf("invalid hash: %s found on node %s", hash, nodes.Items[0].Name)
	}
	return nil
}

// writeAnnotation is WriteEncryptionHashAnnotation: "<stage>-<config
// hash>" on this node, and in the state file unless skipFile.
func (se *encrypter) writeAnnotation(ctx context.Context, stage string, skipFile bool) error {
	h, err := configHash(se.config)
	if err != nil {
		return err
	}
	ann := stage + "-" + h
	if err := annotateNode(ctx, se.cs, se.node, ann); err != nil {
		return err
	}
	if skipFile {
		return nil
	}
	return os.WriteFile(se.state, []byte(ann), 0o600)
}

func annotateNode(ctx context.Context, cs kubernetes.Interface, node, ann string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{encryptionHashAnnotation: ann}}})
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// bootstrapAnnotation is BootstrapEncryptionHashAnnotation, which a
// server started with secrets-encryption runs on its node (k3s
// pkg/server/server.go, setNodeLabelsAndAnnotations): the state file's
// "<stage>-<hash>" as the node's annotation.
func bootstrapAnnotation(ctx context.Context, cs kubernetes.Interface, node string) error {
	b, err := os.ReadFile(filepath.Join(DataDir, encryptionStateFile))
	if err != nil {
		return err
	}
	return annotateNode(ctx, cs, node, string(b))
}

// enable is handlers.encryptionEnable with enable=true. On a server with
// no encryption config (one k3s initialised without secrets-encryption)
// it writes a config of the identity provider alone (WriteIdentityConfig)
// and saves it in the bootstrap data, for every server to take when it
// restarts with secrets-encryption. Upstream's handler indexes a second
// provider that an identity-only config does not have, so a second
// enable panics in the handler and the CLI reads EOF: the lab says the
// same.
func (se *encrypter) enable(ctx context.Context) error {
	ps, err := se.providers()
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeEncryptionConfig(se.config, []apiserverconfigv1.ProviderConfiguration{{Identity: &apiserverconfigv1.IdentityConfiguration{}}}); err != nil {
			return err
		}
		return storeBootstrap(ctx, se.token, DataDir)
	} else if err != nil {
		return err
	}
	switch {
	case ps[len(ps)-1].Identity != nil && (ps[0].AESCBC != nil || ps[0].Secretbox != nil):
		return nil // "Secrets encryption already enabled"
	case ps[0].Identity != nil && len(ps) == 1:
		return errors.New(`see server log for details: Put "https://127.0.0.1:6443/v1-k3s/encrypt/config": EOF`)
	}
	return errors.New("see server log for details: unable to enable/disable secrets encryption, unknown configuration")
}

// rotateKeys is handlers.encryptionRotateKeys with the aescbc provider:
// every server on one stage and hash; this node's annotation
// reencrypt_active; a new key first, the others and identity after; the
// API server's automatic reload awaited (its metrics); every Secret
// written again (so encrypted with the new key); no key removed when the
// cluster came from the identity provider; reencrypt_finished; the
// config saved in the bootstrap data.
func (se *encrypter) rotateKeys(ctx context.Context) error {
	if err := se.verifyHashes(ctx, stageStart+"-"+stageReencryptFinished); err != nil {
		return err
	}
	reloads, err := se.reloads(ctx)
	if err != nil {
		return err
	}
	if err := se.writeAnnotation(ctx, stageReencryptActive, true); err != nil {
		return err
	}
	ps, err := se.providers()
	if err != nil {
		return err
	}
	var aescbc []apiserverconfigv1.Key
	identity := false
	for _, p := range ps {
		if p.AESCBC != nil {
			aescbc = append(aescbc, p.AESCBC.Keys...)
		}
		identity = identity || p.Identity != nil
	}
	key := make([]byte, aescbcKeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	fromIdentity := len(aescbc) == 0 && identity
	aescbc = append([]apiserverconfigv1.Key{{Name: "aescbckey-" + time.Now().Format(time.RFC3339), Secret: base64.StdEncoding.EncodeToString(key)}}, aescbc...)
	cfg := []apiserverconfigv1.ProviderConfiguration{{AESCBC: &apiserverconfigv1.AESConfiguration{Keys: aescbc}}, {Identity: &apiserverconfigv1.IdentityConfiguration{}}}
	if err := writeEncryptionConfig(se.config, cfg); err != nil {
		return err
	}
	if err := se.waitReload(ctx, reloads); err != nil {
		return err
	}
	if err := se.updateSecrets(ctx); err != nil {
		return err
	}
	// The oldest key is removed once every Secret is written with the
	// new one ("Removing aescbc key"); none when the cluster came from the
	// identity provider ("No keys to remove, switched from identity
	// provider").
	if !fromIdentity && len(aescbc) > 1 {
		cfg[0].AESCBC.Keys = aescbc[:len(aescbc)-1]
		if err := writeEncryptionConfig(se.config, cfg); err != nil {
			return err
		}
	}
	if err := se.writeAnnotation(ctx, stageReencryptFinished, false); err != nil {
		return err
	}
	return storeBootstrap(ctx, se.token, DataDir)
}

// writeEncryptionConfig is WriteEncryptionConfig's file: the
// configuration for Secrets with these providers, 0600.
func writeEncryptionConfig(path string, ps []apiserverconfigv1.ProviderConfiguration) error {
	b, err := json.Marshal(apiserverconfigv1.EncryptionConfiguration{
		TypeMeta:  metav1.TypeMeta{Kind: "EncryptionConfiguration", APIVersion: "apiserver.config.k8s.io/v1"},
		Resources: []apiserverconfigv1.ResourceConfiguration{{Resources: []string{"secrets"}, Providers: ps}},
	})
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

// reloadMetric is the API server's count of successful automatic
// reloads of its encryption config (k8s.io/apiserver
// pkg/server/options/encryptionconfig/metrics).
const reloadMetric = "apiserver_encryption_config_controller_automatic_reloads_total"

// reloads reads reloadMetric's success count (0 before any reload).
func (se *encrypter) reloads(ctx context.Context) (int, error) {
	b, err := se.cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, reloadMetric) || !strings.Contains(l, `status="success"`) {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			n = int(v)
		}
	}
	return n, nil
}

// waitReload is WaitForEncryptionConfigReload: the metrics every 5 s,
// for at most 120 s, until the API server has reloaded its config once
// more. Upstream's API server reads the file once a minute
// (EncryptionConfigFileChangePollDuration); the lab's, every 5 s
// (Server).
func (se *encrypter) waitReload(ctx context.Context, before int) error {
	deadline := time.Now().Add(120 * time.Second)
	for {
		n, err := se.reloads(ctx)
		if err != nil {
			return err
		}
		if n > before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("context deadline exceeded: apiserver has not reloaded encryption configuration (reload success: %d/%d)", n, before)
		}
		time.Sleep(5 * time.Second)
	}
}

// updateSecrets is handlers.updateSecrets: each Secret, 20 a page,
// written back unchanged, which the API server stores with the config's
// first provider; a conflict (written since) is already so.
func (se *encrypter) updateSecrets(ctx context.Context) error {
	cont := ""
	for {
		l, err := se.cs.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 20, Continue: cont})
		if err != nil {
			return err
		}
		for i := range l.Items {
			s := &l.Items[i]
			if _, err := se.cs.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("failed to update secret: %v", err)
			}
		}
		if cont = l.Continue; cont == "" {
			return nil
		}
	}
}
