package lab_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/internal/s3"
	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// waitS3 waits for the lab's S3 to serve its buckets (its ready file),
// at most a minute.
func waitS3(t *testing.T, l *labtest.Lab) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		if b, err := os.ReadFile(l.S3Ready()); err == nil {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(l.HostLog("mirror"))
			t.Fatalf("the lab's S3 never got ready; the mirror's log:\n%s", log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestS3: the lab's S3 (upstream's versitygw on the mirror) answers over
// TLS signed by the lab's CA at the mirror's address, with the bucket for
// k3s's snapshots made; an object put with the root user's keys (SigV4)
// is listed and read back; a wrong secret key is refused as S3 refuses
// it.
func TestS3(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t)
	url := waitS3(t, l)
	if url != "https://"+lab.MirrorAddr+":"+s3.Port {
		t.Fatalf("S3 at %q", url)
	}
	c, err := s3.ReadCredentials(l.S3CredentialsPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(l.S3CredentialsPath()); fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %v", fi.Mode().Perm())
	}
	dir := t.TempDir()
	curl := func(user string, args ...string) labtest.Result {
		cfg := filepath.Join(dir, "curl.cfg")
		os.WriteFile(cfg, []byte(fmt.Sprintf("user = %q\n", user)), 0o600)
		return l.Run("", append([]string{"curl", "-sS", "-K", cfg, "--cacert", l.CABundle(), "--aws-sigv4", "aws:amz:" + s3.Region + ":s3", "-H", "x-amz-content-sha256: " + s3.UnsignedPayload, "-w", "\n%{http_code}"}, args...)...)
	}
	obj := filepath.Join(dir, "snap")
	os.WriteFile(obj, []byte("etcd snapshot bytes"), 0o600)
	root := url + "/" + s3.Bucket
	if r := curl(c.Access+":"+c.Secret, "-X", "PUT", "--data-binary", "@"+obj, root+"/lab/etcd-snapshot-1"); !strings.HasSuffix(r.Stdout, "\n200") {
		t.Fatalf("put: %+v", r)
	}
	if r := curl(c.Access+":"+c.Secret, root+"?list-type=2&prefix=lab%2F"); !strings.Contains(r.Stdout, "<Key>lab/etcd-snapshot-1</Key>") || !strings.HasSuffix(r.Stdout, "\n200") {
		t.Errorf("list: %+v", r)
	}
	if r := curl(c.Access+":"+c.Secret, root+"/lab/etcd-snapshot-1"); r.Stdout != "etcd snapshot bytes\n200" {
		t.Errorf("get: %+v", r)
	}
	if r := curl(c.Access+":wrong-secret", root+"?list-type=2"); !strings.Contains(r.Stdout, "SignatureDoesNotMatch") || !strings.HasSuffix(r.Stdout, "\n403") {
		t.Errorf("a wrong secret key: %+v", r)
	}
}
