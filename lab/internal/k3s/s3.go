package k3s

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Snapshots off-site, after k3s-io/k3s v1.35.7+k3s1 pkg/etcd/s3/s3.go
// (minio-go, as k3s uses it): a client per configuration that checks the
// bucket exists; a snapshot uploaded as <folder>/<name>; the snapshots
// listed under the folder with the time in their name; retention applied
// per node prefix, newest kept; a snapshot downloaded by name into the
// snapshot directory for a cluster reset (pkg/etcd/etcd.go Reset:
// "Retrieving etcd snapshot %s from S3"). The access and secret keys come
// from config.yaml or, as the flags etcd-s3-access-key and
// etcd-s3-secret-key are declared (pkg/cli/cmds/server.go,
// etcd_snapshot.go), from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in
// k3s's environment: the unit's EnvironmentFile (/etc/default/k3s), or
// the shell of whoever runs `k3s etcd-snapshot`.

// S3Config is k3s's etcd-s3* settings.
type S3Config struct {
	Enabled       bool   `json:"etcd-s3"`
	Endpoint      string `json:"etcd-s3-endpoint"`
	EndpointCA    string `json:"etcd-s3-endpoint-ca"`
	SkipSSLVerify bool   `json:"etcd-s3-skip-ssl-verify"`
	AccessKey     string `json:"etcd-s3-access-key"`
	SecretKey     string `json:"etcd-s3-secret-key"`
	Bucket        string `json:"etcd-s3-bucket"`
	Region        string `json:"etcd-s3-region"`
	Folder        string `json:"etcd-s3-folder"`
	Insecure      bool   `json:"etcd-s3-insecure"`
	Retention     int    `json:"-"`
}

// s3Defaults are the flags' defaults (pkg/cli/cmds/server.go) and the
// environment's keys.
func (c *S3Config) defaults() {
	if c.Endpoint == "" {
		c.Endpoint = "s3.amazonaws.com"
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.AccessKey == "" {
		c.AccessKey = os.Getenv("AWS_ACCESS_KEY_ID")
	}
	if c.SecretKey == "" {
		c.SecretKey = os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
}

// s3Client is a minio client for one configuration.
type s3Client struct {
	mc  *minio.Client
	cfg S3Config
	log io.Writer
}

// s3Timeout is etcd-s3-timeout's default.
const s3Timeout = 5 * time.Minute

// newS3Client builds the client and checks that the bucket exists, as
// k3s's GetClient does, logging what k3s logs (never the keys).
func newS3Client(ctx context.Context, cfg S3Config, log io.Writer) (*s3Client, error) {
	cfg.defaults()
	scheme := "https://"
	if cfg.Insecure {
		scheme = "http://"
	}
	logf(log, "Attempting to create new S3 client for endpoint=%q bucket=%q folder=%q", scheme+cfg.Endpoint, cfg.Bucket, cfg.Folder)
	if cfg.Bucket == "" {
		return nil, errors.New("s3 bucket name was not set")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	if cfg.SkipSSLVerify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	} else if cfg.EndpointCA != "" {
		tc, err := loadEndpointCAs(cfg.EndpointCA)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	if cfg.AccessKey == "" && cfg.SecretKey == "" {
		// k3s chains the static keys with ~/.aws/credentials and EC2's
		// instance metadata; none of those exists on the lab's VMs.
		return nil, errors.New("failed to get credentials: no access key and secret key (etcd-s3-access-key, etcd-s3-secret-key, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
	}
	mc, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: !cfg.Insecure, Region: cfg.Region, Transport: tr, BucketLookup: minio.BucketLookupAuto,
	})
	if err != nil {
		return nil, err
	}
	logf(log, "Checking if S3 bucket %s exists", cfg.Bucket)
	ctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	ok, err := mc.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("failed to test for existence of bucket %s: %w", cfg.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("bucket %s does not exist", cfg.Bucket)
	}
	logf(log, "S3 bucket %s exists", cfg.Bucket)
	return &s3Client{mc: mc, cfg: cfg, log: log}, nil
}

// loadEndpointCAs reads etcd-s3-endpoint-ca: space-separated values, each
// a base64-encoded PEM bundle or a file's path.
func loadEndpointCAs(v string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	loaded := false
	for _, ca := range strings.Split(v, " ") {
		data, err := base64.StdEncoding.DecodeString(ca)
		if err != nil {
			data, err = os.ReadFile(ca)
		}
		if err != nil {
			return nil, err
		}
		if pool.AppendCertsFromPEM(data) {
			loaded = true
		}
	}
	if !loaded {
		return nil, errors.New("no certificates loaded from etcd-s3-endpoint-ca")
	}
	return &tls.Config{RootCAs: pool}, nil
}

// upload puts a local snapshot at <folder>/<name>.
func (c *s3Client) upload(ctx context.Context, file string) error {
	key := path.Join(c.cfg.Folder, filepath.Base(file))
	logf(c.log, "Uploading snapshot to s3://%s/%s", c.cfg.Bucket, key)
	ctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	hostname, _ := os.Hostname()
	_, err := c.mc.FPutObject(ctx, c.cfg.Bucket, key, file, minio.PutObjectOptions{
		ContentType: "application/octet-stream", UserMetadata: map[string]string{"K3s-Node-Name": hostname}})
	return err
}

// s3Snapshot is one snapshot in the bucket.
type s3Snapshot struct {
	Name, Key string
	Size      int64
	Created   time.Time
}

// list lists the snapshots under the folder (metadata objects and empty
// ones left out), their time from their name, else from the object.
func (c *s3Client) list(ctx context.Context) ([]s3Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	var out []s3Snapshot
	for o := range c.mc.ListObjects(ctx, c.cfg.Bucket, minio.ListObjectsOptions{Prefix: c.cfg.Folder, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		if o.Size == 0 || path.Base(path.Dir(o.Key)) == ".metadata" {
			continue
		}
		name := path.Base(o.Key)
		t := o.LastModified
		if ts, err := strconv.ParseInt(name[strings.LastIndexByte(name, '-')+1:], 10, 64); err == nil {
			t = time.Unix(ts, 0)
		}
		out = append(out, s3Snapshot{Name: name, Key: o.Key, Size: o.Size, Created: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// prune keeps the newest retention snapshots named with prefix.
func (c *s3Client) prune(ctx context.Context, prefix string, retention int) error {
	if retention < 1 {
		return nil
	}
	p := path.Join(c.cfg.Folder, prefix)
	logf(c.log, "Applying snapshot retention=%d to snapshots stored in s3://%s/%s", retention, c.cfg.Bucket, p)
	lctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	var objs []minio.ObjectInfo
	for o := range c.mc.ListObjects(lctx, c.cfg.Bucket, minio.ListObjectsOptions{Prefix: p, Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		if path.Base(path.Dir(o.Key)) != ".metadata" {
			objs = append(objs, o)
		}
	}
	if len(objs) <= retention {
		return nil
	}
	sort.Slice(objs, func(i, j int) bool { return objs[j].LastModified.Before(objs[i].LastModified) })
	for _, o := range objs[retention:] {
		logf(c.log, "Removing S3 snapshot: s3://%s/%s", c.cfg.Bucket, o.Key)
		if err := c.mc.RemoveObject(ctx, c.cfg.Bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes one snapshot by name.
func (c *s3Client) remove(ctx context.Context, name string) error {
	key := path.Join(c.cfg.Folder, name)
	if _, err := c.mc.StatObject(ctx, c.cfg.Bucket, key, minio.StatObjectOptions{}); err != nil {
		return err
	}
	return c.mc.RemoveObject(ctx, c.cfg.Bucket, key, minio.RemoveObjectOptions{})
}

// download fetches <folder>/<name> into dir, mode 0600, and says where.
func (c *s3Client) download(ctx context.Context, name, dir string) (string, error) {
	key := path.Join(c.cfg.Folder, name)
	file := filepath.Join(dir, name)
	ctx, cancel := context.WithTimeout(ctx, s3Timeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := c.mc.FGetObject(ctx, c.cfg.Bucket, key, file, minio.GetObjectOptions{}); err != nil {
		return "", fmt.Errorf("failed to download s3://%s/%s: %w", c.cfg.Bucket, key, err)
	}
	return file, os.Chmod(file, 0o600)
}
