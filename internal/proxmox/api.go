package proxmox

// The vm phase through the Proxmox VE API (spec.proxmox.access: api):
// the same steps and decisions as over SSH, with the node's facts read
// from the API and each change an API call (effect.Call), whose task the
// Executor waits for. The paths, parameters and privileges are
// qemu-server's and pve-storage's (docs/upstream.md §1.11).

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/pveaccess"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/version"
)

// MinImportVersion is the first Proxmox VE that downloads a disk image
// into a storage's 'import' content (download-url with content=import
// and a .qcow2 name: pve-storage 8.3.6, "import: allow upload of guest
// images files into import storage", shipped with PVE 8.4).
const MinImportVersion = "8.4"

// ImageFile is the image's file name in the image storage's 'import'
// content: the URL's name with the sum's first 16 hex digits, ending
// .qcow2 (the Ubuntu cloud image's format; download-url takes no .img
// name for 'import'). The name carries the sum because the API lists a
// volume without one: a name Proxmox downloaded with
// checksum-algorithm sha256 holds exactly that file, and a bumped image
// is a new name.
func (n *Node) ImageFile() string {
	u, err := url.Parse(n.Spec.ImageURL)
	if err != nil {
		return ""
	}
	base := path.Base(u.Path)
	if ext := path.Ext(base); ext == ".img" || ext == ".qcow2" {
		base = strings.TrimSuffix(base, ext)
	}
	sum := n.Spec.ImageSHA256
	if len(sum) > 16 {
		sum = sum[:16]
	}
	return base + "-" + sum + ".qcow2"
}

// ImageVolID is the image's volume: <storage>:import/<file>.
func (n *Node) ImageVolID() string { return n.Spec.ImageStorage + ":import/" + n.ImageFile() }

// imageSource is what scsi0 imports from: the file on the node over SSH,
// the volume through the API.
func (n *Node) imageSource() string {
	if n.API != nil {
		return n.ImageVolID()
	}
	return n.ImagePath()
}

// vmPath is the VM's API path.
func (n *Node) vmPath() string { return pve.VMPath(n.Spec.Node, n.Spec.VMID) }

// do is the effect of changing the VM: qm over SSH, or the API call.
func (n *Node) do(cmd remote.Cmd, method, apiPath string, params url.Values) effect.Effect {
	if n.API != nil {
		return effect.Call{Method: method, Path: apiPath, Params: params}
	}
	return n.run(cmd)
}

// gatherAPI reads the node's facts from the API: the cluster's VMs (one
// call: whether the VMID exists, on which node, running since when),
// the VM's config, and the image storage's 'import' volumes.
func (n *Node) gatherAPI(ctx context.Context, image bool) error {
	f := Facts{At: time.Now()}
	vms, err := n.API.VMs(ctx)
	if err != nil {
		return fmt.Errorf("gather facts: %w", err)
	}
	for _, vm := range vms {
		if vm.VMID != n.Spec.VMID {
			continue
		}
		f.VMExists, f.OnNode = true, vm.Node
		f.Running = vm.Status == "running"
		if f.Running {
			f.Uptime = time.Duration(vm.Uptime) * time.Second
		}
		if f.Config, err = n.API.VMConfig(ctx, vm.Node, vm.VMID); err != nil {
			return fmt.Errorf("gather facts: %w", err)
		}
	}
	if image {
		vols, err := n.API.Content(ctx, n.Spec.Node, n.Spec.ImageStorage, "import")
		if err != nil {
			return fmt.Errorf("gather facts: %w", err)
		}
		for _, v := range vols {
			if v.VolID == n.ImageVolID() {
				f.ImageSHA256 = n.Spec.ImageSHA256
			}
		}
	}
	n.Facts = f
	return nil
}

// createParams are create-vm's API parameters: qm create's options, with
// the image's volume to import from and the user's key itself (URI-escaped
// as the API takes sshkeys: qemu-server create_vm uri_unescapes it).
func (s *CreateVM) createParams() url.Values {
	p := url.Values{"vmid": {s.N.VMID()}}
	for _, o := range s.options() {
		p.Set(o[0], o[1])
	}
	p.Set("sshkeys", strings.ReplaceAll(url.QueryEscape(s.AuthorizedKey+"\n"), "+", "%20"))
	return p
}

// needsVersion refuses a node older than min, naming the version it runs.
func (n *Node) needsVersion(ctx context.Context, min, what string) error {
	v, err := n.API.Version(ctx)
	if err != nil {
		return err
	}
	if version.Less(v, min) {
		return fmt.Errorf("%s runs Proxmox VE %s: %s needs Proxmox VE %s or newer; upgrade the node, or use spec.proxmox.access: ssh", n.Name(), v, what, min)
	}
	return nil
}

// CheckAccess reads the token's effective permissions on each path the
// grants name and returns a *pveaccess.MissingError naming every
// privilege missing, the path, and the command that grants it: the vm
// phase's first look in api access, before any fact is gathered (a token
// without VM.Audit would see no VM at all) and before any change.
func CheckAccess(ctx context.Context, api pve.Reader, tokenID string, needs func(major int) []pveaccess.Grant) (string, error) {
	v, err := api.Version(ctx)
	if err != nil {
		return "", err
	}
	major, ok := pveaccess.Known(pveaccess.Major(v))
	if !ok {
		return "", fmt.Errorf("the Proxmox API runs Proxmox VE %s: mgmtctl's api access knows the privileges of PVE %d and %d", v, pveaccess.Versions[0], pveaccess.Versions[len(pveaccess.Versions)-1])
	}
	missing, err := pveaccess.MissingFrom(ctx, needs(major), api.Permissions)
	if err != nil {
		return "", fmt.Errorf("token %s: %w", tokenID, err)
	}
	if len(missing) > 0 {
		return "", &pveaccess.MissingError{TokenID: tokenID, Version: v, For: "mgmtctl's vm phase", Missing: missing,
			RoleCommand: "mgmtctl proxmox role --for mgmtctl"}
	}
	return v, nil
}
