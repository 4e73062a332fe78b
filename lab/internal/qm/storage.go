package qm

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// Running reports whether the VM runs.
func (n *Node) Running(vmid int) bool { return n.running(vmid) }
