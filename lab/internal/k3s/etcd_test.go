package k3s

import (
	"context"
	"errors"
	"fmt"
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
