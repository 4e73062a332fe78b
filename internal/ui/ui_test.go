package ui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

var update = flag.Bool("update", false, "rewrite golden files")

const secret = "5e9a1f7c-0000-4000-8000-123456789abc"

// fixedClock advances one second per reading, so durations are stable.
func fixedClock() func() time.Time {
	t := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

func world() (*steptest.World, []step.Phase) {
	w := steptest.NewWorld()
	w.Files["/etc/rancher/k3s/config.yaml"] = "disable:\n- traefik\nwrite-kubeconfig-mode: \"0644\"\n"
	return w, []step.Phase{
		{Tag: step.TagVM, Steps: []step.Step{
			&steptest.File{StepID: "image", HostName: "pv1-1", Path: "/var/lib/vz/template/iso/noble.img", Content: "img", W: w},
		}},
		{Tag: step.TagK3s, Steps: []step.Step{
			&steptest.File{StepID: "config", HostName: "lab-mgmt", Path: "/etc/rancher/k3s/config.yaml",
				Content: "disable:\n- traefik\nwrite-kubeconfig-mode: \"0600\"\n", W: w},
			&steptest.File{StepID: "credentials", HostName: "lab-mgmt", Path: "/root/creds", Content: "PROXMOX_SECRET=" + secret + "\n", W: w},
			&steptest.File{StepID: "skipped", HostName: "lab-mgmt", Skip: "not needed", W: w},
			&steptest.File{StepID: "service-env", HostName: "lab-mgmt", Path: "/etc/systemd/system/k3s.service.env", Content: "K3S_NODE_NAME=lab-mgmt\n", W: w},
		}},
	}
}

func redactor() *redact.Redactor {
	var x redact.Redactor
	x.Add(secret)
	return &x
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s mismatch:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestTextGolden(t *testing.T) {
	for _, mode := range []struct {
		name  string
		check bool
	}{{"apply", false}, {"check", true}} {
		t.Run(mode.name, func(t *testing.T) {
			w, ps := world()
			var out bytes.Buffer
			v := NewText(&out, TextOptions{Diff: true, Redactor: redactor()})
			if _, err := engine.Run(context.Background(), ps, engine.Options{Check: mode.check, Now: fixedClock(), Exec: w}, v); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out.String(), secret) {
				t.Fatalf("secret printed:\n%s", out.String())
			}
			golden(t, "text-"+mode.name+".txt", out.String())
		})
	}
}

func TestTextNoop(t *testing.T) {
	w, ps := world()
	if _, err := engine.Run(context.Background(), ps, engine.Options{Exec: w}, &engine.Recap{Hosts: map[string]*engine.Counts{}}); err != nil {
		t.Fatal(err)
	}
	_ = w
	var out bytes.Buffer
	if _, err := engine.Run(context.Background(), ps, engine.Options{Now: fixedClock(), Exec: w}, NewText(&out, TextOptions{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "total: ok=4 changed=0 failed=0 skipped=1 (nothing changed)") {
		t.Errorf("second run does not say changed=0:\n%s", out.String())
	}
}

func TestTextFailurePointsAtLog(t *testing.T) {
	w := steptest.NewWorld()
	ps := []step.Phase{{Tag: step.TagVM, Steps: []step.Step{
		&steptest.File{StepID: "create-vm", HostName: "pv1-1", Path: "/vm", Content: "x", W: w,
			ApplyErr: errors.New("create VM 110 on pv1-1: token " + secret + " rejected")},
	}}}
	var out bytes.Buffer
	_, err := engine.Run(context.Background(), ps, engine.Options{Now: fixedClock(), Exec: w}, NewText(&out, TextOptions{Redactor: redactor(), LogPath: "/home/u/.cache/mgmtctl/runs/x.log"}))
	if err == nil {
		t.Fatal("want failure")
	}
	s := out.String()
	for _, want := range []string{"failed: [pv1-1] vm/create-vm: create VM 110 on pv1-1: token [REDACTED] rejected", "failed: vm/create-vm; the full debug log is /home/u/.cache/mgmtctl/runs/x.log"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestJSON(t *testing.T) {
	w, ps := world()
	var out bytes.Buffer
	if _, err := engine.Run(context.Background(), ps, engine.Options{Now: fixedClock(), Exec: w}, NewJSON(&out, redactor(), true)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), secret) {
		t.Fatalf("secret in JSON:\n%s", out.String())
	}
	raw := out.String()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line is not JSON: %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	last := lines[len(lines)-1]
	if last["event"] != "recap" || last["changed"] != 4.0 || last["ok"] != 0.0 || last["skipped"] != 1.0 || last["failed"] != 0.0 {
		t.Errorf("recap = %v", last)
	}
	hosts := last["hosts"].(map[string]any)
	if h := hosts["lab-mgmt"].(map[string]any); h["changed"] != 3.0 || h["skipped"] != 1.0 {
		t.Errorf("hosts = %v", hosts)
	}
	var sawDiff bool
	for _, l := range lines {
		if l["event"] == "step" && l["step"] == "config" {
			ch := l["changes"].([]any)[0].(map[string]any)
			sawDiff = ch["action"] == "update" && ch["diff"] != nil
		}
	}
	if !sawDiff {
		t.Errorf("config step event lacks its diff")
	}
	golden(t, "events.jsonl", raw)
}

func TestJSONRecapEmptyRun(t *testing.T) {
	var out bytes.Buffer
	if _, err := engine.Run(context.Background(), nil, engine.Options{Now: fixedClock()}, NewJSON(&out, nil, false)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `{"event":"recap","time":"2026-12-02T10:00:02.000Z","check":false,"ok":0,"changed":0,"failed":0,"skipped":0,"hosts":{}}`) {
		t.Errorf("got %s", out.String())
	}
}

// TestSpinner: on a terminal, the status line is redrawn while a step runs
// and cleared before the step's result line.
func TestSpinner(t *testing.T) {
	w := steptest.NewWorld()
	release := make(chan struct{})
	ps := []step.Phase{{Tag: step.TagVM, Steps: []step.Step{
		&steptest.Action{StepID: "wait-ssh", HostName: "vm", W: w, Progress: []string{"waiting for 192.0.2.50:22"}, Block: release},
	}}}
	var out syncBuffer
	done := make(chan error)
	go func() {
		_, err := engine.Run(context.Background(), ps, engine.Options{Exec: w}, NewText(&out, TextOptions{Terminal: true}))
		done <- err
	}()
	// Wait for the spinner to draw its line with the progress message.
	deadline := time.After(10 * time.Second)
	for !strings.Contains(out.String(), "vm/wait-ssh (") || !strings.Contains(out.String(), "waiting for 192.0.2.50:22") {
		select {
		case <-deadline:
			t.Fatalf("spinner never drew:\n%q", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "\r\033[Kchanged: [vm] vm/wait-ssh: run wait-ssh") {
		t.Errorf("result line does not replace the spinner:\n%q", s)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHeartbeat: without a terminal, a step that runs long gets a line
// with its elapsed time and its last progress message, and none once it
// has ended.
func TestHeartbeat(t *testing.T) {
	w := steptest.NewWorld()
	release := make(chan struct{})
	ps := []step.Phase{{Tag: step.TagAddons, Steps: []step.Step{
		&steptest.Action{StepID: "chart-ready", HostName: "vm", W: w, Progress: []string{"Job helm-install-x running helm"}, Block: release},
	}}}
	out := &notifyBuffer{wrote: make(chan struct{}, 1)}
	done := make(chan error)
	go func() {
		_, err := engine.Run(context.Background(), ps, engine.Options{Exec: w}, NewText(out, TextOptions{Heartbeat: 20 * time.Millisecond}))
		done <- err
	}()
	want := "  ... addons/chart-ready: still running ("
	deadline := time.After(10 * time.Second)
	for strings.Count(out.String(), want) < 2 {
		select {
		case <-deadline:
			t.Fatalf("no heartbeat:\n%s", out.String())
		case <-out.wrote:
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "  ... addons/chart-ready: Job helm-install-x running helm\n") || !strings.Contains(s, "), last: Job helm-install-x running helm\n") {
		t.Errorf("heartbeat lines lack the progress message:\n%s", s)
	}
	if _, after, _ := strings.Cut(s, "changed: [vm] addons/chart-ready"); strings.Contains(after, "still running") {
		t.Errorf("heartbeat after the step ended:\n%s", s)
	}
}

// notifyBuffer is a syncBuffer that signals each write.
type notifyBuffer struct {
	syncBuffer
	wrote chan struct{}
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	n, err := b.syncBuffer.Write(p)
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}
