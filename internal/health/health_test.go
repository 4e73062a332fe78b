package health

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

var update = flag.Bool("update", false, "rewrite golden files")

type mask struct{}

func (mask) String(s string) string { return strings.ReplaceAll(s, "s3cret", "********") }

// world: the VM phase as configured but for a Waiter; k3s as configured
// with a failing extra; capi with a secret in a pending change.
func phases(w *steptest.World) []step.Phase {
	return []step.Phase{
		{Tag: step.TagVM, Steps: []step.Step{
			&steptest.File{StepID: "image", HostName: "pve", Path: "/img", Content: "image", W: w},
			&steptest.File{StepID: "start-vm", HostName: "pve", Path: "/vm", Content: "running", W: w},
			&steptest.Wait{StepID: "wait-ssh", HostName: "vm", Path: "/vm", Want: "running", W: w},
		}},
		{Tag: step.TagK3s, Steps: []step.Step{
			&steptest.File{StepID: "config", HostName: "vm", Path: "/etc/k3s.yaml", Content: "tls-san: x", W: w},
		}},
		{Tag: step.TagCAPI, Steps: []step.Step{
			&steptest.File{StepID: "variables", HostName: "vm", Path: "/secret", Content: "s3cret", W: w},
		}},
	}
}

func TestRun(t *testing.T) {
	extra := func(ran *[]string) map[step.Tag][]Check {
		return map[step.Tag][]Check{
			step.TagVM:  {{Name: "vm-extra", Run: func(context.Context) Finding { *ran = append(*ran, "vm-extra"); return Good("fine") }}},
			step.TagK3s: {{Name: "k3s-extra", Run: func(context.Context) Finding { *ran = append(*ran, "k3s-extra"); return Bad("do this", "broken") }}},
		}
	}
	tests := []struct {
		name               string
		files              map[string]string
		ran                string
		unhealthy, skipped string
	}{
		// start-vm is the cause; wait-ssh waits on it, so it is skipped,
		// and so is every later phase; no extra of a phase not as
		// configured runs.
		{"vm stopped", map[string]string{"/img": "image", "/etc/k3s.yaml": "tls-san: x"}, "", "vm/start-vm", "vm/wait-ssh,k3s/config,capi/variables"},
		// All steps as configured: the extras run; k3s's fails and is the
		// cause for what follows.
		{"extra fails", map[string]string{"/img": "image", "/vm": "running", "/etc/k3s.yaml": "tls-san: x"}, "vm-extra,k3s-extra", "k3s/k3s-extra", "capi/variables"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := steptest.NewWorld()
			for k, v := range tt.files {
				w.Set(k, v)
			}
			var ran []string
			r := Run(context.Background(), phases(w), extra(&ran))
			var skipped []string
			for _, l := range r.Lines {
				if l.State == Skipped {
					skipped = append(skipped, string(l.Phase)+"/"+l.Check)
				}
			}
			if strings.Join(ran, ",") != tt.ran || strings.Join(r.Unhealthy(), ",") != tt.unhealthy || strings.Join(skipped, ",") != tt.skipped || r.Healthy {
				t.Errorf("ran %v, unhealthy %v, skipped %v, healthy %v", ran, r.Unhealthy(), skipped, r.Healthy)
			}
			if len(w.Mutations()) != 0 {
				t.Errorf("status changed the world: %v", w.Mutations())
			}
		})
	}
	// As configured: healthy, every step ok.
	w := steptest.NewWorld()
	for k, v := range map[string]string{"/img": "image", "/vm": "running", "/etc/k3s.yaml": "tls-san: x", "/secret": "s3cret"} {
		w.Set(k, v)
	}
	if r := Run(context.Background(), phases(w), nil); !r.Healthy || len(r.Lines) != 5 {
		t.Errorf("as configured: %+v", r)
	}
}

func TestWriteGolden(t *testing.T) {
	w := steptest.NewWorld()
	w.Set("/img", "image")
	w.Set("/vm", "running")
	ps := phases(w)
	// A failure whose message holds a secret: masked in both renderings.
	ps[1].Steps = append(ps[1].Steps, &steptest.File{StepID: "token", HostName: "vm", Path: "/t", W: w, CheckErr: errors.New("token s3cret rejected")})
	w.Set("/etc/k3s.yaml", "tls-san: x")
	r := Run(context.Background(), ps, map[step.Tag][]Check{step.TagVM: {{Name: "vm-extra", Run: func(context.Context) Finding { return Good("extra fine") }}}})
	for _, f := range []struct {
		file  string
		write func(*bytes.Buffer) error
	}{
		{"testdata/report.txt", func(b *bytes.Buffer) error { return WriteText(b, r, mask{}) }},
		{"testdata/report.json", func(b *bytes.Buffer) error { return WriteJSON(b, r, mask{}) }},
	} {
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "s3cret") {
			t.Errorf("%s: secret printed", f.file)
		}
		if *update {
			os.WriteFile(f.file, b.Bytes(), 0o644)
		}
		want, _ := os.ReadFile(f.file)
		if b.String() != string(want) {
			t.Errorf("%s:\n%s\nwant:\n%s", f.file, b.String(), want)
		}
	}
}

// TestRunServers: a phase that runs the same steps on several servers
// names each line's host, the verdict names the server that is down, and
// an Always check runs although its phase is blocked by it.
func TestRunServers(t *testing.T) {
	w := steptest.NewWorld()
	w.Set("/vm1", "running")
	w.Set("/vm3", "running")
	ps := []step.Phase{
		{Tag: step.TagVM, Steps: []step.Step{
			&steptest.File{StepID: "start-vm", HostName: "pve1", Path: "/vm1", Content: "running", W: w},
			&steptest.File{StepID: "start-vm", HostName: "pve2", Path: "/vm2", Content: "running", W: w},
			&steptest.File{StepID: "start-vm", HostName: "pve3", Path: "/vm3", Content: "running", W: w},
		}},
		{Tag: step.TagK3s, Steps: []step.Step{
			&steptest.File{StepID: "config", HostName: "srv1", Path: "/c1", Content: "x", W: w},
			&steptest.File{StepID: "config", HostName: "srv2", Path: "/c2", Content: "x", W: w},
		}},
	}
	ran := 0
	extra := map[step.Tag][]Check{step.TagK3s: {
		{Name: "members", Always: true, Run: func(context.Context) Finding { ran++; return Bad("apply", "srv2 down") }},
		{Name: "not-always", Run: func(context.Context) Finding {
			t.Error("a check without Always ran in a blocked phase")
			return Good("")
		}},
	}}
	r := Run(context.Background(), ps, extra)
	if got := strings.Join(r.Unhealthy(), ","); got != "vm/start-vm on pve2,k3s/members" || ran != 1 || r.Healthy {
		t.Errorf("unhealthy %s, ran %d, healthy %v", got, ran, r.Healthy)
	}
	var hosts []string
	for _, l := range r.Lines {
		hosts = append(hosts, l.Host)
	}
	if got := strings.Join(hosts, ","); got != "pve1,pve2,pve3,srv1,srv2," {
		t.Errorf("hosts %s", got)
	}
	var b bytes.Buffer
	WriteText(&b, r, mask{})
	if !strings.Contains(b.String(), "PHASE  CHECK     HOST  STATUS") || !strings.Contains(b.String(), "start-vm  pve2  UNHEALTHY") {
		t.Errorf("text:\n%s", b.String())
	}
}
