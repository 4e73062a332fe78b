package pveapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenCheck(t *testing.T) {
	store := TokenConfig{Path: filepath.Join(t.TempDir(), "token.cfg")}
	os.WriteFile(store.Path, []byte("capmox@pve!capi 5e9a1f7c-0000-4000-8000-123456789abc\nbad line\n"), 0o600)
	s := &Server{Access: Access{Tokens: store, UserCfg: filepath.Join(t.TempDir(), "user.cfg")}}
	tests := []struct {
		name, auth string
		code       int
	}{
		{"right token", "PVEAPIToken=capmox@pve!capi=5e9a1f7c-0000-4000-8000-123456789abc", 200},
		{"wrong secret", "PVEAPIToken=capmox@pve!capi=00000000-0000-4000-8000-123456789abc", 401},
		{"wrong token id", "PVEAPIToken=root@pam!capi=5e9a1f7c-0000-4000-8000-123456789abc", 401},
		{"no header", "", 401},
		{"ticket style", "PVEAuthCookie=abc", 401},
		{"no secret", "PVEAPIToken=capmox@pve!capi", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/api2/json/version", nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Errorf("code %d, want %d", rec.Code, tt.code)
			}
			if tt.code == 200 && !strings.Contains(rec.Body.String(), `"version":"9.2.11"`) {
				t.Errorf("body %s", rec.Body.String())
			}
		})
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("non-API path: %d", rec.Code)
	}
}

// TestTokenRotation: an operator rotates the token the Proxmox way, with
// pveum: remove revokes the old secret at once, add prints the new one
// once; the API takes the new one and refuses the old.
func TestTokenRotation(t *testing.T) {
	store := TokenConfig{Path: filepath.Join(t.TempDir(), "token.cfg")}
	acc := Access{Tokens: store, UserCfg: filepath.Join(t.TempDir(), "user.cfg")}
	s := &Server{Access: acc}
	call := func(id, secret string) int {
		req := httptest.NewRequest("GET", "/api2/json/version", nil)
		req.Header.Set("Authorization", "PVEAPIToken="+id+"="+secret)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	pveum := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := PVEUM(args, acc, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, stderr := pveum("user", "add", "capmox@pve"); code != 0 {
		t.Fatalf("user add: %q", stderr)
	}
	add := func() string {
		code, out, stderr := pveum("user", "token", "add", "capmox@pve", "capi", "--privsep", "0", "--output-format", "json")
		var res struct {
			FullTokenID string         `json:"full-tokenid"`
			Value       string         `json:"value"`
			Info        map[string]any `json:"info"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.FullTokenID != "capmox@pve!capi" || len(res.Value) != 36 || res.Info["privsep"] != 0.0 {
			t.Fatalf("add: %d %q %q", code, out, stderr)
		}
		return res.Value
	}
	old := add()
	if call("capmox@pve!capi", old) != 200 {
		t.Fatal("the new token is refused")
	}
	if code, _, stderr := pveum("user", "token", "add", "capmox@pve", "capi"); code != 255 || !strings.Contains(stderr, "Token already exists.") {
		t.Errorf("add twice: %d %q", code, stderr)
	}
	if code, _, stderr := pveum("user", "token", "remove", "capmox@pve", "capi"); code != 0 || stderr != "" {
		t.Fatalf("remove: %d %q", code, stderr)
	}
	if call("capmox@pve!capi", old) != 401 {
		t.Error("a removed token still works")
	}
	if code, _, stderr := pveum("user", "token", "remove", "capmox@pve", "capi"); code != 255 || stderr != "no such token 'capi' for user 'capmox@pve'\n" {
		t.Errorf("remove twice: %d %q", code, stderr)
	}
	rotated := add()
	if rotated == old || call("capmox@pve!capi", rotated) != 200 || call("capmox@pve!capi", old) != 401 {
		t.Error("rotation: the new secret is refused or the old one accepted")
	}
	if code, out, _ := pveum("user", "token", "list", "capmox@pve", "--output-format", "json"); code != 0 || out != `[{"privsep":0,"tokenid":"capi"}]`+"\n" {
		t.Errorf("list: %d %q", code, out)
	}
	if code, _, stderr := pveum("user", "token", "add", "nobody@pve", "capi"); code != 255 || stderr != "no such user ('nobody@pve')\n" {
		t.Errorf("unknown user: %d %q", code, stderr)
	}
	if b, _ := os.ReadFile(store.Path); string(b) != "capmox@pve!capi "+rotated+"\n" {
		t.Errorf("token.cfg: %q", b)
	}
}

// newAccess is an empty access control in a directory of the test's,
// and pveum on it, the test failing on an exit other than 0.
func newAccess(t *testing.T) (Access, func(args ...string) string) {
	dir := t.TempDir()
	acc := Access{Tokens: TokenConfig{Path: filepath.Join(dir, "token.cfg")}, UserCfg: filepath.Join(dir, "user.cfg")}
	return acc, func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := PVEUM(args, acc, &out, &errb); code != 0 {
			t.Fatalf("pveum %v: %d %s", args, code, errb.String())
		}
		return out.String()
	}
}

// TestPermissions: roles and ACLs made with pveum give a token the
// privileges PVE computes: a propagating ACL reaches the paths below it,
// a non-propagating one only its own; a privilege-separated token holds
// what both it and its user hold; /access/permissions answers the
// caller's own, per path.
func TestPermissions(t *testing.T) {
	acc, pveum := newAccess(t)
	pveum("user", "add", "capmox@pve")
	pveum("role", "add", "CAPMOX.Audit", "--privs", "Sys.Audit")
	pveum("role", "add", "CAPMOX.VM", "--privs", "VM.Allocate,VM.Audit,VM.Clone")
	var res struct{ Value string }
	json.Unmarshal([]byte(pveum("user", "token", "add", "capmox@pve", "capi", "--output-format", "json")), &res)
	for _, m := range []string{"--users", "--tokens"} {
		pveum("acl", "modify", "/", "--roles", "CAPMOX.Audit", m, map[string]string{"--users": "capmox@pve", "--tokens": "capmox@pve!capi"}[m], "--propagate", "0")
		pveum("acl", "modify", "/vms", "--roles", "CAPMOX.VM", m, map[string]string{"--users": "capmox@pve", "--tokens": "capmox@pve!capi"}[m])
	}
	// On /vms/200 the user's deeper ACL replaces its roles from /vms: the
	// token, whose own reach /vms/200 from /vms, keeps only what the user
	// has there (no VM.Allocate).
	pveum("acl", "modify", "/vms/200", "--roles", "PVETemplateUser", "--users", "capmox@pve")
	cfg, err := ReadUserConfig(acc.UserCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, path, want string
	}{
		{"capmox@pve!capi", "/", "Sys.Audit=false"},
		{"capmox@pve!capi", "/nodes", ""},
		{"capmox@pve!capi", "/vms/110", "VM.Allocate=true VM.Audit=true VM.Clone=true"},
		{"capmox@pve", "/vms/200", "VM.Audit=true VM.Clone=true"},
		{"capmox@pve!capi", "/vms/200", "VM.Audit=true VM.Clone=true"},
		{"root@pam", "/vms", "VM.Allocate=true"},
	} {
		privs := cfg.Permissions(9, tc.id, tc.path)
		var got []string
		for _, k := range sortedKeys(privs) {
			got = append(got, fmt.Sprintf("%s=%v", k, privs[k]))
		}
		g := strings.Join(got, " ")
		if tc.id == "root@pam" {
			if !strings.Contains(g, tc.want) {
				t.Errorf("root@pam on /vms: %s", g)
			}
			continue
		}
		if g != tc.want {
			t.Errorf("%s on %s: %q, want %q", tc.id, tc.path, g, tc.want)
		}
	}
	// The version's privileges: PVE 9 has no VM.Monitor.
	var out, errb bytes.Buffer
	if code := PVEUM([]string{"role", "add", "Old", "--privs", "VM.Monitor"}, acc, &out, &errb); code != 255 || !strings.Contains(errb.String(), "invalid privilege 'VM.Monitor'") {
		t.Errorf("VM.Monitor on PVE 9: %d %q", code, errb.String())
	}
	if !BuiltinRoles(8)["PVEVMAdmin"]["VM.Monitor"] || BuiltinRoles(9)["PVEVMAdmin"]["VM.Monitor"] || !BuiltinRoles(9)["PVEVMAdmin"]["VM.GuestAgent.Unrestricted"] {
		t.Error("PVEVMAdmin's privileges by version")
	}
	// The API: the token's own permissions on a path.
	s := &Server{Access: acc}
	req := httptest.NewRequest("GET", "/api2/json/access/permissions?path=/vms", nil)
	req.Header.Set("Authorization", "PVEAPIToken=capmox@pve!capi="+res.Value)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Body.String() != `{"data":{"/vms":{"VM.Allocate":1,"VM.Audit":1,"VM.Clone":1}}}`+"\n" {
		t.Errorf("GET /access/permissions: %d %s", rec.Code, rec.Body.String())
	}
	// Another user's need Sys.Audit on /access.
	req = httptest.NewRequest("GET", "/api2/json/access/permissions?userid=root@pam", nil)
	req.Header.Set("Authorization", "PVEAPIToken=capmox@pve!capi="+res.Value)
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 403 {
		t.Errorf("another user's permissions: %d %s", rec.Code, rec.Body.String())
	}
	b, _ := os.ReadFile(acc.UserCfg)
	if !strings.Contains(string(b), "token:capmox@pve!capi:0:1::\n") || !strings.Contains(string(b), "acl:0:/:capmox@pve,capmox@pve!capi:CAPMOX.Audit:\n") {
		t.Errorf("user.cfg:\n%s", b)
	}
}

// TestPools: a role on /pool/NAME reaches the pool's member VMs (as
// RPCEnvironment compiles pool ACLs onto /vms/<vmid>, never propagated),
// and no other VM; a NoAccess on the VM itself still wins. pveum pool's
// errors are pve-manager's Pool.pm's, under lock_user_config's prefix;
// user.cfg keeps the pool line as write_user_config writes it.
func TestPools(t *testing.T) {
	dir := t.TempDir()
	acc := Access{Tokens: TokenConfig{Path: filepath.Join(dir, "token.cfg")}, UserCfg: filepath.Join(dir, "user.cfg")}
	pveum := func(args ...string) (int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := PVEUM(args, acc, &out, &errb)
		return code, errb.String()
	}
	must := func(args ...string) {
		t.Helper()
		if code, e := pveum(args...); code != 0 {
			t.Fatalf("pveum %v: %d %s", args, code, e)
		}
	}
	must("user", "add", "capmox@pve")
	must("role", "add", "CAPMOX.VM", "--privs", "VM.Allocate,VM.Audit")
	must("user", "token", "add", "capmox@pve", "capi")
	must("pool", "add", "capi")
	must("acl", "modify", "/pool/capi", "--roles", "CAPMOX.VM", "--users", "capmox@pve", "--tokens", "capmox@pve!capi")
	must("pool", "modify", "capi", "--vms", "201,202")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pool", "add", "capi"}, "create pool failed: pool 'capi' already exists"},
		{[]string{"pool", "add", "1st"}, "create pool failed: pool name must start with a letter"},
		{[]string{"pool", "add", "a:b"}, "pool name 'a:b' contains invalid characters"},
		{[]string{"pool", "modify", "nowhere", "--vms", "1"}, "update pools failed: pool 'nowhere' does not exist"},
		{[]string{"pool", "modify", "capi", "--vms", "201"}, "update pools failed: VM 201 is already a pool member"},
		{[]string{"pool", "modify", "capi", "--vms", "203", "--delete", "1"}, "update pools failed: VM 203 is not a pool member"},
		{[]string{"pool", "delete", "capi"}, "delete pool failed: pool 'capi' is not empty (contains VM 201)"},
		{[]string{"pool", "add", "nowhere/x"}, "create pool failed: parent 'nowhere' of pool 'nowhere/x' does not exist"},
		{[]string{"pool", "add", "capi/1x"}, "create pool failed: pool name must start with a letter"},
		{[]string{"pool", "add", "a/b/c/d"}, "pool name 'a/b/c/d' nested too deeply (max levels = 3)"},
	} {
		if code, e := pveum(tc.args...); code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("pveum %v: exit %d %q, want %q", tc.args, code, e, tc.want)
		}
	}
	must("pool", "add", "other", "--comment", "a:b%c é")
	must("pool", "add", "other/sub")
	if code, e := pveum("pool", "delete", "other"); code == 0 || !strings.Contains(e, "delete pool failed: pool 'other' is not empty (contains pool 'other/sub')") {
		t.Errorf("a pool with a child: %d %q", code, e)
	}
	must("pool", "delete", "other/sub")
	if code, e := pveum("pool", "modify", "other", "--vms", "202"); code == 0 || !strings.Contains(e, "VM 202 belongs already to pool 'capi' and 'allow-move' is not set") {
		t.Errorf("a VM of another pool: %d %q", code, e)
	}
	must("pool", "modify", "other", "--vms", "202", "--allow-move", "1")
	must("acl", "modify", "/vms/201", "--roles", "NoAccess", "--users", "capmox@pve")
	cfg, err := ReadUserConfig(acc.UserCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, path, want string
	}{
		{"capmox@pve!capi", "/pool/capi", "VM.Allocate=true VM.Audit=true"},
		{"capmox@pve!capi", "/vms/110", ""}, // in no pool
		{"capmox@pve!capi", "/vms/202", ""}, // moved to another pool
		{"capmox@pve!capi", "/vms/201", ""}, // its user's NoAccess there wins
		{"capmox@pve", "/vms/201", ""},      // NoAccess
		{"capmox@pve", "/vms", ""},          // the pool reaches no other path
	} {
		privs := cfg.Permissions(9, tc.id, tc.path)
		var got []string
		for _, k := range sortedKeys(privs) {
			got = append(got, fmt.Sprintf("%s=%v", k, privs[k]))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s on %s: %q, want %q", tc.id, tc.path, g, tc.want)
		}
	}
	must("acl", "delete", "/vms/201", "--roles", "NoAccess", "--users", "capmox@pve")
	must("pool", "modify", "other", "--vms", "203")
	cfg, _ = ReadUserConfig(acc.UserCfg)
	if privs := cfg.Permissions(9, "capmox@pve!capi", "/vms/201"); len(privs) != 2 || privs["VM.Audit"] {
		t.Errorf("a pool member's privileges: %v, want VM.Allocate and VM.Audit, not propagated", privs)
	}
	b, _ := os.ReadFile(acc.UserCfg)
	if !strings.Contains(string(b), "\n\npool:capi::201::\npool:other:a%3Ab%25c %C3%A9:202,203::\n\nrole:") {
		t.Errorf("user.cfg:\n%s", b)
	}
}

// TestPoolsAPI: /pools as Pool.pm serves it to a token with
// Pool.Allocate and Pool.Audit on a parent pool, propagated (the run
// lock's grant): it lists the parent and its children and no other
// pool, creates a child once ("already exists" the second time), sets a
// comment, and deletes only an empty pool; any other pool is refused.
func TestPoolsAPI(t *testing.T) {
	acc, pveum := newAccess(t)
	pveum("user", "add", "mgmtctl@pve")
	pveum("role", "add", "Mgmtctl.Lock", "--privs", "Pool.Allocate,Pool.Audit")
	var res struct{ Value string }
	json.Unmarshal([]byte(pveum("user", "token", "add", "mgmtctl@pve", "mgmtctl", "--output-format", "json")), &res)
	pveum("pool", "add", "mgmtctl-lab")
	pveum("pool", "add", "capi")
	pveum("acl", "modify", "/pool/mgmtctl-lab", "--roles", "Mgmtctl.Lock", "--users", "mgmtctl@pve", "--tokens", "mgmtctl@pve!mgmtctl")
	s := &Server{Access: acc}
	call := func(method, target, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, "/api2/json/pools"+target, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("Authorization", "PVEAPIToken=mgmtctl@pve!mgmtctl="+res.Value)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var env struct {
			Data    any    `json:"data"`
			Message string `json:"message"`
		}
		json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != 200 {
			return rec.Code, strings.TrimSpace(env.Message)
		}
		b, _ := json.Marshal(env.Data)
		return rec.Code, string(b)
	}
	for _, tc := range []struct {
		method, target, body string
		code                 int
		want                 string
	}{
		{"GET", "", "", 200, `[{"poolid":"mgmtctl-lab"}]`},
		{"POST", "", "poolid=mgmtctl-lab%2Fg1&comment=held+by+a%3Ab", 200, `null`},
		{"POST", "", "poolid=mgmtctl-lab%2Fg1&comment=other", 500, "pool 'mgmtctl-lab/g1' already exists"},
		{"POST", "", "poolid=capi%2Fg1", 403, "Permission check failed (/pool/capi/g1, Pool.Allocate)"},
		{"POST", "", "poolid=elsewhere", 403, "Permission check failed (/pool/elsewhere, Pool.Allocate)"},
		{"GET", "", "", 200, `[{"poolid":"mgmtctl-lab"},{"comment":"held by a:b","poolid":"mgmtctl-lab/g1"}]`},
		{"PUT", "", "poolid=mgmtctl-lab%2Fg1&comment=renewed", 200, `null`},
		{"PUT", "", "poolid=mgmtctl-lab%2Fg2&comment=x", 500, "pool 'mgmtctl-lab/g2' does not exist"},
		{"GET", "?poolid=mgmtctl-lab%2Fg1", "", 200, `[{"comment":"renewed","members":[],"poolid":"mgmtctl-lab/g1"}]`},
		{"GET", "?poolid=capi", "", 403, "Permission check failed (/pool/capi, Pool.Audit)"},
		{"DELETE", "?poolid=mgmtctl-lab", "", 500, "pool 'mgmtctl-lab' is not empty (contains pool 'mgmtctl-lab/g1')"},
		{"DELETE", "?poolid=mgmtctl-lab%2Fg1", "", 200, `null`},
		{"DELETE", "?poolid=mgmtctl-lab%2Fg1", "", 500, "pool 'mgmtctl-lab/g1' does not exist"},
		{"GET", "", "", 200, `[{"poolid":"mgmtctl-lab"}]`},
	} {
		if code, got := call(tc.method, tc.target, tc.body); code != tc.code || got != tc.want {
			t.Errorf("%s /pools%s %s: %d %s, want %d %s", tc.method, tc.target, tc.body, code, got, tc.code, tc.want)
		}
	}
	b, _ := os.ReadFile(acc.UserCfg)
	if !strings.Contains(string(b), "pool:capi::::\npool:mgmtctl-lab::::\n") {
		t.Errorf("user.cfg:\n%s", b)
	}
}
