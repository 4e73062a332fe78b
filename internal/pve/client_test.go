package pve

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAPI answers as pve-http-server does: 401 without the token, a
// task running twice before it stops.
func fakeAPI(t *testing.T, exit string) (*Client, *atomic.Int32) {
	var polls atomic.Int32
	const upid = "UPID:pve:0000ABCD:00001234:6751A2B3:qmcreate:110:mgmtctl@pve!vm:"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "PVEAPIToken=mgmtctl@pve!vm=s3cret" {
			w.WriteHeader(401)
			w.Write([]byte(`{"data":null}`))
			return
		}
		switch {
		case r.Method == "POST" && r.URL.Path == "/api2/json/nodes/pve/qemu":
			if err := r.ParseForm(); err != nil || r.PostForm.Get("cores") != "2" {
				t.Errorf("form: %v %v", r.PostForm, err)
			}
			w.Write([]byte(`{"data":"` + upid + `"}`))
		case r.URL.Path == "/api2/json/nodes/pve/tasks/"+upid+"/status":
			st := `{"data":{"status":"running"}}`
			if polls.Add(1) > 2 {
				st = `{"data":{"status":"stopped","exitstatus":"` + exit + `"}}`
			}
			w.Write([]byte(st))
		case r.URL.Path == "/api2/json/nodes/pve/tasks/"+upid+"/log":
			w.Write([]byte(`{"data":[{"n":1,"t":"  Logical volume \"vm-110-disk-0\" created."},{"n":2,"t":"TASK ERROR: ` + exit + `"}],"total":2}`))
		case r.URL.Path == "/api2/json/nodes/pve/qemu/110/config":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(403)
			w.Write([]byte(`{"data":null,"message":"Permission check failed (/vms/110, VM.Audit)\n"}`))
		case r.URL.Path == "/api2/json/nodes/pve/qemu/111/config":
			w.Write([]byte(`{"data":{"cores":2,"name":"lab","digest":"ab"}}`))
		default:
			w.WriteHeader(501)
		}
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, "mgmtctl@pve!vm", "s3cret", srv.Client()), &polls
}

func TestCall(t *testing.T) {
	tests := []struct {
		name, exit string
		want       string // "" for success
	}{
		{"ok", "OK", ""},
		{"warnings", "WARNINGS: 1", ""},
		{"failed", "unable to create VM 110 - no space left", "task UPID:pve:0000ABCD:00001234:6751A2B3:qmcreate:110:mgmtctl@pve!vm: failed: unable to create VM 110 - no space left\n  " + `  Logical volume "vm-110-disk-0" created.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, polls := fakeAPI(t, tt.exit)
			err := c.Call(context.Background(), "POST", "/nodes/pve/qemu", map[string][]string{"vmid": {"110"}, "cores": {"2"}})
			if tt.want == "" && err != nil {
				t.Fatal(err)
			}
			var te *TaskError
			if tt.want != "" && (!errors.As(err, &te) || err.Error() != tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			if polls.Load() != 3 {
				t.Errorf("polled %d times, want 3 (running twice, then stopped)", polls.Load())
			}
		})
	}
}

func TestErrorsAndReads(t *testing.T) {
	c, _ := fakeAPI(t, "OK")
	_, err := c.VMConfig(context.Background(), "pve", 110)
	var ae *APIError
	if !errors.As(err, &ae) || !ae.Forbidden() || ae.Message != "Permission check failed (/vms/110, VM.Audit)" {
		t.Fatalf("got %#v", err)
	}
	conf, err := c.VMConfig(context.Background(), "pve", 111)
	if err != nil || conf["cores"] != "2" || conf["name"] != "lab" {
		t.Fatalf("config %v %v", conf, err)
	}
	bad := New(c.Base, "mgmtctl@pve!vm", "wrong", c.HTTP)
	_, err = bad.Version(context.Background())
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("a wrong secret: %v", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the secret: %v", err)
	}
}

func TestWaitBounded(t *testing.T) {
	c, _ := fakeAPI(t, "OK")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	// Polls stop on the context: the task never stops in time here.
	err := c.Wait(ctx, "UPID:pve:0000ABCD:00001234:6751A2B3:qmcreate:110:mgmtctl@pve!vm:")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if _, ok := TaskNode("UPID:pve2:1:2:3:qmstart:110:root@pam:"); !ok {
		t.Error("a UPID not read")
	}
	if IsTask("110") {
		t.Error("a VMID taken for a UPID")
	}
}

// TestPermissions reads /access/permissions for one path, the secret in
// the Authorization header only.
func TestPermissions(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "PVEAPIToken=capmox@pve!capi=s3cret" || strings.Contains(r.URL.String(), "s3cret") {
			w.WriteHeader(401)
			return
		}
		p := r.URL.Query().Get("path")
		w.Write([]byte(`{"data":{"` + p + `":{"VM.Audit":1,"Sys.Audit":0}}}`))
	}))
	defer srv.Close()
	got, err := New(srv.URL, "capmox@pve!capi", "s3cret", srv.Client()).Permissions(context.Background(), "/vms")
	if err != nil || len(got) != 2 || !got["VM.Audit"] || got["Sys.Audit"] {
		t.Errorf("Permissions = %v, %v", got, err)
	}
	if _, err := New(srv.URL, "capmox@pve!capi", "wrong", srv.Client()).Permissions(context.Background(), "/"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused token: %v", err)
	}
}
