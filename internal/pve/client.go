// Package pve is a small typed client of the Proxmox VE REST API
// (https://<node>:8006/api2/json), over net/http, authenticated with an
// API token: the calls mgmtctl's vm phase makes in its API mode
// (spec.proxmox.access: api), and the wait for the tasks they start.
//
// Why not luthermonson/go-proxmox (CAPMOX's client): docs/decisions.md.
package pve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Client calls one Proxmox VE API. Any node of a cluster answers for
// every node: a path under /nodes/<other> is proxied to it by the node
// (pve-http-server, `proxyto => 'node'`).
type Client struct {
	// Base is the API's root, https://<host>:8006/api2/json.
	Base string
	// TokenID is user@realm!name; Secret its UUID. The secret travels
	// only in the Authorization header.
	TokenID, Secret string
	// HTTP verifies the node's certificate (pveaccess.HTTPClient).
	HTTP *http.Client
}

// APIError is an answer other than 200: its status, the message the
// status line and body carry, and each parameter's error on a 400.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
	Errors       map[string]string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	s := fmt.Sprintf("Proxmox API %s %s: %d %s", e.Method, e.Path, e.Status, msg)
	keys := make([]string, 0, len(e.Errors))
	for k := range e.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += fmt.Sprintf("; %s: %s", k, e.Errors[k])
	}
	return s
}

// Forbidden reports whether the token lacks a privilege the call needs
// (403; the message names the path and privilege: "Permission check
// failed (/vms/110, VM.Allocate)").
func (e *APIError) Forbidden() bool { return e.Status == http.StatusForbidden }

// Unauthenticated reports whether the API refused the token itself (401:
// an unknown token or a wrong secret).
func (e *APIError) Unauthenticated() bool { return e.Status == http.StatusUnauthorized }

// New is a client of apiURL (…/api2/json, as spec.proxmox.apiURL gives
// it, or the host's root).
func New(apiURL, tokenID, secret string, hc *http.Client) *Client {
	base := strings.TrimSuffix(apiURL, "/")
	if !strings.HasSuffix(base, "/api2/json") {
		base += "/api2/json"
	}
	return &Client{Base: base, TokenID: tokenID, Secret: secret, HTTP: hc}
}

// Get reads path with query q into out (the answer's "data").
func (c *Client) Get(ctx context.Context, path string, q url.Values, out any) error {
	return c.Do(ctx, http.MethodGet, path, q, out)
}

// Do calls the API: GET and DELETE with params in the query, POST and
// PUT with them form-encoded in the body, as pve-http-server takes them.
// out receives the answer's "data" (nil: discarded).
func (c *Client) Do(ctx context.Context, method, path string, params url.Values, out any) error {
	u := c.Base + path
	var body io.Reader
	if method == http.MethodGet || method == http.MethodDelete {
		if len(params) > 0 {
			u += "?" + params.Encode()
		}
	} else {
		body = strings.NewReader(params.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "PVEAPIToken="+c.TokenID+"="+c.Secret)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("Proxmox API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("Proxmox API %s %s: %w", method, path, err)
	}
	var env struct {
		Data    json.RawMessage   `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	_ = json.Unmarshal(b, &env)
	if resp.StatusCode != http.StatusOK {
		// The status line carries the message (pve-http-server); the
		// body repeats it, with a 400's parameter errors.
		msg := strings.TrimSpace(env.Message)
		if msg == "" {
			_, msg, _ = strings.Cut(resp.Status, " ")
		}
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Message: msg, Errors: env.Errors}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("Proxmox API %s %s: %w", method, path, err)
	}
	return nil
}

// Version is GET /version: the node's pve-manager version ("9.2.11").
func (c *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
	}
	if err := c.Get(ctx, "/version", nil, &v); err != nil {
		return "", err
	}
	return v.Version, nil
}

// Resource is a VM of GET /cluster/resources?type=vm (pve-manager
// PVE/API2/Cluster.pm resources): every VM of the cluster the token may
// see (VM.Audit), whichever node holds it.
type Resource struct {
	VMID   int    `json:"vmid"`
	Name   string `json:"name"`
	Node   string `json:"node"`
	Status string `json:"status"`
	Uptime int64  `json:"uptime"`
	Tags   string `json:"tags"`
	// Template is 1 for a template.
	Template int `json:"template"`
}

// VMs is the cluster's VMs.
func (c *Client) VMs(ctx context.Context) ([]Resource, error) {
	var out []Resource
	err := c.Get(ctx, "/cluster/resources", url.Values{"type": {"vm"}}, &out)
	return out, err
}

// VMConfig is GET /nodes/{node}/qemu/{vmid}/config: the VM's settings,
// each as qm config prints it (a number the API sends as JSON becomes
// its decimal text).
func (c *Client) VMConfig(ctx context.Context, node string, vmid int) (map[string]string, error) {
	var raw map[string]any
	if err := c.Get(ctx, VMPath(node, vmid)+"/config", nil, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			out[k] = v
		case float64:
			out[k] = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			b, _ := json.Marshal(v)
			out[k] = string(b)
		}
	}
	return out, nil
}

// Volume is one entry of GET /nodes/{node}/storage/{storage}/content.
type Volume struct {
	VolID  string `json:"volid"`
	Format string `json:"format"`
	Size   int64  `json:"size"`
}

// Content lists a storage's volumes of one content type on a node.
func (c *Client) Content(ctx context.Context, node, storage, content string) ([]Volume, error) {
	var out []Volume
	err := c.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage/"+url.PathEscape(storage)+"/content", url.Values{"content": {content}}, &out)
	return out, err
}

// FileRead reads a file inside the VM through its guest agent (GET
// .../agent/file-read, qemu-server src/PVE/API2/Qemu/Agent.pm).
func (c *Client) FileRead(ctx context.Context, node string, vmid int, file string) (string, error) {
	var out struct {
		Content string `json:"content"`
	}
	err := c.Get(ctx, VMPath(node, vmid)+"/agent/file-read", url.Values{"file": {file}}, &out)
	return out.Content, err
}

// Permissions is the token's own effective privileges on path (GET
// /access/permissions?path=P, pve-access-control
// src/PVE/API2/AccessControl.pm: anyone may read their own): privilege →
// whether it propagates.
func (c *Client) Permissions(ctx context.Context, path string) (map[string]bool, error) {
	var data map[string]map[string]int
	if err := c.Get(ctx, "/access/permissions", url.Values{"path": {path}}, &data); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for priv, prop := range data[path] {
		out[priv] = prop == 1
	}
	return out, nil
}

// StorageStatus is GET /nodes/{node}/storage/{storage}/status (pve-storage
// src/PVE/API2/Storage/Status.pm read_status): its content types, whether
// it is enabled and active, and its sizes in bytes.
type StorageStatus struct {
	Type    string `json:"type"`
	Content string `json:"content"`
	Enabled int    `json:"enabled"`
	Active  int    `json:"active"`
	Total   int64  `json:"total"`
	Used    int64  `json:"used"`
	Avail   int64  `json:"avail"`
}

// Storage reads a storage's status on a node.
func (c *Client) Storage(ctx context.Context, node, storage string) (StorageStatus, error) {
	var out StorageStatus
	err := c.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage/"+url.PathEscape(storage)+"/status", nil, &out)
	return out, err
}

// Interface is GET /nodes/{node}/network/{iface} (pve-manager
// PVE/API2/Network.pm network_config: the node's
// /etc/network/interfaces): the interface's type ("bridge", ...).
type Interface struct {
	Type       string `json:"type"`
	VLANAware  int    `json:"bridge_vlan_aware"`
	BridgePort string `json:"bridge_ports"`
}

// Interface reads one of a node's network interfaces.
func (c *Client) Interface(ctx context.Context, node, iface string) (Interface, error) {
	var out Interface
	err := c.Get(ctx, "/nodes/"+url.PathEscape(node)+"/network/"+url.PathEscape(iface), nil, &out)
	return out, err
}

// VMPath is the API path of a VM on a node.
func VMPath(node string, vmid int) string {
	return "/nodes/" + url.PathEscape(node) + "/qemu/" + strconv.Itoa(vmid)
}

// TaskError is a task that ended in an error: its exit status (the
// message of the die that ended it) and the last lines of its log.
type TaskError struct {
	UPID, Exit string
	Log        []string
}

func (e *TaskError) Error() string {
	s := "task " + e.UPID + " failed: " + e.Exit
	if len(e.Log) > 0 {
		s += "\n  " + strings.Join(e.Log, "\n  ")
	}
	return s
}

// TaskNode is the node a UPID ran on
// (UPID:$node:$pid:$pstart:$starttime:$type:$id:$user:, pve-common
// src/PVE/UPID.pm).
func TaskNode(upid string) (string, bool) {
	f := strings.Split(upid, ":")
	if len(f) < 9 || f[0] != "UPID" || f[1] == "" {
		return "", false
	}
	return f[1], true
}

// logTail is how many of a failed task's last log lines its error shows.
const logTail = 10

// Wait polls a task until it stops and returns nil if it ended "OK",
// else a *TaskError. The API has no way to watch a task (the web UI polls
// too); the polling backs off from 100 ms to 1 s, and ctx bounds it.
func (c *Client) Wait(ctx context.Context, upid string) error {
	node, ok := TaskNode(upid)
	if !ok {
		return fmt.Errorf("Proxmox API: %q is not a task ID (UPID)", upid)
	}
	base := "/nodes/" + url.PathEscape(node) + "/tasks/" + url.PathEscape(upid)
	delay := 100 * time.Millisecond
	for {
		var st struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		}
		if err := c.Get(ctx, base+"/status", nil, &st); err != nil {
			return err
		}
		if st.Status == "stopped" {
			// "OK", or "WARNINGS: n" for a task that finished with
			// warnings (pve-common UPID.pm read_status); anything else is
			// the error that ended it.
			if st.ExitStatus == "OK" || strings.HasPrefix(st.ExitStatus, "WARNINGS: ") {
				return nil
			}
			return &TaskError{UPID: upid, Exit: st.ExitStatus, Log: c.logTail(ctx, base)}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("task %s still running: %w", upid, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// logTail is a task's last lines without its final TASK line, which the
// exit status already says; nil when the log cannot be read.
func (c *Client) logTail(ctx context.Context, base string) []string {
	var lines []struct {
		T string `json:"t"`
	}
	if err := c.Get(ctx, base+"/log", url.Values{"start": {"0"}, "limit": {"1000"}}, &lines); err != nil {
		return nil
	}
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l.T, "TASK ") && strings.TrimSpace(l.T) != "" {
			out = append(out, l.T)
		}
	}
	if len(out) > logTail {
		out = out[len(out)-logTail:]
	}
	return out
}

// IsTask reports whether a call's data is a UPID: the handler forked a
// worker, whose end is to be waited for.
func IsTask(data string) bool { _, ok := TaskNode(data); return ok }

// Call makes a call that may start a task (create, start, resize,
// download-url, destroy...) and waits for the task to end.
func (c *Client) Call(ctx context.Context, method, path string, params url.Values) error {
	var data any
	if err := c.Do(ctx, method, path, params, &data); err != nil {
		return err
	}
	if upid, ok := data.(string); ok && IsTask(upid) {
		return c.Wait(ctx, upid)
	}
	return nil
}

// Reader is the API's reads: what a step holds, with no method that
// changes anything (the run's Executor alone holds the Client).
type Reader interface {
	Version(ctx context.Context) (string, error)
	VMs(ctx context.Context) ([]Resource, error)
	VMConfig(ctx context.Context, node string, vmid int) (map[string]string, error)
	Content(ctx context.Context, node, storage, content string) ([]Volume, error)
	FileRead(ctx context.Context, node string, vmid int, file string) (string, error)
	Permissions(ctx context.Context, path string) (map[string]bool, error)
	Storage(ctx context.Context, node, storage string) (StorageStatus, error)
	Interface(ctx context.Context, node, iface string) (Interface, error)
}

// ReadOnly is c's reads only: nothing behind it to assert a Client from.
func ReadOnly(c *Client) Reader { return readOnly{c: c} }

type readOnly struct{ c *Client }

func (r readOnly) Version(ctx context.Context) (string, error) { return r.c.Version(ctx) }
func (r readOnly) VMs(ctx context.Context) ([]Resource, error) { return r.c.VMs(ctx) }
func (r readOnly) VMConfig(ctx context.Context, node string, vmid int) (map[string]string, error) {
	return r.c.VMConfig(ctx, node, vmid)
}
func (r readOnly) Content(ctx context.Context, node, storage, content string) ([]Volume, error) {
	return r.c.Content(ctx, node, storage, content)
}
func (r readOnly) Storage(ctx context.Context, node, storage string) (StorageStatus, error) {
	return r.c.Storage(ctx, node, storage)
}
func (r readOnly) Interface(ctx context.Context, node, iface string) (Interface, error) {
	return r.c.Interface(ctx, node, iface)
}
func (r readOnly) Permissions(ctx context.Context, path string) (map[string]bool, error) {
	return r.c.Permissions(ctx, path)
}
func (r readOnly) FileRead(ctx context.Context, node string, vmid int, file string) (string, error) {
	return r.c.FileRead(ctx, node, vmid, file)
}
