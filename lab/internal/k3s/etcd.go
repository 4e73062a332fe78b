package k3s

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The datastore, after k3s-io/k3s v1.35.7+k3s1 pkg/etcd/etcd.go (the
// embedded member: cluster-init, join, reset), pkg/etcd/snapshot.go and
// pkg/cli/etcdsnapshot (snapshots under server/db/snapshots) and
// pkg/cluster/storage.go (the token's bootstrap data). Upstream k3s keeps
// a lone server's data in SQLite
// (kine, server/db/state.db) unless it runs with cluster-init, which makes
// it an embedded etcd (server/db/etcd); an existing SQLite datastore is
// converted when the server restarts with cluster-init, and once etcd,
// always etcd (docs.k3s.io datastore/ha-embedded). The lab always runs a
// real etcd; in "SQLite" mode its data directory is named kineDir, so the
// two modes differ where a user sees them: `k3s etcd-snapshot` refuses a
// datastore that is not etcd.
var (
	etcdDir      = filepath.Join(DataDir, "db", "etcd")
	kineDir      = filepath.Join(DataDir, "db", "state.db.lab")
	snapshotDir  = filepath.Join(DataDir, "db", "snapshots")
	resetFlag    = filepath.Join(DataDir, "db", "reset-flag")
	tokenFile    = filepath.Join(DataDir, "token")
	nodeTokenFil = filepath.Join(DataDir, "node-token")
)

// errEtcdDisabled is k3s's answer to a snapshot of a SQLite datastore.
var errEtcdDisabled = errors.New("etcd datastore disabled")

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// datastore picks the data directory: etcd when it exists or cluster-init
// asks for it (converting a SQLite one), else SQLite.
func datastore(clusterInit bool, log io.Writer) (string, error) {
	if exists(etcdDir) {
		return etcdDir, nil
	}
	if !clusterInit {
		return kineDir, nil
	}
	if exists(kineDir) {
		logf(log, "Migrating content from sqlite to etcd")
		if err := os.Rename(kineDir, etcdDir); err != nil {
			return "", err
		}
	}
	return etcdDir, nil
}

// serverToken is the token this start uses: the flag, the config, the
// token file a previous start wrote, or a new one in k3s's format
// (K10<ca hash>::server:<password>).
func serverToken(flag, flagFile string, cfg Config) (string, error) {
	for _, f := range []string{flagFile, cfg.TokenFile} {
		if f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", fmt.Errorf("reading token file %s: %w", f, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	for _, t := range []string{flag, cfg.Token} {
		if t != "" {
			return t, nil
		}
	}
	if b, err := os.ReadFile(tokenFile); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	pw := make([]byte, 16)
	_, _ = rand.Read(pw)
	return "K10" + hex.EncodeToString(pw[:8]) + "::server:" + hex.EncodeToString(pw), nil
}

// password is the token's secret part, which encrypts the bootstrap data.
func password(token string) string {
	if _, pw, ok := strings.Cut(token, "::server:"); ok {
		return pw
	}
	return token
}

func writeToken(token string) error {
	for _, p := range []string{tokenFile, nodeTokenFil} {
		if err := writeFile(p, []byte(token+"\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// bootstrapFiles are the CA material k3s keeps in the datastore as
// bootstrap data, so a server restored elsewhere gets the cluster's CAs
// back (docs.k3s.io cli/etcd-snapshot, "Restoring To New Hosts"), and the
// secrets-encryption config with its key (k3s pkg/daemons/config/types.go,
// ControlRuntimeBootstrap: EncryptionConfig beside the CAs), so a server
// that joins or restores reads the Secrets the others wrote. Paths are
// under DataDir.
var bootstrapFiles = []string{"tls/server-ca/ca.crt", "tls/server-ca/ca.key", "tls/client-ca/ca.crt", "tls/client-ca/ca.key",
	"tls/request-header-ca/ca.crt", "tls/request-header-ca/ca.key", "tls/service.key", encryptionConfigFile, encryptionStateFile}

func bootstrapKey(token string) string {
	h := sha256.Sum256([]byte(password(token)))
	return "/bootstrap/" + hex.EncodeToString(h[:6])
}

// seal encrypts the bootstrap data with a key derived from the token's
// password (upstream derives it with PBKDF2; the lab with SHA-256: only
// "another token cannot read it" matters here).
func seal(token string, plain []byte) ([]byte, error) {
	k := sha256.Sum256([]byte(password(token)))
	block, _ := aes.NewCipher(k[:])
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	_, _ = rand.Read(nonce)
	return gcm.Seal(nonce, nonce, plain, nil), nil
}

func open(token string, sealed []byte) ([]byte, error) {
	k := sha256.Sum256([]byte(password(token)))
	block, _ := aes.NewCipher(k[:])
	gcm, err := cipher.NewGCM(block)
	if err != nil || len(sealed) < gcm.NonceSize() {
		return nil, errors.New("bootstrap data unreadable")
	}
	return gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], nil)
}

// etcdClient reaches the etcd member at host (this server's by default).
func etcdClient(host ...string) (*clientv3.Client, error) {
	h := "127.0.0.1"
	if len(host) > 0 {
		h = host[0]
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{"http://" + h + ":2379"}, DialTimeout: 10 * time.Second})
}

// loadBootstrap brings the datastore's bootstrap data to disk under dir
// (DataDir): the datastore wins (a restored snapshot brings the cluster's
// CAs back). found is false for a datastore that has none yet; bootstrap
// data under another token's key is upstream's fatal error.
func loadBootstrap(ctx context.Context, token, dir string, log io.Writer) (found bool, err error) {
	cl, err := etcdClient()
	if err != nil {
		return false, err
	}
	defer cl.Close()
	res, err := cl.Get(ctx, "/bootstrap/", clientv3.WithPrefix())
	if err != nil {
		return false, err
	}
	key := bootstrapKey(token)
	for _, kv := range res.Kvs {
		if string(kv.Key) != key {
			continue
		}
		logf(log, "Reconciling bootstrap data between datastore and disk")
		plain, err := open(token, kv.Value)
		if err != nil {
			return false, err
		}
		files := map[string][]byte{}
		if err := json.Unmarshal(plain, &files); err != nil {
			return false, err
		}
		for name, b := range files {
			mode := os.FileMode(0o644)
			if strings.HasSuffix(name, ".key") || name == encryptionConfigFile || name == encryptionStateFile {
				mode = 0o600
			}
			if err := writeFile(filepath.Join(dir, name), b, mode); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if len(res.Kvs) > 0 {
		return false, errors.New("preparing server: failed to bootstrap cluster data: failed to reconcile with local datastore: bootstrap data already found and encrypted with different token")
	}
	return false, nil
}

// storeBootstrap puts the disk's CA material (under dir, DataDir) into
// the datastore, sealed with the token.
func storeBootstrap(ctx context.Context, token, dir string) error {
	cl, err := etcdClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	files := map[string][]byte{}
	for _, name := range bootstrapFiles {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			files[name] = b
		}
	}
	plain, _ := json.Marshal(files)
	sealed, err := seal(token, plain)
	if err != nil {
		return err
	}
	_, err = cl.Put(ctx, bootstrapKey(token), string(sealed))
	return err
}

// EtcdSnapshot runs `k3s etcd-snapshot save|ls|delete` against the
// running server's etcd, as upstream's CLI does through the server.
func EtcdSnapshot(args []string, stdout, stderr io.Writer) int {
	fatal := func(err error) int {
		fmt.Fprintf(stderr, "time=%q level=fatal msg=%q\n", time.Now().UTC().Format(time.RFC3339), "Error: "+err.Error())
		return 1
	}
	cmd := "save"
	name, dir := "on-demand", snapshotDir
	var rest []string
	var s3flag *bool     // --etcd-s3 on the command line, over config.yaml's
	var s3folder *string // --etcd-s3-folder (alias --s3-folder), likewise
	for i := 0; i < len(args); i++ {
		a := args[i]
		k, v, has := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !has && i+1 < len(args) && (k == "name" || k == "dir" || k == "etcd-snapshot-dir" || k == "etcd-s3-folder" || k == "s3-folder") {
			i++
			v = args[i]
		}
		switch {
		case k == "etcd-s3-folder" || k == "s3-folder":
			f := v
			s3folder = &f
		case !strings.HasPrefix(a, "-"):
			rest = append(rest, a)
		case k == "name":
			name = v
		case k == "dir" || k == "etcd-snapshot-dir":
			dir = v
		case k == "s3" || k == "etcd-s3":
			b := !has || v == "true"
			s3flag = &b
		}
	}
	if len(rest) > 0 {
		cmd, rest = rest[0], rest[1:]
	}
	// config.yaml's etcd-s3* settings apply to etcd-snapshot too
	// (pkg/configfilearg reads it for every server subcommand).
	cfg, err := LoadConfig(ConfigFile)
	if err != nil {
		return fatal(err)
	}
	if s3flag != nil {
		cfg.S3.Enabled = *s3flag
	}
	if s3folder != nil {
		cfg.S3.Folder = *s3folder
	}
	ctx := context.Background()
	s3 := func() (*s3Client, error) { return newS3Client(ctx, cfg.S3, io.Discard) }
	switch cmd {
	case "ls", "list", "l":
		entries, _ := os.ReadDir(dir)
		var s3list []s3Snapshot
		if cfg.S3.Enabled {
			c, err := s3()
			if err == nil {
				s3list, err = c.list(ctx)
			}
			if err != nil {
				return fatal(fmt.Errorf("failed to list S3 snapshots: %w", err))
			}
		}
		fmt.Fprintf(stdout, "%-40s %-80s %-10s %s\n", "Name", "Location", "Size", "Created")
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil || e.IsDir() {
				continue
			}
			fmt.Fprintf(stdout, "%-40s %-80s %-10d %s\n", e.Name(), "file://"+filepath.Join(dir, e.Name()), fi.Size(), fi.ModTime().UTC().Format(time.RFC3339))
		}
		for _, o := range s3list {
			fmt.Fprintf(stdout, "%-40s %-80s %-10d %s\n", o.Name, "s3://"+cfg.S3.Bucket+"/"+o.Key, o.Size, o.Created.UTC().Format(time.RFC3339))
		}
		return 0
	case "delete":
		var c *s3Client
		if cfg.S3.Enabled {
			if c, err = s3(); err != nil {
				return fatal(err)
			}
		}
		for _, n := range rest {
			local := os.Remove(filepath.Join(dir, filepath.Base(n)))
			if c != nil {
				if err := c.remove(ctx, filepath.Base(n)); err == nil {
					local = nil
				}
			}
			if local != nil {
				return fatal(local)
			}
			logf(stderr, "Snapshot %s deleted.", n)
		}
		return 0
	case "save":
		if !exists(etcdDir) {
			return fatal(fmt.Errorf("see server log for details: %w", errEtcdDisabled))
		}
		hostname, _ := os.Hostname()
		file := fmt.Sprintf("%s-%s-%d", name, hostname, time.Now().Unix())
		if err := saveSnapshot(filepath.Join(dir, file)); err != nil {
			return fatal(err)
		}
		logf(stderr, "Snapshot %s saved.", file)
		if cfg.S3.Enabled {
			// An on-demand snapshot goes to S3 too; k3s prunes only the
			// scheduled ones.
			if err := uploadSnapshot(ctx, cfg.S3, filepath.Join(dir, file), "", stderr); err != nil {
				return fatal(fmt.Errorf("failed to upload snapshot to S3: %w", err))
			}
		}
		return 0
	}
	fmt.Fprintf(stderr, "No help topic for '%s'\n", cmd)
	return 3
}

// saveSnapshot streams etcd's snapshot (with its trailing sha256, as
// etcd's Maintenance API sends it) to path, mode 0600.
func saveSnapshot(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := etcdClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	rc, err := cl.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("etcd snapshot: %w (is k3s running?)", err)
	}
	defer rc.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// clusterReset restores path (when set) as the only member's data, moving
// the current data aside, then brings the datastore's bootstrap data to
// disk under token, writes the reset flag, and says what to do next.
func clusterReset(restorePath string, s3 S3Config, token, tls string, me member, log io.Writer) error {
	if restorePath != "" && s3.Enabled {
		// With etcd-s3, the restore path is a snapshot's name in the
		// bucket (pkg/etcd/etcd.go Reset).
		logf(log, "Retrieving etcd snapshot %s from S3", restorePath)
		c, err := newS3Client(context.Background(), s3, log)
		if err != nil {
			return fmt.Errorf("failed to initialize S3 client: %w", err)
		}
		if restorePath, err = c.download(context.Background(), restorePath, snapshotDir); err != nil {
			return err
		}
	}
	if restorePath != "" {
		if exists(etcdDir) {
			old := fmt.Sprintf("%s-old-%d", etcdDir, time.Now().Unix())
			if err := os.Rename(etcdDir, old); err != nil {
				return err
			}
		}
		_ = os.Remove(kineDir)
		logf(log, "Pre-restore etcd database moved to %s-old-*", etcdDir)
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: restorePath, Name: me.name, OutputDataDir: etcdDir,
			PeerURLs: []string{me.peerURL()}, InitialCluster: me.name + "=" + me.peerURL(),
			InitialClusterToken: "etcd-cluster",
		})
		if err != nil {
			return fmt.Errorf("failed to restore snapshot %s: %w", restorePath, err)
		}
	}
	if !exists(etcdDir) {
		return errEtcdDisabled
	}
	e, err := startEtcd(etcdDir, me, "")
	if err != nil {
		return err
	}
	defer e.Close()
	backup := fmt.Sprintf("%s-%d", tls, time.Now().Unix())
	logf(log, "Cluster reset: backing up certificates directory to %s", backup)
	if err := copyDir(tls, backup); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	found, err := loadBootstrap(ctx, token, DataDir, log)
	if err != nil {
		return err
	}
	if !found {
		return errors.New("no bootstrap data in the restored datastore")
	}
	if err := writeToken(token); err != nil {
		return err
	}
	if err := writeFile(resetFlag, nil, 0o600); err != nil {
		return err
	}
	logf(log, "Managed etcd cluster membership has been reset, restart without --cluster-reset flag now. Backup and delete ${datadir}/server/db on each peer etcd server and rejoin the nodes")
	return nil
}

func copyDir(from, to string) error {
	return filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode().Perm())
	})
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// promote makes this server's etcd member, a learner since it joined, a
// voting member once it has caught up with the leader (etcd refuses
// before: "can only promote a learner member which is in sync with
// leader"), as k3s's learner manager does.
func promote(ctx context.Context, e *embed.Etcd, log io.Writer) error {
	if !e.Server.IsLearner() {
		return nil
	}
	id := uint64(e.Server.MemberID())
	var eps []string
	for _, m := range e.Server.Cluster().Members() {
		if uint64(m.ID) != id {
			eps = append(eps, m.ClientURLs...)
		}
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cl.Close()
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		_, err := cl.MemberPromote(ctx, id)
		if err == nil {
			logf(log, "Promoted etcd member %s to voter", e.Config().Name)
			// The promotion is the leader's; this member serves reads
			// only once it has applied it ("rpc not supported for
			// learner" until then), a raft round trip later.
			for e.Server.IsLearner() {
				select {
				case <-ctx.Done():
					return fmt.Errorf("etcd member %s: the promotion not applied: %w", e.Config().Name, ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("promote etcd member %s: %w", e.Config().Name, err)
		case <-time.After(wait):
		}
	}
}

// addLearner checks the token against the cluster's bootstrap data,
// removes a member already at this server's address, and adds this one as
// a learner, as k3s adds members (k3s pkg/etcd/etcd.go: MemberAddAsLearner,
// then its learner manager promotes it once in sync): a voting member
// added before it runs would take quorum from a cluster of one until it
// does, and the controllers' leases would lapse meanwhile.
func addLearner(ctx context.Context, cl *clientv3.Client, serverURL, token string, me member, log io.Writer) (*clientv3.MemberAddResponse, error) {
	res, err := cl.Get(ctx, bootstrapKey(token))
	if err != nil {
		return nil, fmt.Errorf("reach the cluster at %s: %w", serverURL, err)
	}
	if len(res.Kvs) == 0 {
		return nil, fmt.Errorf("failed to validate token: the cluster at %s has no bootstrap data for this token", serverURL)
	}
	members, err := cl.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range members.Members {
		for _, p := range m.PeerURLs {
			if p == me.peerURL() {
				logf(log, "Removing stale etcd member %s at %s", m.Name, p)
				if _, err := cl.MemberRemove(ctx, m.ID); err != nil {
					return nil, err
				}
			}
		}
	}
	added, err := cl.MemberAddAsLearner(ctx, []string{me.peerURL()})
	if err != nil {
		return nil, fmt.Errorf("add etcd member %s: %w", me.name, err)
	}
	return added, nil
}

// transientEtcd says whether an etcd error passes by itself: the strict
// reconfig check ("unhealthy cluster" until the last member added has been
// connected for a while), a learner not promoted yet, a leader election,
// a request timed out or a peer not reachable for the moment.
func transientEtcd(err error) bool {
	for _, e := range []error{rpctypes.ErrUnhealthy, rpctypes.ErrTooManyLearners, rpctypes.ErrMemberNotEnoughStarted,
		rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail} {
		if errors.Is(err, e) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// joinCluster adds this server's etcd member to the cluster of the server
// at serverURL and returns the initial-cluster string it starts with. The
// token must be the cluster's: its bootstrap data is sealed with it. A
// member already there at this server's address (a server whose data was
// wiped to rejoin) is removed first, as it is this one.
func joinCluster(ctx context.Context, serverURL, token string, given bool, me member, log io.Writer) (string, error) {
	if !given {
		return "", errors.New("--token is required to join a cluster with --server")
	}
	u, err := url.Parse(serverURL)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("invalid server url %q", serverURL)
	}
	cl, err := etcdClient(u.Hostname())
	if err != nil {
		return "", err
	}
	defer cl.Close()
	// The cluster may be busy with the member added before this one (its
	// promotion, a leader election): k3s retries its join until the
	// cluster takes the member, and so does this, while the errors are
	// etcd's passing ones.
	var added *clientv3.MemberAddResponse
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		added, err = addLearner(ctx, cl, serverURL, token, me, log)
		if err == nil || !transientEtcd(err) {
			break
		}
		logf(log, "Waiting for the etcd cluster to accept a member: %v", err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("add etcd member %s: %w", me.name, err)
		case <-time.After(wait):
		}
	}
	if err != nil {
		return "", err
	}
	logf(log, "Adding member %s=%s to etcd cluster", me.name, me.peerURL())
	var parts []string
	for _, m := range added.Members {
		name := m.Name
		if m.ID == added.Member.ID {
			name = me.name
		}
		if name == "" || len(m.PeerURLs) == 0 {
			continue
		}
		parts = append(parts, name+"="+m.PeerURLs[0])
	}
	sort.Strings(parts)
	return strings.Join(parts, ","), nil
}
