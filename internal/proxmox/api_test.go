package proxmox

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/pveaccess"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/steptest"
)

// fakeAPI is the API's reads over a fixed cluster.
type fakeAPI struct {
	version  string
	vms      []pve.Resource
	configs  map[int]map[string]string
	volumes  []pve.Volume
	perms    map[string]map[string]bool
	storages map[string]pve.StorageStatus
	ifaces   map[string]pve.Interface
}

func (f *fakeAPI) Version(context.Context) (string, error)     { return f.version, nil }
func (f *fakeAPI) VMs(context.Context) ([]pve.Resource, error) { return f.vms, nil }
func (f *fakeAPI) Content(context.Context, string, string, string) ([]pve.Volume, error) {
	return f.volumes, nil
}
func (f *fakeAPI) VMConfig(_ context.Context, _ string, vmid int) (map[string]string, error) {
	return f.configs[vmid], nil
}
func (f *fakeAPI) Storage(_ context.Context, _, storage string) (pve.StorageStatus, error) {
	st, ok := f.storages[storage]
	if !ok {
		return st, &pve.APIError{Status: 400, Message: "Parameter verification failed.", Errors: map[string]string{"storage": "No such storage."}}
	}
	return st, nil
}
func (f *fakeAPI) Interface(_ context.Context, _, iface string) (pve.Interface, error) {
	i, ok := f.ifaces[iface]
	if !ok {
		return i, &pve.APIError{Status: 400, Message: "Parameter verification failed.", Errors: map[string]string{"iface": "interface does not exist"}}
	}
	return i, nil
}
func (f *fakeAPI) FileRead(context.Context, string, int, string) (string, error) { return "", nil }
func (f *fakeAPI) Permissions(_ context.Context, path string) (map[string]bool, error) {
	return f.perms[path], nil
}

func apiSpec() Spec {
	s := spec()
	s.ImageStorage, s.ImageSHA256 = "local", "5d55238353948d59b36a30367d203e07dbf77c5d0de4439fc889bf1fb98bdf03"
	return s
}

// TestAPIPlans: in api access each step's plan is the API call it makes,
// with the parameters upstream takes; facts come from the cluster's VMs.
func TestAPIPlans(t *testing.T) {
	vol := "local:import/noble-server-cloudimg-amd64-5d55238353948d59.qcow2"
	running := &fakeAPI{version: "9.2.11",
		vms:     []pve.Resource{{VMID: 110, Node: "pve", Status: "running", Uptime: 3600, Name: "lab-mgmt"}, {VMID: 111, Node: "pve2", Name: "other"}},
		configs: map[int]map[string]string{110: {"name": "lab-mgmt", "tags": "mgmtctl", "scsi0": "local-lvm:vm-110-disk-0,size=3584M"}}}
	for _, tc := range []struct {
		name string
		api  *fakeAPI
		step func(n *Node) step.Step
		plan []string
		err  string
	}{
		{name: "image", api: &fakeAPI{version: "8.4.1"}, step: func(n *Node) step.Step { return &Image{N: n} },
			plan: []string{"Proxmox API: POST /nodes/pve/storage/local/download-url checksum=5d55238353948d59b36a30367d203e07dbf77c5d0de4439fc889bf1fb98bdf03 checksum-algorithm=sha256 content=import filename=noble-server-cloudimg-amd64-5d55238353948d59.qcow2 url=https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img"}},
		{name: "image on PVE 8.3", api: &fakeAPI{version: "8.3.5"}, step: func(n *Node) step.Step { return &Image{N: n} },
			err: "pve runs Proxmox VE 8.3.5: downloading the image into 'import' content needs Proxmox VE 8.4 or newer"},
		{name: "image present", api: &fakeAPI{volumes: []pve.Volume{{VolID: vol}}}, step: func(n *Node) step.Step { return &Image{N: n} }},
		{name: "create-vm", api: &fakeAPI{}, step: func(n *Node) step.Step {
			return &CreateVM{N: n, AuthorizedKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIICJ laptop@lab"}
		},
			plan: []string{"Proxmox API: POST /nodes/pve/qemu agent=1 boot=order=scsi0 ciuser=ubuntu cores=2 ide2=local-lvm:cloudinit ipconfig0=ip=192.0.2.50/24,gw=192.0.2.1 memory=4096 name=lab-mgmt nameserver=192.0.2.1 192.0.2.2 net0=virtio,bridge=vmbr0,tag=4 scsi0=local-lvm:0,import-from=" + vol + " scsihw=virtio-scsi-pci serial0=socket sshkeys=ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIICJ%20laptop%40lab%0A tags=mgmtctl vga=serial0 vmid=110"}},
		{name: "grow-disk", api: running, step: func(n *Node) step.Step { return &GrowDisk{N: n} },
			plan: []string{"Proxmox API: PUT /nodes/pve/qemu/110/resize disk=scsi0 size=30G"}},
		{name: "destroy-vm", api: running, step: func(n *Node) step.Step { return &DestroyVM{N: n} },
			plan: []string{"Proxmox API: POST /nodes/pve/qemu/110/status/stop", "Proxmox API: DELETE /nodes/pve/qemu/110 destroy-unreferenced-disks=1 purge=1"}},
		{name: "a VM on another node", api: &fakeAPI{vms: []pve.Resource{{VMID: 110, Node: "pve2"}}, configs: map[int]map[string]string{110: {"name": "lab-mgmt", "tags": "mgmtctl"}}},
			step: func(n *Node) step.Step { return &CreateVM{N: n} }, err: "VM 110 (name \"lab-mgmt\") is on node pve2, but the config puts it on pve"},
		{name: "a foreign VM", api: &fakeAPI{vms: []pve.Resource{{VMID: 110, Node: "pve"}}, configs: map[int]map[string]string{110: {"name": "db"}}},
			step: func(n *Node) step.Step { return &DestroyVM{N: n} }, err: `VM 110 on pve is not mgmtctl's (name "db"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{Spec: apiSpec(), API: tc.api}
			if err := n.Gather(context.Background()); err != nil {
				t.Fatal(err)
			}
			p, err := tc.step(n).Check(context.Background())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range steptest.Effects(p) {
				if strings.HasPrefix(e, "Proxmox API") {
					got = append(got, e)
				}
			}
			if !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan\n%q\nwant\n%q", got, tc.plan)
			}
		})
	}
	n := &Node{Spec: apiSpec(), API: running}
	n.Gather(context.Background())
	if !n.Facts.Running || n.Facts.Uptime != time.Hour || n.Facts.OnNode != "pve" || !n.Ours() {
		t.Errorf("facts %+v", n.Facts)
	}
}

// TestCheckAccess: each privilege missing is named with its path, and a
// token with every one passes.
func TestCheckAccess(t *testing.T) {
	grants := func(major int) []pveaccess.Grant {
		return pveaccess.Mgmtctl(major, []int{110}, []string{"pve"}, "local-lvm", "local", "vmbr0", "mgmtctl-lab")
	}
	all := map[string]map[string]bool{}
	for _, g := range grants(9) {
		all[g.Path] = map[string]bool{}
		for _, p := range g.Role.Privs {
			all[g.Path][p] = g.Propagate
		}
	}
	api := &fakeAPI{version: "9.2.11", perms: all}
	if _, err := CheckAccess(context.Background(), api, "mgmtctl@pve!vm", grants); err != nil {
		t.Fatal(err)
	}
	delete(all["/vms/110"], "VM.Config.Cloudinit")
	delete(all["/nodes/pve"], "Sys.AccessNetwork")
	_, err := CheckAccess(context.Background(), api, "mgmtctl@pve!vm", grants)
	var me *pveaccess.MissingError
	if !errors.As(err, &me) || len(me.Missing) != 2 || !strings.Contains(err.Error(), "on /vms/110: VM.Config.Cloudinit") || !strings.Contains(err.Error(), "on /nodes/pve: Sys.AccessNetwork") {
		t.Fatalf("got %v", err)
	}
}

// TestCheckPlace: the preflight's look at the node, through the API (the
// same decisions as over SSH, from the same reads).
func TestCheckPlace(t *testing.T) {
	good := func() *fakeAPI {
		return &fakeAPI{version: "9.2.11",
			storages: map[string]pve.StorageStatus{"local-lvm": {Type: "lvmthin", Content: "images,rootdir", Enabled: 1, Active: 1, Avail: 100 << 30},
				"local": {Type: "dir", Content: "iso,vztmpl,backup,import", Enabled: 1, Active: 1, Avail: 50 << 30}},
			ifaces: map[string]pve.Interface{"vmbr0": {Type: "bridge"}}}
	}
	free := func(context.Context, string) (bool, error) { return false, nil }
	for _, tc := range []struct {
		name   string
		change func(f *fakeAPI)
		probe  Prober
		want   string
	}{
		{name: "all good", want: "VMID 110 free on pve: local-lvm has 100G free, bridge vmbr0, 192.0.2.50 free"},
		{name: "ours already", change: func(f *fakeAPI) {
			f.vms = []pve.Resource{{VMID: 110, Node: "pve", Name: "lab-mgmt", Tags: "mgmtctl"}}
		}, want: "VM 110 (lab-mgmt) exists on pve"},
		{name: "another VM", change: func(f *fakeAPI) { f.vms = []pve.Resource{{VMID: 110, Node: "pve2", Name: "db"}} },
			want: `error: VMID 110 belongs to another VM on pve2 (name "db", tags "")`},
		{name: "no room", change: func(f *fakeAPI) { s := f.storages["local-lvm"]; s.Avail = 10 << 30; f.storages["local-lvm"] = s },
			want: "error: storage local-lvm on pve has 10G free, and the VM's disk needs 30G"},
		{name: "no such storage", change: func(f *fakeAPI) { delete(f.storages, "local-lvm") },
			want: "error: storage local-lvm on pve: Proxmox API"},
		{name: "no import content", change: func(f *fakeAPI) { s := f.storages["local"]; s.Content = "iso,vztmpl,backup"; f.storages["local"] = s },
			want: "error: storage local on pve has no 'import' content"},
		{name: "no bridge", change: func(f *fakeAPI) { delete(f.ifaces, "vmbr0") },
			want: "error: bridge vmbr0 does not exist on pve"},
		{name: "address taken", probe: func(context.Context, string) (bool, error) { return true, nil },
			want: "error: 192.0.2.50 already answers (its port 22)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good()
			if tc.change != nil {
				tc.change(f)
			}
			probe := free
			if tc.probe != nil {
				probe = tc.probe
			}
			n := &Node{Spec: apiSpec(), API: f}
			got, err := n.CheckPlace(context.Background(), probe)
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want %q...", got, tc.want)
			}
		})
	}
}
