package phase

import (
	"context"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/backup"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// TestOnlyIf: a step made conditional keeps being what it was (a
// Finisher stays one, so the engine still reads back its work), and
// applies exactly when the backup's reason is not empty.
func TestOnlyIf(t *testing.T) {
	reason := ""
	b := &backup.Before{Reason: func(context.Context) (string, error) { return reason, nil }}
	save := onlyIf(&backup.Save{T: &backup.Take{}}, b)
	if _, ok := save.(step.Finisher); !ok {
		t.Error("the save step lost its Finish")
	}
	pause := onlyIf(&capi.Pause{C: &capi.Clusters{}}, b)
	for _, s := range []step.Step{save, pause} {
		c, ok := s.(step.Conditional)
		if !ok {
			t.Fatalf("%s is not conditional", s.ID())
		}
		if ok, err := c.Applies(context.Background()); ok || err != nil {
			t.Errorf("%s applies with no reason: %v", s.ID(), err)
		}
	}
	reason = "before upgrading k3s"
	b2 := &backup.Before{Reason: b.Reason}
	if ok, err := onlyIf(&capi.Pause{C: &capi.Clusters{}}, b2).(step.Conditional).Applies(context.Background()); !ok || err != nil {
		t.Errorf("with a reason: %v %v", ok, err)
	}
}
