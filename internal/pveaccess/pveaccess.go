// Package pveaccess knows Proxmox VE's privileges: what a token needs on
// which path, the pveum commands that grant exactly that, and the check of
// a token's effective permissions (GET /access/permissions) that names
// what is missing before anything is changed.
//
// Privileges, by major version, are pve-access-control's
// (src/PVE/AccessControl.pm, $privgroups and create_roles): PVE 9 dropped
// VM.Monitor and added VM.GuestAgent.* and VM.Replicate (v9.0.x commits
// "privileges: drop VM.Monitor", "add VM.GuestAgent privileges", "add
// VM.Replicate privilege"); PVE 8 (v8.2.2) has VM.Monitor.
package pveaccess

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/shell"
)

// Versions are the major versions mgmtctl knows the privileges of.
var Versions = []int{8, 9}

// Known is the major version whose privileges apply to a node that runs
// major: itself, when mgmtctl knows it. ok is false for any other, older
// or newer: a new major renames and adds privileges (PVE 9 dropped
// VM.Monitor and added VM.GuestAgent.*), so the newest list mgmtctl has is
// no answer for it.
func Known(major int) (int, bool) {
	for _, v := range Versions {
		if v == major {
			return v, true
		}
	}
	return 0, false
}

// Role is a custom role mgmtctl's commands create.
type Role struct {
	Name  string
	Privs []string
}

// Grant is a role on a path.
type Grant struct {
	Path      string
	Role      Role
	Propagate bool
}

// capmoxVM are the VM privileges CAPMOX's calls are checked for, each
// for the calls of ionos-cloud/cluster-api-provider-proxmox v0.9.0
// (pkg/proxmox/goproxmox/api_client.go, through luthermonson/go-proxmox
// v0.6.0) that qemu-server's src/PVE/API2/Qemu.pm checks it on
// (docs/upstream.md §1.12 has the table):
//   - VM.Allocate: the clone's new VM (clone_vm: on /vms/<newid> or, with
//     a pool, /pool/<pool>), and DeleteVM (destroy_vm);
//   - VM.Audit: GetVM (status/current, config), FindVMResource and
//     FindVMTemplateByTags (/cluster/resources lists only the VMs it can
//     audit), the node's VMs for the scheduler's memory;
//   - VM.Clone: CloneVM, on the template;
//   - VM.Config.CDROM: the cloud-init ISO inserted and ejected (ide0);
//   - VM.Config.CPU, VM.Config.Memory, VM.Config.Network, VM.Config.Options:
//     ConfigureVM's sockets and cores, memory, netN, description and tags
//     (tags also through TagVM; pve-guest-common assert_tag_permissions);
//   - VM.Config.Disk: ResizeDisk, and the boot order the ISO's insertion
//     sets ('boot' is one of update_vm's disk options);
//   - VM.PowerMgmt: StartVM, ResumeVM, and the stop DeleteVM does first;
//   - the guest agent, where CAPMOX waits for cloud-init (QemuAgentStatus:
//     get-osinfo; CloudInitStatus: exec and exec-status of `cloud-init
//     status`; both skippable per machine): on PVE 9 VM.GuestAgent.Audit
//     and VM.GuestAgent.Unrestricted (qemu-server API2/Qemu/Agent.pm), on
//     PVE 8 VM.Monitor.
//
// Not granted, as no call of CAPMOX needs them: VM.Backup, VM.Console,
// VM.Migrate, VM.Replicate, VM.Snapshot, VM.Snapshot.Rollback,
// VM.Config.HWType, VM.Config.Cloudinit, VM.GuestAgent.FileRead,
// VM.GuestAgent.FileWrite, VM.GuestAgent.FileSystemMgmt.
func capmoxVM(major int) []string {
	p := []string{"VM.Allocate", "VM.Audit", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk",
		"VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt"}
	if major >= 9 {
		p = append(p, "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted")
	} else {
		p = append(p, "VM.Monitor")
	}
	sort.Strings(p)
	return p
}

// CAPMOX is what CAPMOX's token needs, each privilege for a call of
// CAPMOX v0.9.0 (docs/upstream.md §1.12):
//   - Sys.Audit on / (go-proxmox's Client.Cluster reads /cluster/status,
//     before each lookup of a VM across the cluster and each free-VMID
//     check) and, propagated, on /nodes (each node's status, read before
//     every VM call and for the scheduler's memory);
//   - capmoxVM's privileges on /vms, or on /pool/<pool> with a pool: then
//     only the pool's VMs (and templates) are in its reach, not the
//     management VM (pve-access-control src/PVE/RPCEnvironment.pm: a pool's
//     ACL applies to its member VMs);
//   - SDN.Use on the bridge's SDN path, propagated to its VLANs: a clone's
//     and a netN's bridge (check_bridge_access, pve-guest-common
//     check_vnet_access);
//   - Datastore.AllocateSpace on the disks' storage (a full clone there,
//     ResizeDisk);
//   - on isoStorage, where go-proxmox puts each machine's cloud-init ISO:
//     Datastore.AllocateTemplate (the upload, pve-storage
//     API2/Storage/Status.pm), Datastore.Allocate (the ISO deleted again,
//     Content.pm delete: that privilege also lets the token change the
//     storage's own settings, so keep isoStorage apart from the disks'),
//     Datastore.Audit (the node's storage list shows a storage only with
//     Audit or AllocateSpace, and so does the ISO's volume, Storage.pm
//     check_volume_access).
//
// Each is a role of its own so that no path gets more than it needs.
func CAPMOX(major int, storage, isoStorage, bridge, pool string) []Grant {
	audit := Role{"CAPMOX.Audit", []string{"Sys.Audit"}}
	vms := "/vms"
	if pool != "" {
		vms = "/pool/" + pool
	}
	out := []Grant{
		{Path: "/", Role: audit},
		{Path: "/nodes", Role: audit, Propagate: true},
		{Path: vms, Role: Role{"CAPMOX.VM", capmoxVM(major)}, Propagate: true},
		{Path: "/sdn/zones/localnetwork/" + bridge, Role: Role{"CAPMOX.SDN", []string{"SDN.Use"}}, Propagate: true},
	}
	iso := []string{"Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit"}
	if storage == isoStorage {
		both := append([]string{"Datastore.AllocateSpace"}, iso...)
		sort.Strings(both)
		return append(out, Grant{Path: "/storage/" + storage, Role: Role{"CAPMOX.Storage", both}})
	}
	return append(out,
		Grant{Path: "/storage/" + storage, Role: Role{"CAPMOX.Disks", []string{"Datastore.AllocateSpace"}}},
		Grant{Path: "/storage/" + isoStorage, Role: Role{"CAPMOX.ISO", iso}})
}

// Mgmtctl is what mgmtctl's own token needs for the vm phase through the
// API (spec.proxmox.access: api), each privilege for the call that checks
// it (qemu-server src/PVE/API2/Qemu.pm, pve-storage
// src/PVE/API2/Storage/Status.pm and Content.pm; docs/upstream.md §1.11):
//   - on each of its VMs' paths (/vms/<vmid>, an ACL that may name a VM
//     not created yet), and on no other VM: VM.Allocate (create, destroy),
//     VM.Audit (config, status, the cluster's VMs), VM.Config.* for the
//     options create sets, VM.PowerMgmt (start, stop, reset), and reading
//     the host key through the guest agent (VM.GuestAgent.FileRead; PVE 8:
//     VM.Monitor);
//   - Datastore.AllocateSpace on the disks' storage (the disk, the
//     cloud-init drive, resize);
//   - Datastore.AllocateTemplate and Datastore.Audit on the image's
//     storage (download-url; its 'import' content listed and imported);
//   - Sys.AccessNetwork on each node (download-url probes the network:
//     it takes this, or Sys.Audit with Sys.Modify on /), and Sys.Audit
//     there (the preflight reads the bridge: network_config);
//   - SDN.Use on the bridge, propagated to its VLANs
//     (/sdn/zones/localnetwork/<bridge>/<tag>);
//   - Pool.Allocate and Pool.Audit on the run lock's pool, propagated to
//     the generations made under it (package pvelock; pve-manager
//     PVE/API2/Pool.pm: create_pool, update_pool and delete_pool check
//     Pool.Allocate on /pool/<poolid>, index lists the pools with
//     Pool.Audit). Commands makes the pool.
func Mgmtctl(major int, vmids []int, nodes []string, storage, imageStorage, bridge, lockPool string) []Grant {
	vm := []string{"VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType",
		"VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt"}
	if major >= 9 {
		vm = append(vm, "VM.GuestAgent.FileRead")
	} else {
		vm = append(vm, "VM.Monitor")
	}
	sort.Strings(vm)
	var out []Grant
	for _, id := range vmids {
		out = append(out, Grant{Path: "/vms/" + strconv.Itoa(id), Role: Role{"Mgmtctl.VM", vm}})
	}
	for _, n := range nodes {
		out = append(out, Grant{Path: "/nodes/" + n, Role: Role{"Mgmtctl.Node", []string{"Sys.AccessNetwork", "Sys.Audit"}}})
	}
	if storage == imageStorage {
		out = append(out, Grant{Path: "/storage/" + storage, Role: Role{"Mgmtctl.Storage", []string{"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"}}})
	} else {
		out = append(out,
			Grant{Path: "/storage/" + storage, Role: Role{"Mgmtctl.Disks", []string{"Datastore.AllocateSpace"}}},
			Grant{Path: "/storage/" + imageStorage, Role: Role{"Mgmtctl.Image", []string{"Datastore.AllocateTemplate", "Datastore.Audit"}}})
	}
	return append(out, Grant{Path: "/sdn/zones/localnetwork/" + bridge, Role: Role{"Mgmtctl.SDN", []string{"SDN.Use"}}, Propagate: true},
		Grant{Path: "/pool/" + lockPool, Role: Role{"Mgmtctl.Lock", []string{"Pool.Allocate", "Pool.Audit"}}, Propagate: true})
}

// Commands are the pveum commands (pve-access-control src/PVE/CLI/pveum.pm:
// role add, user add, user token add, acl modify) that give tokenID, a
// token with privilege separation, exactly grants: each role made once,
// the user made (unless root@pam), and every ACL on both the user and the
// token, since a privilege-separated token holds only what its user holds
// too. Values are quoted by package shell.
func Commands(grants []Grant, tokenID string) ([]string, error) {
	user, token, ok := strings.Cut(tokenID, "!")
	if !ok {
		return nil, fmt.Errorf("token ID %q is not user@realm!name", tokenID)
	}
	var out []string
	add := func(args ...string) error {
		line, err := shell.Join(append([]string{"pveum"}, args...)...)
		if err != nil {
			return err
		}
		out = append(out, line)
		return nil
	}
	made := map[string]bool{}
	for _, g := range grants {
		if made[g.Role.Name] {
			continue
		}
		made[g.Role.Name] = true
		if err := add("role", "add", g.Role.Name, "--privs", strings.Join(g.Role.Privs, ",")); err != nil {
			return nil, err
		}
	}
	if user != "root@pam" {
		if err := add("user", "add", user); err != nil {
			return nil, err
		}
	}
	if err := add("user", "token", "add", user, token, "--privsep", "1"); err != nil {
		return nil, err
	}
	// A pool a grant names is made first (pve-access-control's pveum.pm
	// `pool add`, pve-manager's create_pool): its VMs are then put in it.
	for _, g := range grants {
		if pool, ok := strings.CutPrefix(g.Path, "/pool/"); ok {
			if err := add("pool", "add", pool); err != nil {
				return nil, err
			}
		}
	}
	for _, g := range grants {
		args := aclModify(g.Path, g.Role.Name, tokenID)
		if !g.Propagate {
			args = append(args, "--propagate", "0")
		}
		if err := add(args...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// aclModify is `acl modify PATH --roles ROLE` for tokenID and, unless it
// is root@pam's (which holds everything), its user: a privilege-separated
// token holds only what both hold.
func aclModify(path, role, tokenID string) []string {
	args := []string{"acl", "modify", path, "--roles", role}
	if user, _, _ := strings.Cut(tokenID, "!"); user != "root@pam" {
		args = append(args, "--users", user)
	}
	return append(args, "--tokens", tokenID)
}

// Missing is what a token lacks on one path.
type Missing struct {
	Path  string
	Role  string
	Privs []string
	// All says every privilege of the role is missing there: the role
	// may not be on the path, or not exist (a grant a newer mgmtctl
	// added, such as the run lock's).
	All bool
}

// Lacking compares grants with the token's effective permissions per
// path (what GET /access/permissions?path=P answers: privilege →
// propagate). A privilege a grant propagates must propagate.
func Lacking(grants []Grant, have map[string]map[string]bool) []Missing {
	var out []Missing
	for _, g := range grants {
		var miss []string
		for _, p := range g.Role.Privs {
			prop, ok := have[g.Path][p]
			if !ok || (g.Propagate && !prop) {
				miss = append(miss, p)
			}
		}
		if len(miss) > 0 {
			out = append(out, Missing{Path: g.Path, Role: g.Role.Name, Privs: miss, All: len(miss) == len(g.Role.Privs)})
		}
	}
	return out
}

// MissingError is a token without the privileges it needs: each path
// with the privileges missing there and the command that grants them.
type MissingError struct {
	TokenID string
	Version string
	For     string // what needs them ("CAPMOX")
	Missing []Missing
	// RoleCommand is the command that prints them all; "" for `mgmtctl
	// proxmox role`.
	RoleCommand string
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Proxmox API token %s lacks privileges %s needs (Proxmox VE %s); nothing was changed:", e.TokenID, e.For, e.Version)
	for _, m := range e.Missing {
		fmt.Fprintf(&b, "\n  on %s: %s", m.Path, strings.Join(m.Privs, ", "))
		modify, _ := shell.Join("pveum", "role", "modify", m.Role, "--append", "1", "--privs", strings.Join(m.Privs, ","))
		grant, _ := shell.Join(append([]string{"pveum"}, aclModify(m.Path, m.Role, e.TokenID)...)...)
		fmt.Fprintf(&b, "\n    grant: %s\n    (or, if the role is not on the path yet: %s)", modify, grant)
		if m.All {
			// Every privilege of it missing: the role itself, and a
			// pool its path names, may not exist yet.
			add, _ := shell.Join("pveum", "role", "add", m.Role, "--privs", strings.Join(m.Privs, ","))
			fmt.Fprintf(&b, "\n    (if the role does not exist yet: %s", add)
			if pool, ok := strings.CutPrefix(m.Path, "/pool/"); ok {
				mk, _ := shell.Join("pveum", "pool", "add", pool)
				fmt.Fprintf(&b, "; if the pool does not exist yet: %s", mk)
			}
			fmt.Fprintf(&b, "; then %s)", grant)
		}
	}
	cmd := e.RoleCommand
	if cmd == "" {
		cmd = "mgmtctl proxmox role"
	}
	b.WriteString("\n`" + cmd + "` prints every command that makes the roles and grants them")
	return b.String()
}

// Lookup reads a token's effective permissions on one path: path's
// entry of GET /access/permissions?path=P (pve-access-control
// src/PVE/API2/AccessControl.pm: every user and token may read its own),
// privilege → propagates (pve.Client.Permissions).
type Lookup func(ctx context.Context, path string) (map[string]bool, error)

// MissingFrom reads the token's permissions on each path the grants name,
// each path once, and returns what it lacks (Lacking).
func MissingFrom(ctx context.Context, grants []Grant, read Lookup) ([]Missing, error) {
	have := map[string]map[string]bool{}
	for _, p := range Paths(grants) {
		if _, done := have[p]; done {
			continue
		}
		privs, err := read(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("read the token's permissions on %s: %w", p, err)
		}
		have[p] = privs
	}
	return Lacking(grants, have), nil
}

// Paths are the grants' paths, in order.
func Paths(grants []Grant) []string {
	var out []string
	for _, g := range grants {
		out = append(out, g.Path)
	}
	return out
}

// Major is a version's major number ("9.2.11" → 9), 0 if none.
func Major(version string) int {
	n, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(version), ".", 2)[0])
	return n
}
