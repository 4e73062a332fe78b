package runlog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

func TestLogRedactsAndIsPrivate(t *testing.T) {
	dir := t.TempDir()
	var x redact.Redactor
	secret := "5e9a1f7c-0000-4000-8000-123456789abc"
	x.Add(secret)
	l, err := Open(dir, "lab-mgmt", &x, time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	w := steptest.NewWorld()
	ps := []step.Phase{{Tag: step.TagCAPI, Steps: []step.Step{
		&steptest.File{StepID: "credentials", HostName: "lab-mgmt", Path: "/s", Content: secret, W: w, ApplyErr: errors.New("apply secret " + secret)},
	}}}
	engine.Run(context.Background(), ps, engine.Options{Exec: w}, l)
	l.Logger.Debug("ran", "cmd", "echo "+secret)
	l.Close()
	b, err := os.ReadFile(l.Path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Fatalf("secret in debug log:\n%s", b)
	}
	for _, want := range []string{"step failed", "capi", "credentials", "apply secret [REDACTED]", "recap"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log lacks %q:\n%s", want, b)
		}
	}
	if fi, _ := os.Stat(l.Path); fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v", fi.Mode().Perm())
	}
	if b := filepath.Base(l.Path); !strings.HasPrefix(b, "20261202T100000.000Z-lab-mgmt-") || !strings.HasSuffix(b, ".log") {
		t.Errorf("path %s", l.Path)
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < Keep+5; i++ {
		l, err := Open(dir, "x", nil, start.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != Keep {
		t.Fatalf("%d logs kept, want %d", len(entries), Keep)
	}
	if !strings.HasPrefix(entries[0].Name(), "20260101T000500.000Z-x-") {
		t.Errorf("oldest kept = %s", entries[0].Name())
	}
}
