package kubelet

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCAPMOXTLS: CAPMOX's client skips verification unless
// PROXMOX_INSECURE says otherwise; verifying, it trusts the system's
// roots plus the root-cert file, read where the container's volume puts
// it, and a file it cannot read ends its start in main's words.
func TestCAPMOXTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "root-ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	binds := []bind{{dir, "/etc/capmox/proxmox"}}
	get := func(env map[string]string, args []string) (string, error) {
		hc, msg := capmoxHTTP(nil, env, args, binds)
		if msg != "" {
			return msg, nil
		}
		resp, err := hc.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return "", err
	}
	if msg, err := get(nil, nil); msg != "" || err != nil {
		t.Errorf("insecure by default: %q %v", msg, err)
	}
	if _, err := get(map[string]string{"PROXMOX_INSECURE": "false"}, nil); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("the system's roots alone: %v", err)
	}
	if msg, err := get(map[string]string{"PROXMOX_INSECURE": "false"}, []string{"--proxmox-root-cert-file=/etc/capmox/proxmox/root-ca.pem"}); msg != "" || err != nil {
		t.Errorf("with the root-cert file: %q %v", msg, err)
	}
	if msg, _ := get(map[string]string{"PROXMOX_INSECURE": "false"}, []string{"--proxmox-root-cert-file=/etc/capmox/other.pem"}); !strings.HasPrefix(msg, "unable to setup proxmox API client: loading cert pool: loading certificate file: open /etc/capmox/other.pem") {
		t.Errorf("a file not there: %q", msg)
	}
}
