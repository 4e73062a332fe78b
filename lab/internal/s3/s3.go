// Package s3 runs the lab's S3 server on the mirror host: upstream's
// versitygw (github.com/versity/versitygw, Apache-2.0), built from its
// module by hack/build.sh (lab/s3gw), with its POSIX backend on the
// mirror's disk and TLS from the lab's CA, as an off-site S3 endpoint a
// user points k3s's etcd snapshots at. Its root user's keys are the
// lab's (CredentialsFile), handed to versitygw in its environment, never
// on a command line.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Port is where the lab's S3 answers on the mirror (versitygw's default).
const Port = "7070"

// Region is the region the lab's S3 says it is in.
const Region = "us-east-1"

// UnsignedPayload is the x-amz-content-sha256 of a request whose body the
// signature leaves out, which S3 requires of every SigV4 request
// (curl's --aws-sigv4 sends none of its own).
const UnsignedPayload = "UNSIGNED-PAYLOAD"

// Bucket is the bucket the lab makes for k3s's snapshots.
const Bucket = "k3s-snapshots"

// Credentials are the root user's keys, "<access> <secret>" in one line.
type Credentials struct{ Access, Secret string }

// ReadCredentials reads a credentials file.
func ReadCredentials(path string) (Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return Credentials{}, fmt.Errorf("%s: want \"<access key> <secret key>\"", path)
	}
	return Credentials{f[0], f[1]}, nil
}

// Gateway is versitygw serving Root over HTTPS at Addr.
type Gateway struct {
	Binary      string // versitygw
	Addr        string // ip:port
	Cert, Key   string
	CA          string // the lab's CA, which signs Cert
	Root        string // the POSIX backend's directory
	Credentials string // the credentials file
	Buckets     []string
	// Ready is written once the buckets are there, and removed at stop.
	Ready string
	Log   io.Writer
}

// Run starts versitygw, makes the buckets once it answers, and stops it
// when ctx ends.
func (g *Gateway) Run(ctx context.Context) error {
	c, err := ReadCredentials(g.Credentials)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(g.Root, 0o700); err != nil {
		return err
	}
	cmd := exec.Command(g.Binary, "--port", g.Addr, "--cert", g.Cert, "--key", g.Key, "--region", Region, "--quiet", "posix", g.Root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+c.Access, "ROOT_SECRET_KEY="+c.Secret)
	cmd.Stdout, cmd.Stderr = g.Log, g.Log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	if err := g.waitListening(ctx, exited); err != nil {
		stop()
		return err
	}
	for _, b := range g.Buckets {
		if err := g.makeBucket(ctx, c, b); err != nil {
			stop()
			return err
		}
	}
	if err := os.WriteFile(g.Ready, []byte("https://"+g.Addr+"\n"), 0o644); err != nil {
		stop()
		return err
	}
	defer os.Remove(g.Ready)
	select {
	case <-ctx.Done():
		stop()
		return nil
	case err := <-exited:
		return fmt.Errorf("versitygw exited: %v", err)
	}
}

// waitListening waits for versitygw's port to take a connection.
func (g *Gateway) waitListening(ctx context.Context, exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", g.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw not listening at %s after 30 s: %v", g.Addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			return fmt.Errorf("versitygw exited at start: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// makeBucket creates a bucket as a user does with any S3 client: a
// CreateBucket request signed with SigV4 (curl's --aws-sigv4), the keys
// given on its standard input, not its command line. One the root user
// already owns is left as it is (a lab started again).
func (g *Gateway) makeBucket(ctx context.Context, c Credentials, bucket string) error {
	cmd := exec.CommandContext(ctx, "curl", "-sS", "-K", "-", "--cacert", g.CA, "--aws-sigv4", "aws:amz:"+Region+":s3",
		"-H", "x-amz-content-sha256: "+UnsignedPayload, "-X", "PUT", "-o", "/dev/stderr", "-w", "%{http_code}", "https://"+g.Addr+"/"+bucket)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("user = %q\n", c.Access+":"+c.Secret))
	var body strings.Builder
	cmd.Stderr = &body
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("create bucket %s: %v: %s", bucket, err, body.String())
	}
	switch code := strings.TrimSpace(string(out)); {
	case code == "200":
		return nil
	case code == "409" && strings.Contains(body.String(), "BucketAlreadyOwnedByYou"):
		return nil
	default:
		return errors.New("create bucket " + bucket + ": HTTP " + code + ": " + body.String())
	}
}
