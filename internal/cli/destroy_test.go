package cli

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// TestDestroyAsksFirst: destroy lists what it will remove and removes
// nothing unless the cluster's name is typed (a closed stdin is no) or
// --yes is given; a refused step (a VM that is not mgmtctl's) removes
// nothing and exits 1; with nothing left, it says so and exits 0.
func TestDestroyAsksFirst(t *testing.T) {
	e := newEnv(t)
	w := steptest.NewWorld()
	e.exec = w
	w.Set("/vm", "110")
	w.Set("/kubeconfig", "admin")
	var refuse error
	// steptest.File with empty content stands for "absent": destroying is
	// writing the empty state.
	e.destroy = func(*session.Session) step.Phase {
		return step.Phase{Tag: step.TagDestroy, Steps: []step.Step{
			&steptest.File{StepID: "destroy-vm", HostName: "pve", Path: "/vm", Content: "", W: w, CheckErr: refuse},
			&steptest.File{StepID: "admin-kubeconfig", HostName: "laptop", Path: "/kubeconfig", Content: "", W: w},
		}}
	}
	cfg := e.writeConfig("192.0.2.10", nil)

	if code := e.run("destroy", "-c", cfg); code != ExitFailed || !strings.Contains(e.err.String(), "nothing was removed") {
		t.Fatalf("closed stdin: exit %d\n%s\n%s", code, e.out.String(), e.err.String())
	}
	if !strings.Contains(e.out.String(), "destroy will remove:\n  - update /vm\n  - update /kubeconfig\n") || len(w.Mutations()) != 0 {
		t.Errorf("listing %q, mutations %v", e.out.String(), w.Mutations())
	}
	e.in = "not-the-name\n"
	if code := e.run("destroy", "-c", cfg); code != ExitFailed || len(w.Mutations()) != 0 {
		t.Fatalf("wrong name: exit %d, mutations %v", code, w.Mutations())
	}

	refuse = errors.New("VM 110 on pve is not mgmtctl's")
	if code := e.run("destroy", "-c", cfg, "--yes"); code != ExitFailed || !strings.Contains(e.err.String(), "not mgmtctl's") || len(w.Mutations()) != 0 {
		t.Fatalf("foreign VM: exit %d, mutations %v\n%s", code, w.Mutations(), e.err.String())
	}
	refuse = nil

	e.in = "lab-mgmt\n"
	if code := e.run("destroy", "-c", cfg); code != ExitOK || len(w.Mutations()) != 2 {
		t.Fatalf("confirmed: exit %d, mutations %v\n%s", code, w.Mutations(), e.err.String())
	}
	e.in = ""
	if code := e.run("destroy", "-c", cfg); code != ExitOK || !strings.Contains(e.out.String(), "nothing to destroy") {
		t.Errorf("second destroy: exit %d\n%s%s", code, e.out.String(), e.err.String())
	}
}

// answerAfter is a user's answer typed while something else changes the
// world: change runs when the answer is read.
type answerAfter struct {
	answer string
	change func()
	done   bool
}

func (a *answerAfter) Read(p []byte) (int, error) {
	if a.done {
		return 0, io.EOF
	}
	a.done = true
	a.change()
	return copy(p, a.answer), nil
}

// TestDestroyCarriesOutWhatItListed: what changed between the list and
// the confirmation is shown and nothing is removed; unchanged, exactly
// the listed plan is carried out.
func TestDestroyCarriesOutWhatItListed(t *testing.T) {
	e := newEnv(t)
	w := steptest.NewWorld()
	e.exec = w
	w.Set("/vm", "110")
	w.Set("/kubeconfig", "admin")
	e.destroy = func(*session.Session) step.Phase {
		return step.Phase{Tag: step.TagDestroy, Steps: []step.Step{
			&steptest.File{StepID: "destroy-vm", HostName: "pve", Path: "/vm", Content: "", W: w},
			&steptest.File{StepID: "admin-kubeconfig", HostName: "laptop", Path: "/kubeconfig", Content: "", W: w},
		}}
	}
	cfg := e.writeConfig("192.0.2.10", nil)

	// The kubeconfig is rewritten by other hands while the question is
	// open.
	e.stdin = &answerAfter{answer: "lab-mgmt\n", change: func() { w.Files["/kubeconfig"] = "someone else's" }}
	if code := e.run("destroy", "-c", cfg); code != ExitFailed || len(w.Mutations()) != 0 {
		t.Fatalf("changed under the question: exit %d, mutations %v\n%s", code, w.Mutations(), e.err.String())
	}
	if msg := e.err.String(); !strings.Contains(msg, "changed since it was listed; nothing was removed") ||
		!strings.Contains(msg, "destroy/admin-kubeconfig on laptop: listed [update /kubeconfig: update /kubeconfig (diff ") || strings.Contains(msg, "destroy-vm") {
		t.Errorf("the difference is not shown:\n%s", msg)
	}
	if w.Files["/vm"] != "110" {
		t.Error("the VM went although the plan changed")
	}

	// Unchanged: the listed plan is carried out, and only it.
	e.stdin = nil
	e.in = "lab-mgmt\n"
	if code := e.run("destroy", "-c", cfg); code != ExitOK || !reflect.DeepEqual(w.Mutations(), []string{"write /vm", "write /kubeconfig"}) {
		t.Fatalf("confirmed: exit %d, mutations %v\n%s", code, w.Mutations(), e.err.String())
	}
}
