package lab

import (
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// Request is one call to the daemon over its unix socket.
type Request struct {
	Op   string            `json:"op"`
	VMID int               `json:"vmid,omitempty"`
	Conf map[string]string `json:"conf,omitempty"`
	Argv []string          `json:"argv,omitempty"`
	Name string            `json:"name,omitempty"`
	Val  string            `json:"val,omitempty"`
}

// Response is the daemon's answer.
type Response struct {
	OK     bool     `json:"ok"`
	Error  string   `json:"error,omitempty"`
	Bool   bool     `json:"bool,omitempty"`
	Stdout string   `json:"stdout,omitempty"`
	Stderr string   `json:"stderr,omitempty"`
	Code   int      `json:"code,omitempty"`
	VMs    []VMInfo `json:"vms,omitempty"`
}

// VMInfo is a VM as status shows it.
type VMInfo struct {
	VMID  int    `json:"vmid"`
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"` // booting, up, failed
}

// Call sends req to the daemon listening on sock.
func Call(sock string, req Request, timeout time.Duration) (Response, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return Response{}, fmt.Errorf("lab daemon not reachable at %s: %w", sock, err)
	}
	defer c.Close()
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return Response{}, err
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("lab daemon: %w", err)
	}
	if !resp.OK && resp.Error != "" {
		return resp, fmt.Errorf("%s", resp.Error)
	}
	return resp, nil
}
