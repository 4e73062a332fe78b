package qm

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"
)

// Storage is one storage of the cluster's storage.cfg (pve-storage
// src/PVE/Storage/Plugin.pm's section config: "<type>: <id>" then
// indented "<key> <value>" lines).
type Storage struct {
	ID, Type string
	// Path is a directory storage's root; "" for a block storage.
	Path    string
	Content map[string]bool
}

// DefaultStorageCfg is the lab's /etc/pve/storage.cfg when none was
// written: a new node's two storages (pve-manager's installer), with
// 'import' added to local's content as a user who downloads disk images
// through the API adds it (`pvesm set local --content
// iso,vztmpl,backup,import`).
const DefaultStorageCfg = `dir: local
	path /var/lib/vz
	content iso,vztmpl,backup,import

lvmthin: local-lvm
	thinpool data
	vgname pve
	content rootdir,images
`

// Storages reads /etc/pve/storage.cfg.
func (n *Node) Storages() map[string]Storage {
	b, err := os.ReadFile(filepath.Join(n.Root, "etc/pve/storage.cfg"))
	if err != nil {
		b = []byte(DefaultStorageCfg)
	}
	out := map[string]Storage{}
	var cur *Storage
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			typ, id, ok := strings.Cut(line, ": ")
			if !ok {
				continue
			}
			out[strings.TrimSpace(id)] = Storage{ID: strings.TrimSpace(id), Type: typ, Content: map[string]bool{}}
			s := out[strings.TrimSpace(id)]
			cur = &s
			continue
		}
		if cur == nil {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "path":
			cur.Path = v
		case "content":
			for _, c := range strings.Split(v, ",") {
				cur.Content[c] = true
			}
		}
		out[cur.ID] = *cur
	}
	return out
}

// VolumePath is where a directory storage keeps a volume: "import/x" of
// storage "local" is <path>/import/x (pve-storage Plugin.pm filesystem_path
// for the 'import' vtype: get_subdir 'import').
func (n *Node) VolumePath(volid string) (string, error) {
	sid, name, ok := strings.Cut(volid, ":")
	if !ok {
		return "", fmt.Errorf("unable to parse volume ID '%s'", volid)
	}
	st, ok := n.Storages()[sid]
	if !ok {
		return "", fmt.Errorf("storage '%s' does not exist", sid)
	}
	if st.Path == "" {
		return n.volumePath(volid), nil
	}
	return filepath.Join(n.Root, st.Path, name), nil
}

// sourcePath is an import-from source's file: an absolute path on the
// node, or a volume of a storage.
func (n *Node) sourcePath(src string) (string, error) {
	if strings.HasPrefix(src, "/") {
		return filepath.Join(n.Root, src), nil
	}
	return n.VolumePath(src)
}

// validateSSHKeys is pve-common's PVE::Tools::validate_ssh_public_keys:
// every non-blank line must be a key ssh-keygen -l reads.
func validateSSHKeys(raw string) error {
	for _, line := range strings.Split(raw, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
			return fmt.Errorf("SSH public key validation error")
		}
	}
	return nil
}

// FileRead reads a file in the guest through its agent, as the API's
// agent/file-read does (qemu-server src/PVE/API2/Qemu/Agent.pm), with
// the checks qm guest makes first.
func (n *Node) FileRead(vmid int, file string) (string, error) {
	c, err := n.load(vmid)
	if err != nil {
		return "", err
	}
	if !agentEnabled(c) {
		return "", fmt.Errorf("No QEMU guest agent configured")
	}
	if !n.running(vmid) {
		return "", fmt.Errorf("VM %d is not running", vmid)
	}
	if up, err := n.Backend.GuestAgent(vmid); err != nil || !up {
		return "", fmt.Errorf("QEMU guest agent is not running")
	}
	out, errOut, code, err := n.Backend.GuestExec(vmid, []string{"cat", "--", file})
	if err != nil {
		return "", fmt.Errorf("Agent error: %v", err)
	}
	if code != 0 {
		// guest-file-open's error, as qemu-ga words it.
		return "", fmt.Errorf("Agent error: failed to open file '%s': %s", file, strings.TrimSpace(errOut))
	}
	return out, nil
}

// Config reads a VM's configuration (GET .../qemu/{vmid}/config).
func (n *Node) Config(vmid int) (Config, error) { return n.load(vmid) }

// ThinPoolBytes is the size of the lab's LVM thin pool (local-lvm's
// "data"): what its status reports as total, the volumes' sizes used.
const ThinPoolBytes = 256 << 30

// StorageStatus is a storage's status as pve-storage's read_status
// (src/PVE/API2/Storage/Status.pm, storage_info) answers it: type,
// content, enabled, active, total, used, avail (bytes). A directory
// storage's sizes are its file system's; the thin pool's are
// ThinPoolBytes and the volumes in it. A storage that does not exist
// is the parameter error "No such storage.".
func (n *Node) StorageStatus(storeid string) (map[string]any, error) {
	st, ok := n.Storages()[storeid]
	if !ok {
		return nil, fmt.Errorf("400 Parameter verification failed.\nstorage: No such storage.")
	}
	var contents []string
	for c := range st.Content {
		contents = append(contents, c)
	}
	sort.Strings(contents)
	var total, used int64
	if st.Path != "" {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(filepath.Join(n.Root, st.Path), &fs); err == nil {
			total = int64(fs.Blocks) * fs.Bsize
			used = total - int64(fs.Bavail)*fs.Bsize
		}
	} else {
		total = ThinPoolBytes
		entries, _ := os.ReadDir(filepath.Join(n.Root, "var/lib/labsim/storage", storeid))
		for _, e := range entries {
			if size, ok := n.volumeSize(storeid + ":" + e.Name()); ok {
				used += size
			}
		}
	}
	return map[string]any{"type": st.Type, "content": strings.Join(contents, ","), "enabled": 1, "active": 1, "shared": 0,
		"total": total, "used": used, "avail": max(total-used, 0)}, nil
}

// Interface is one of the node's network interfaces as pve-manager's
// network_config (PVE/API2/Network.pm) answers it, from the node's
// /etc/network/interfaces (ifupdown2's format: "iface <name> inet
// <method>" and its indented options, "auto <name>"); an interface not
// there is the parameter error "interface does not exist".
func (n *Node) Interface(name string) (map[string]any, error) {
	b, _ := os.ReadFile(filepath.Join(n.Root, "etc/network/interfaces"))
	var cur map[string]any
	auto := map[string]bool{}
	found := map[string]map[string]any{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case f[0] == "auto" || f[0] == "allow-hotplug":
			for _, a := range f[1:] {
				auto[a] = true
			}
		case f[0] == "iface" && len(f) >= 4:
			cur = map[string]any{"iface": f[1], "method": f[3], "families": []string{f[2]}, "type": "unknown", "active": 1, "priority": len(found) + 1}
			switch {
			case strings.HasPrefix(f[1], "vmbr"):
				cur["type"] = "bridge"
			case f[1] == "lo":
				cur["type"] = "loopback"
			default:
				cur["type"] = "eth"
			}
			found[f[1]] = cur
		case cur != nil && len(f) >= 2:
			key := strings.ReplaceAll(f[0], "-", "_")
			val := strings.Join(f[1:], " ")
			switch key {
			case "address":
				if a, p, ok := strings.Cut(val, "/"); ok {
					cur["address"], cur["netmask"], cur["cidr"] = a, p, val
					continue
				}
			case "bridge_vlan_aware":
				if val == "yes" {
					cur[key] = 1
				}
				continue
			}
			cur[key] = val
		}
	}
	i, ok := found[name]
	if !ok {
		return nil, fmt.Errorf("400 Parameter verification failed.\niface: interface does not exist")
	}
	if auto[name] {
		i["autostart"] = 1
	}
	return i, nil
}
