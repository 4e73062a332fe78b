package k3s

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	encryptioncontroller "k8s.io/apiserver/pkg/server/options/encryptionconfig/controller"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/lab/internal/controlplane"
	"github.com/mgmtctl/mgmtctl/lab/internal/klipperhelm"
	"github.com/mgmtctl/mgmtctl/lab/internal/kubelet"
	"github.com/mgmtctl/mgmtctl/lab/internal/pki"
	"github.com/mgmtctl/mgmtctl/lab/internal/podnet"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// Paths k3s uses (docs/upstream.md §2.3-2.5).
const (
	ConfigFile   = "/etc/rancher/k3s/config.yaml"
	KubeConfig   = "/etc/rancher/k3s/k3s.yaml"
	DataDir      = "/var/lib/rancher/k3s/server"
	ManifestsDir = "/var/lib/rancher/k3s/server/manifests"
	port         = "6443"
	// k3s's default cluster (pod) and service CIDRs.
	clusterCIDR = "10.42.0.0/16"
	serviceCIDR = "10.43.0.0/16"
)

// nodeIP is the node's address as k3s chooses it without --node-ip: the
// address of the interface that holds the default route (k3s takes the
// kubelet's choice, apimachinery's ChooseHostInterface), not the first
// interface's, which may be the pod network's bridge cni0 after a restart.
func nodeIP() string {
	if ip, err := utilnet.ChooseHostInterface(); err == nil && ip.To4() != nil {
		return ip.String()
	}
	return "127.0.0.1"
}

// SANs are what k3s puts in the apiserver's serving certificate.
func SANs(hostname, ip string, extra []string) ([]string, []net.IP) {
	names := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", hostname}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.43.0.1"), net.ParseIP(ip)}
	for _, s := range extra {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p := net.ParseIP(s); p != nil {
			ips = append(ips, p)
		} else {
			names = append(names, s)
		}
	}
	return names, ips
}

// writeKeyPair writes dir/name.crt (0644) and dir/name.key (0600), as k3s
// keeps its certificates.
func writeKeyPair(dir, name string, cert, key []byte) error {
	if err := writeFile(filepath.Join(dir, name+".crt"), cert, 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, name+".key"), key, 0o600)
}

func writeFile(p string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return os.WriteFile(p, b, mode)
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

// labGCPercent and labMemoryLimit are the lab's k3s's GOGC and
// GOMEMLIMIT (Server).
const (
	labGCPercent   = 400
	labMemoryLimit = 1536 << 20
)

// Server runs `k3s server` until SIGTERM; with --cluster-reset it resets
// (and restores) the datastore and returns.
func Server(args []string, log io.Writer) error {
	// The lab runs up to a dozen of these side by side on 2 cores, and a
	// quarter of one's CPU went to Go's garbage collector (a profile of a
	// server's start and first apply, docs/testing.md). Memory is what the
	// lab's machines have to spare: collect when the heap has grown by
	// four times what is live, not by as much, unless GOGC says otherwise,
	// and sooner when the whole process nears labMemoryLimit (GOMEMLIMIT's
	// soft limit), so that a dozen servers still fit a 24 GB machine.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(labGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(labMemoryLimit)
	}
	notifySocket = os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	flags, err := parseServerFlags(args)
	if err != nil {
		return err
	}
	cfg, err := LoadConfig(ConfigFile)
	if err != nil {
		return err
	}
	warnUnknown(log, cfg.Unknown, time.Now())
	if flags.s3 != nil {
		cfg.S3.Enabled = *flags.s3
	}
	if flags.s3Folder != nil {
		// A flag wins over config.yaml (pkg/configfilearg).
		cfg.S3.Folder = *flags.s3Folder
	}
	logf(log, "Starting k3s %s (%s)", Version(), commit(Version()))
	token, err := serverToken(flags.token, flags.tokenFile, cfg)
	if err != nil {
		return err
	}
	hostname, _ := os.Hostname()
	ip := cfg.NodeIP
	if ip == "" {
		ip = nodeIP()
	}
	me := member{hostname, ip}
	tls := filepath.Join(DataDir, "tls")
	if flags.clusterReset {
		return clusterReset(flags.restorePath, cfg.S3, token, tls, me, log)
	}
	bctx, bcancel := context.WithTimeout(context.Background(), time.Minute)
	defer bcancel()
	var dir, initial string
	if server := firstOf(flags.server, cfg.Server); server != "" && !exists(filepath.Join(etcdDir, "member")) {
		// A server joining an embedded-etcd cluster: its member is added
		// through the cluster it names, which must know its token.
		if initial, err = joinCluster(bctx, server, token, flags.token != "" || flags.tokenFile != "" || cfg.Token != "" || cfg.TokenFile != "", me, log); err != nil {
			return err
		}
		dir = etcdDir
	} else if dir, err = datastore(cfg.ClusterInit || flags.clusterInit, log); err != nil {
		return err
	}
	_ = os.Remove(resetFlag)
	etcd, err := startEtcd(dir, me, initial)
	if err != nil {
		return err
	}
	defer etcd.Close()
	if err := promote(bctx, etcd, log); err != nil {
		return err
	}
	found, err := loadBootstrap(bctx, token, DataDir, log)
	if err != nil {
		return err
	}
	// secrets-encryption: the key the datastore's bootstrap data brought,
	// else a new one (k3s pkg/daemons/control/deps/deps.go,
	// genEncryptionConfigAndState, after the bootstrap reconcile).
	var encryption string
	store := !found // the disk's bootstrap files into the datastore
	if cfg.SecretsEncryption {
		encryption = filepath.Join(DataDir, encryptionConfigFile)
		made, err := genEncryptionConfig(encryption)
		if err != nil {
			return err
		}
		// A key made here, which the datastore's bootstrap data does not
		// hold yet, goes there for the servers that join.
		store = store || made
	}

	ca, err := loadCAs(tls)
	if err != nil {
		return err
	}
	// The CAs and the service account key go into the datastore's
	// bootstrap data, from which a joining server takes them.
	if store {
		if err := storeBootstrap(bctx, token, DataDir); err != nil {
			return err
		}
	}
	if err := writeToken(token); err != nil {
		return err
	}
	certs, err := issueCerts(tls, ca, hostname, ip, cfg.TLSSAN)
	if err != nil {
		return err
	}
	serverCA, clientCA, saKey := ca.server, ca.client, ca.serviceKey

	apiArgs := apiServerArgs(tls, ip, saKey)
	if encryption != "" {
		// k3s pkg/daemons/control/server.go, apiServer(): with
		// EncryptSecrets, encryption-provider-config and, in the newest
		// version read, encryption-provider-config-automatic-reload.
		apiArgs = append(apiArgs, "--encryption-provider-config="+encryption, "--encryption-provider-config-automatic-reload=true")
		// The API server reads its encryption config again every 5 s,
		// not every minute: the poll interval upstream's apiserver
		// exposes for its own integration tests. k3s's secrets-encrypt
		// waits for that reload (waitReload, up to 120 s), so each
		// enable and rotate-keys waited up to a minute for it; what the
		// API server then does is the same (docs/lab.md).
		encryptioncontroller.EncryptionConfigFileChangePollDuration = 5 * time.Second
	}
	apiArgs = append(apiArgs, reportReleaseVersion(Version())...)
	apiArgs = withExtraArgs(apiArgs, cfg.APIServerArgs)
	apiDone := make(chan int, 1)
	go func() {
		cmd := app.NewAPIServerCommand()
		cmd.SetArgs(apiArgs)
		apiDone <- cli.Run(cmd)
	}()

	rc := &rest.Config{Host: "https://127.0.0.1:" + port, TLSClientConfig: rest.TLSClientConfig{
		CAData: serverCA.CertPEM, CertData: certs.adminCert, KeyData: certs.adminKey},
		// k3s's own controllers are not throttled like a client (the
		// default 5 QPS made every reconcile pass take seconds).
		QPS: 200, Burst: 400}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := waitReady(ctx, cs, apiDone); err != nil {
		return err
	}
	if err := writeKubeconfig(cfg, serverCA.CertPEM, certs.adminCert, certs.adminKey); err != nil {
		return err
	}
	logf(log, "Wrote kubeconfig %s", KubeConfig)
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	if err := applyHelmCRDs(ctx, dc); err != nil {
		logf(log, "apply CRDs: %v", err)
	}
	if err := applyCRD(ctx, dc, []byte(addonCRD)); err != nil {
		logf(log, "apply Addon CRD: %v", err)
	}
	// k3s's agent in the same process: its kubelet registers the node
	// and runs the pods bound to it.
	kl := &kubelet.Kubelet{CS: cs, Node: hostname, IP: ip, Version: Version(), Etcd: dir == etcdDir, LabDir: labDir(), CA: serverCA.CertPEM, Log: log,
		Helm: &klipperhelm.Runner{LabDir: labDir()},
		Net:  &podnet.Network{ClusterCIDR: netip.MustParsePrefix(clusterCIDR)}}
	// disable-agent: no kubelet, so no pod runs here (k3s
	// pkg/cli/server/server.go: agent.RunStandalone, with no container
	// runtime). The Node a restored snapshot holds stays as it was.
	if !cfg.DisableAgent {
		if err := kl.Register(ctx); err != nil {
			return err
		}
		// k3s pkg/server/server.go, setNodeLabelsAndAnnotations: a
		// server with secrets-encryption puts its stage and config
		// hash on its node, which secrets-encrypt compares; one it
		// cannot set is logged, not fatal.
		if encryption != "" {
			if err := bootstrapAnnotation(ctx, cs, hostname); err != nil {
				logf(log, "Unable to set encryption hash annotation %s", err.Error())
			}
		}
	}
	// What `k3s secrets-encrypt` asks the running server (secretsencrypt.go).
	if b, err := json.Marshal(running{EncryptSecrets: encryption != ""}); err == nil {
		if err := writeFile(filepath.Join(DataDir, runningFile), b, 0o600); err != nil {
			return err
		}
	}
	// k3s's rolebindings.yaml: the API server may use the kubelets' API.
	if err := kubeletAPIAdmin(ctx, cs); err != nil {
		return err
	}
	// Upstream's controller manager and scheduler, as k3s runs them
	// (each leader-elected by its own Lease). They live as long as the
	// process: a lost Lease ends it, as it ends k3s.
	cp := controlplane.Config{DataDir: DataDir, APIServer: "https://127.0.0.1:" + port, ServerCA: serverCA, ClientCA: clientCA,
		ServerCADir: filepath.Join(tls, "server-ca"), ClientCADir: filepath.Join(tls, "client-ca"), ServiceKey: saKey,
		ServiceCIDR: serviceCIDR, ClusterCIDR: clusterCIDR, Log: log}
	cpDone := make(chan error, 2)
	go func() {
		cpDone <- fmt.Errorf("kube-controller-manager exited: %w", controlplane.RunControllerManager(context.Background(), cp))
	}()
	go func() {
		cpDone <- fmt.Errorf("kube-scheduler exited: %w", controlplane.RunScheduler(context.Background(), cp))
	}()
	_ = os.MkdirAll(ManifestsDir, 0o700)
	dep, err := newDeployer(rc, cs, log)
	if err != nil {
		return err
	}
	// The manifests present at start are applied before k3s says it is up,
	// so a restart hands over a cluster that has them; the 15 s rescans
	// follow in the background.
	dep.scan(ctx)
	go dep.run(ctx)
	// k3s embeds helm-controller (docs/upstream.md §2.7): upstream's,
	// on the server that holds the k3s Lease.
	go runHelmController(ctx, rc, cs, hostname, log, port)
	if dir == etcdDir && !cfg.DisableSnapshots {
		if err := scheduleSnapshots(ctx, cfg.SnapshotCron, cfg.SnapshotRetention, cfg.S3, hostname, log); err != nil {
			return err
		}
	}
	kubeletDone := make(chan struct{})
	if cfg.DisableAgent {
		close(kubeletDone)
	} else {
		go func() {
			defer close(kubeletDone)
			kl.Run(ctx)
		}()
		clientPool := x509.NewCertPool()
		clientPool.AddCert(clientCA.Cert)
		go func() {
			if err := kl.Serve(ctx, kubelet.Serving{Cert: certs.kubeletCert, Key: certs.kubeletKey, ClientCA: clientPool}); err != nil {
				logf(log, "kubelet API: %v", err)
			}
		}()
	}
	logf(log, "k3s is up and running")
	sdNotify("READY=1")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		// The pods' containers stop with their server: kube-vip's
		// gives the address up, so the next holder is the only one.
		cancel()
		select {
		case <-kubeletDone:
		case <-time.After(3 * time.Second):
		}
		return nil
	case code := <-apiDone:
		return fmt.Errorf("kube-apiserver exited %d", code)
	case err := <-cpDone:
		return err
	}
}

// cas are the cluster's CAs and its service account key, as k3s keeps
// them under server/tls: created by the first server, taken from the
// bootstrap data by a joining one (loadBootstrap, before this).
type cas struct {
	server, client, requestHeader *pki.CA
	serviceKey                    string // the key file's path
}

func loadCAs(tls string) (cas, error) {
	var c cas
	var err error
	if c.server, err = pki.LoadOrCreate(filepath.Join(tls, "server-ca")); err != nil {
		return c, err
	}
	if c.client, err = pki.LoadOrCreate(filepath.Join(tls, "client-ca")); err != nil {
		return c, err
	}
	// The front proxy's CA (k3s's request-header-ca): the API server
	// publishes it in kube-system/extension-apiserver-authentication, where
	// the controller manager and the scheduler read it to authenticate
	// requests to their secure ports.
	if c.requestHeader, err = pki.LoadOrCreate(filepath.Join(tls, "request-header-ca")); err != nil {
		return c, err
	}
	c.serviceKey = filepath.Join(tls, "service.key")
	if _, err := os.Stat(c.serviceKey); err != nil {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.MarshalECPrivateKey(k)
		if err := writeFile(c.serviceKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return c, err
		}
	}
	return c, nil
}

// certs are what this server issues itself at each start, as k3s does
// (pkg/daemons/control/deps/deps.go): the API server's serving
// certificate, the admin's client, the API server's client for the
// kubelets, the front proxy's client, and the kubelet's serving
// certificate; the ones the process keeps in memory are returned.
type certs struct {
	adminCert, adminKey     []byte
	kubeletCert, kubeletKey []byte
}

func issueCerts(tls string, ca cas, hostname, ip string, tlsSAN []string) (certs, error) {
	var c certs
	names, ips := SANs(hostname, ip, tlsSAN)
	servCert, servKey, err := ca.server.Issue("k3s", names, ips)
	if err != nil {
		return c, err
	}
	if err := writeKeyPair(tls, "serving-kube-apiserver", servCert, servKey); err != nil {
		return c, err
	}
	if c.adminCert, c.adminKey, err = adminClient(tls, ca.client); err != nil {
		return c, err
	}
	// The API server's client certificate for the kubelets (user
	// kube-apiserver, as k3s's client-kube-apiserver.crt), and this
	// node's kubelet serving certificate (k3s's serving-kubelet.crt).
	kubeletClientCert, kubeletClientKey, err := ca.client.IssueClient("kube-apiserver", nil)
	if err != nil {
		return c, err
	}
	if err := writeKeyPair(tls, "client-kube-apiserver", kubeletClientCert, kubeletClientKey); err != nil {
		return c, err
	}
	proxyCert, proxyKey, err := ca.requestHeader.IssueClient("system:auth-proxy", nil)
	if err != nil {
		return c, err
	}
	if err := writeKeyPair(tls, "client-auth-proxy", proxyCert, proxyKey); err != nil {
		return c, err
	}
	c.kubeletCert, c.kubeletKey, err = ca.server.Issue(hostname, []string{hostname, "localhost"}, []net.IP{net.ParseIP(ip), net.ParseIP("127.0.0.1")})
	return c, err
}

// apiServerArgs are the flags k3s starts its kube-apiserver with
// (pkg/daemons/control/server.go apiServer()), as far as the lab's
// cluster needs them.
func apiServerArgs(tls, ip, saKey string) []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=" + port, "--advertise-address=" + ip,
		"--tls-cert-file=" + filepath.Join(tls, "serving-kube-apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(tls, "serving-kube-apiserver.key"),
		"--client-ca-file=" + filepath.Join(tls, "client-ca", "ca.crt"),
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local,k3s",
		"--authorization-mode=Node,RBAC", "--anonymous-auth=false",
		"--service-cluster-ip-range=" + serviceCIDR, "--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction",
		"--profiling=false", "--cert-dir=" + filepath.Join(tls, "temporary-certs"),
		// How it reaches the kubelets (kubectl logs): k3s's flags.
		"--kubelet-certificate-authority=" + filepath.Join(tls, "server-ca", "ca.crt"),
		"--kubelet-client-certificate=" + filepath.Join(tls, "client-kube-apiserver.crt"),
		"--kubelet-client-key=" + filepath.Join(tls, "client-kube-apiserver.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--requestheader-client-ca-file=" + filepath.Join(tls, "request-header-ca", "ca.crt"),
		"--requestheader-allowed-names=system:auth-proxy",
		"--proxy-client-cert-file=" + filepath.Join(tls, "client-auth-proxy.crt"),
		"--proxy-client-key-file=" + filepath.Join(tls, "client-auth-proxy.key"),
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		// No kube-proxy routes Service ClusterIPs here, so the API server
		// reaches webhook Services through their EndpointSlices.
		"--enable-aggregator-routing=true",
	}
}

// withExtraArgs is args with each of kube-apiserver-arg's "flag=value"
// entries over the flag of that name, or added: k3s
// pkg/daemons/config GetArgs, which lets a user's argument replace the
// one k3s sets.
func withExtraArgs(args, extra []string) []string {
	out := append([]string(nil), args...)
	for _, e := range extra {
		e = "--" + strings.TrimPrefix(e, "--")
		name, _, _ := strings.Cut(e, "=")
		replaced := false
		for i, a := range out {
			if n, _, _ := strings.Cut(a, "="); n == name {
				out[i], replaced = e, true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

// notifySocket is taken from the environment at start and removed from it:
// the embedded etcd would otherwise announce READY=1 itself, before the
// apiserver is up.
var notifySocket string

// sdNotify tells systemd (Type=notify) the service is up, as k3s does.
func sdNotify(state string) {
	sock := notifySocket
	if sock == "" {
		return
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}

// member is this server as an etcd member: named after its host, on its
// node IP (clients also on loopback, where the apiserver reaches it).
type member struct{ name, ip string }

func (m member) peerURL() string { return "http://" + m.ip + ":2380" }

// startEtcd starts this server's etcd member on dir. A new data directory
// founds a cluster of one, or, with initialCluster (a join), becomes a
// member of an existing one; an existing data directory is what it is.
// The lab's etcd speaks plain HTTP on the lab network (k3s uses TLS with
// its etcd CA; nothing outside k3s talks to etcd here).
func startEtcd(dir string, m member, initialCluster string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = m.name
	// Every address of the VM, the VIP included: a joining server reaches
	// etcd at its server URL's host, where k3s asks the supervisor at
	// :6443 for the members (/db/info), which the lab does not serve.
	lc, _ := url.Parse("http://0.0.0.0:2379")
	cu, _ := url.Parse("http://" + m.ip + ":2379")
	pu, _ := url.Parse(m.peerURL())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*lc}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = m.name + "=" + m.peerURL()
	if initialCluster != "" {
		cfg.InitialCluster, cfg.ClusterState = initialCluster, embed.ClusterStateFlagExisting
	}
	// k3s's own timing, not etcd's defaults (100 and 1000 ms): a heartbeat
	// every 500 ms, an election after 5 s without one (k3s pkg/etcd/etcd.go,
	// (*ETCD).cluster: HeartbeatInterval 500, ElectionTimeout 5000). With
	// etcd's, a member starved of CPU for a second on a busy machine
	// called an election, and the API answered "etcdserver: no leader".
	cfg.TickMs, cfg.ElectionMs = 500, 5000
	// No fsync (etcd's --unsafe-no-fsync), unlike k3s: a lab VM's disk is
	// a directory of the lab's machine, and its power cut (labsim stop,
	// qm stop) ends the VM's processes, not the machine's page cache, so
	// every write etcd made survives it with or without a sync; a sync
	// only costs the lab's shared disk a journal commit per write, three
	// times over in a cluster of servers (docs/lab.md).
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(2 * time.Minute):
		e.Close()
		return nil, fmt.Errorf("etcd did not become ready")
	}
	// A member whose address changed (or a data directory from before
	// members had their node's address) advertises where it is now, as
	// k3s updates its member's peer URL at start.
	id := uint64(e.Server.MemberID())
	for _, mm := range e.Server.Cluster().Members() {
		if uint64(mm.ID) == id && (len(mm.PeerURLs) != 1 || mm.PeerURLs[0] != m.peerURL()) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl, err := etcdClient()
			if err == nil {
				defer cl.Close()
				_, err = cl.MemberUpdate(ctx, id, []string{m.peerURL()})
			}
			if err != nil {
				e.Close()
				return nil, fmt.Errorf("update etcd member %s peer URL: %w", m.name, err)
			}
		}
	}
	return e, nil
}

// waitReady polls /readyz: the apiserver offers nothing to watch before it
// is ready.
func waitReady(ctx context.Context, cs *kubernetes.Clientset, done <-chan int) error {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(b) == "ok" {
			return nil
		}
		select {
		case code := <-done:
			return fmt.Errorf("kube-apiserver exited %d", code)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver not ready in 3 minutes")
}

// writeKubeconfig writes k3s.yaml as k3s does: server 127.0.0.1, cluster,
// user and context named "default", mode from write-kubeconfig-mode.
func writeKubeconfig(cfg Config, ca, cert, key []byte) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["default"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + port, CertificateAuthorityData: ca}
	kc.AuthInfos["default"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	kc.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default"}
	kc.CurrentContext = "default"
	if err := os.MkdirAll(filepath.Dir(KubeConfig), 0o755); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*kc, KubeConfig); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if cfg.WriteKubeconfigMode != "" {
		m, err := strconv.ParseUint(cfg.WriteKubeconfigMode, 8, 32)
		if err != nil {
			return fmt.Errorf("invalid write-kubeconfig-mode %q", cfg.WriteKubeconfigMode)
		}
		mode = os.FileMode(m)
	}
	return os.Chmod(KubeConfig, mode)
}

// labDir is where the lab keeps what k3s embeds upstream (its CRDs).
func labDir() string {
	var c struct {
		Dir string `json:"dir"`
	}
	b, _ := os.ReadFile("/etc/labsim/lab.json")
	_ = json.Unmarshal(b, &c)
	return c.Dir
}

// applyCRD creates or updates one CRD given as YAML, and waits until it
// is Established so objects of its kind can be applied.
func applyCRD(ctx context.Context, dc dynamic.Interface, b []byte) error {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return err
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(j); err != nil {
		return err
	}
	return applyCRDObject(ctx, dc, u.Object)
}

// applyCRDObject creates or updates one CRD and waits until it is
// Established.
func applyCRDObject(ctx context.Context, dc dynamic.Interface, obj map[string]any) error {
	return simkube.ApplyCRD(ctx, dc, &unstructured.Unstructured{Object: obj}, "k3s", 10*time.Second)
}

// kubeletAPIAdmin binds the API server's kubelet client (user
// kube-apiserver) to system:kubelet-api-admin, as k3s's
// manifests/rolebindings.yaml does (kube-apiserver-kubelet-admin).
func kubeletAPIAdmin(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-kubelet-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "kube-apiserver"}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// adminClient is the admin's client certificate, kept as k3s keeps it
// (tls/client-admin.crt and .key) and reused at every start while the
// cluster's client CA still signs it: k3s.yaml stays the same across
// restarts. A restore that brings another CA gets a new one.
func adminClient(tls string, clientCA *pki.CA) (cert, key []byte, err error) {
	certPath, keyPath := filepath.Join(tls, "client-admin.crt"), filepath.Join(tls, "client-admin.key")
	cb, cerr := os.ReadFile(certPath)
	kb, kerr := os.ReadFile(keyPath)
	if cerr == nil && kerr == nil {
		if blk, _ := pem.Decode(cb); blk != nil {
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil && c.CheckSignatureFrom(clientCA.Cert) == nil && time.Until(c.NotAfter) > 90*24*time.Hour {
				return cb, kb, nil
			}
		}
	}
	cert, key, err = clientCA.IssueClient("system:admin", []string{"system:masters"})
	if err != nil {
		return nil, nil, err
	}
	return cert, key, writeKeyPair(tls, "client-admin", cert, key)
}
