package k3s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTransientEtcd: a join retries what etcd says passes by itself, as
// the etcd client hands it back (an EtcdError, a gRPC status, wrapped),
// and stops at what will not (a token the cluster does not know, a peer
// URL already taken).
func TestTransientEtcd(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrUnhealthy, true},
		{fmt.Errorf("add etcd member lab-mgmt-3: %w", rpctypes.ErrLeaderChanged), true},
		{fmt.Errorf("add etcd member lab-mgmt-3: %w", rpctypes.ErrTooManyLearners), true},
		{rpctypes.ErrNoLeader, true},
		{fmt.Errorf("reach the cluster at https://192.0.2.60:6443: %w", status.Error(codes.Unavailable, "connection refused")), true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{errors.New("failed to validate token: the cluster at https://192.0.2.50:6443 has no bootstrap data for this token"), false},
		{fmt.Errorf("add etcd member lab-mgmt-3: %w", rpctypes.ErrPeerURLExist), false},
		{status.Error(codes.PermissionDenied, "no"), false},
	} {
		if got := transientEtcd(tc.err); got != tc.want {
			t.Errorf("transientEtcd(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestPruneSnapshots: as k3s's snapshotRetention, every snapshot named
// with etcd-snapshot-name counts, whichever node's name it holds, and the
// oldest by the time in its name go beyond the retention; on-demand ones
// and a snapshot still being written stay.
func TestPruneSnapshots(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"etcd-snapshot-s1-1796500000", "etcd-snapshot-s1-1796500060", "etcd-snapshot-s1-1796500120",
		"etcd-snapshot-s2-1796500000", "on-demand-s1-1796500010", "etcd-snapshot-s1-1796500180.part"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	var log bytes.Buffer
	if err := pruneSnapshots(dir, "etcd-snapshot", 2, &log); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := "etcd-snapshot-s1-1796500060 etcd-snapshot-s1-1796500120 etcd-snapshot-s1-1796500180.part on-demand-s1-1796500010"
	if strings.Join(left, " ") != want || !strings.Contains(log.String(), "Removing local snapshot "+filepath.Join(dir, "etcd-snapshot-s1-1796500000")) {
		t.Errorf("left %v\n%s", left, log.String())
	}
}
