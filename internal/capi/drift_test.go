package capi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/remote/remotetest"
)

// TestCompare: what a restore reports of each Machine and VM.
func TestCompare(t *testing.T) {
	capmox := func(id int, name, node, ip string) ClusterVM {
		return ClusterVM{VMID: id, Name: name, Node: node, Status: "running", Tags: "ip_net0_" + ip}
	}
	for _, tc := range []struct {
		name     string
		machines []MachineVM
		vms      []ClusterVM
		want     []string
	}{
		{"each Machine with its VM", []MachineVM{{"default/cp-1", 201, "pve1"}, {"default/w-1", 202, "pve2"}},
			[]ClusterVM{capmox(201, "cp-1", "pve1", "192.0.2.101"), capmox(202, "w-1", "pve2", "192.0.2.102"), {VMID: 110, Name: "lab-mgmt", Node: "pve1", Tags: "mgmtctl"}}, nil},
		{"a Machine still provisioning", []MachineVM{{"default/cp-1", 0, ""}}, nil, nil},
		{"a VM gone", []MachineVM{{"default/cp-1", 201, "pve1"}, {"default/w-1", 202, "pve2"}},
			[]ClusterVM{capmox(201, "cp-1", "pve1", "192.0.2.101")},
			[]string{"Machine default/w-1: its VM 202 on pve2 is gone from Proxmox"}},
		{"a VMID taken by another VM since", []MachineVM{{"default/w-1", 202, ""}},
			[]ClusterVM{{VMID: 202, Name: "db", Node: "pve3", Tags: "prod"}},
			[]string{`Machine default/w-1: VM 202 on pve3 is "db", not a VM of CAPMOX's (tags "prod")`}},
		{"a VM of CAPMOX's no Machine knows", []MachineVM{{"default/cp-1", 201, "pve1"}},
			[]ClusterVM{capmox(201, "cp-1", "pve1", "192.0.2.101"), {VMID: 203, Name: "w-2", Node: "pve2", Tags: "k8s;ip_net0_192.0.2.103"}, {VMID: 9000, Name: "tmpl", Tags: "ip_net0_192.0.2.9", Template: 1}},
			[]string{"VM 203 (w-2) on pve2: made by CAPMOX (tag ip_net0_192.0.2.103), no Machine knows it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compare(tc.machines, tc.vms); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// apiServing serves a list of objects at each path (404 elsewhere, as an
// API server without the resource answers).
func apiServing(t *testing.T, lists map[string][]map[string]any) func(context.Context) (*kube.Reader, error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		items, ok := lists[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}, "items": items})
	}))
	t.Cleanup(srv.Close)
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", srv.URL)
	var d net.Dialer
	r, err := kube.NewReader([]byte(kc), d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	return func(context.Context) (*kube.Reader, error) { return r, nil }
}

// TestDriftCheck: the step reads the Machines (v1beta2), their
// ProxmoxMachines (v1alpha2, another provider's skipped) and pvesh's list
// of the cluster's VMs, and reports what differs; when Proxmox cannot be
// read it says so in a warning rather than fail the restore it ends.
func TestDriftCheck(t *testing.T) {
	machine := func(name, kind string) map[string]any {
		return map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{"clusterName": "lab1", "infrastructureRef": map[string]any{"apiGroup": InfraGroup, "kind": kind, "name": name}}}
	}
	pm := func(name string, id int, node string) map[string]any {
		return map[string]any{"apiVersion": InfraGroup + "/v1alpha2", "kind": "ProxmoxMachine", "metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{"virtualMachineID": id}, "status": map[string]any{"proxmoxNode": node}}
	}
	api := apiServing(t, map[string][]map[string]any{
		"/apis/cluster.x-k8s.io/v1beta2/machines":                        {machine("cp-1", "ProxmoxMachine"), machine("w-1", "ProxmoxMachine"), machine("docker-1", "DockerMachine")},
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha2/proxmoxmachines": {pm("cp-1", 201, "pve1"), pm("w-1", 202, "pve2")},
	})
	node := &remotetest.Host{HostName: "pve1", Answer: func(c remote.Cmd) (remote.Result, error) {
		if c.String() != "pvesh get /cluster/resources --type vm --output-format json" {
			return remote.Result{}, fmt.Errorf("unexpected %s", c)
		}
		return remote.Result{Stdout: []byte(`[{"id":"qemu/201","type":"qemu","vmid":201,"name":"cp-1","node":"pve1","status":"running","tags":"ip_net0_192.0.2.101","template":0},` +
			`{"id":"qemu/110","type":"qemu","vmid":110,"name":"lab-mgmt","node":"pve1","status":"running","tags":"mgmtctl","template":0}]`)}, nil
	}}
	d := &Drift{Name: "pve1", API: api, Node: func(context.Context) (remote.Reader, error) { return node, nil }}
	p, err := d.Check(context.Background())
	if err != nil || !p.Empty() || !reflect.DeepEqual(p.Warnings, []string{"Machine default/w-1: its VM 202 on pve2 is gone from Proxmox"}) {
		t.Errorf("plan %+v, %v", p, err)
	}
	for _, c := range node.Ran() {
		if !c.ReadOnly {
			t.Errorf("ran %s, which is no read", c)
		}
	}

	d.Node = func(context.Context) (remote.Reader, error) { return nil, errors.New("dial pve1: connection refused") }
	p, err = d.Check(context.Background())
	if err != nil || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "the Machines were not compared with Proxmox: dial pve1: connection refused") {
		t.Errorf("Proxmox unreachable: plan %+v, %v", p, err)
	}
}
