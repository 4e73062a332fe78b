package phase

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/config"
)

// TestEachServer: the servers run side by side, and the error returned is
// the first in the servers' order, whichever failed first in time.
func TestEachServer(t *testing.T) {
	servers := []config.Server{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	var running, most atomic.Int32
	i, err := eachServer(servers, func(i int, srv config.Server) error {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Duration(3-i) * 20 * time.Millisecond) // c ends first
		running.Add(-1)
		if srv.Name != "a" {
			return errors.New("failed on " + srv.Name)
		}
		return nil
	})
	if i != 1 || err == nil || err.Error() != "failed on b" {
		t.Errorf("got %d %v, want 1 failed on b", i, err)
	}
	if most.Load() != 3 {
		t.Errorf("at most %d ran at once, want 3", most.Load())
	}
	if i, err := eachServer(servers, func(int, config.Server) error { return nil }); i != 0 || err != nil {
		t.Errorf("all good: %d %v", i, err)
	}
}
