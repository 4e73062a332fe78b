package statuscheck

import (
	"context"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/health"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/session"
)

// snapshotsCheck judges the first server's newest scheduled snapshot
// (k3s.SnapshotsFresh).
func snapshotsCheck(ctx context.Context, s *session.Session) health.Finding {
	srv := s.Config.Servers()[0]
	h, err := s.DialVM(ctx, srv, false, nil)
	if err != nil {
		return health.Bad("mgmtctl apply", "%s not reached: %v", srv.Name, err)
	}
	ls, started, err := k3s.ReadSnapshots(ctx, h)
	if err != nil {
		return health.Bad("mgmtctl apply", "%s: %v", srv.Name, err)
	}
	ok, detail := k3s.SnapshotsFresh(ls, s.Config.Cluster.Spec.Backup.Schedule, started, time.Now())
	if !ok {
		return health.Bad("on the server, k3s's log says why: sudo journalctl -u k3s", "%s", detail)
	}
	return health.Good("%s", detail)
}
