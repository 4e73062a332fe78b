package proxmox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
)

// Prober says whether anything answers at the VM's address (addr is
// host:port): a connection accepted or refused within a short bound.
type Prober func(ctx context.Context, addr string) (bool, error)

// CheckPlace is the preflight's look at the node before the vm phase
// makes anything there: the VMID is free, or already mgmtctl's VM on this
// node (then there is nothing more to look at); else the storage holds VM
// disks and has room for the disk, the image storage has 'import' content
// (api access), the bridge exists, and nothing answers at the VM's
// address. It reads only, in a few reads: a converged run's costs one
// (pmxcfs's config files over SSH, or the cluster's VMs through the
// API).
func (n *Node) CheckPlace(ctx context.Context, probe Prober) (string, error) {
	sp := n.Spec
	node, conf, err := n.vmAnywhere(ctx)
	if err != nil {
		return "", err
	}
	if node != "" {
		switch {
		case !ours(conf, sp.Name):
			return "", fmt.Errorf("VMID %d belongs to another VM on %s (name %q, tags %q), not to mgmtctl's %q: choose a free VMID (pvesh get /cluster/nextid)",
				sp.VMID, node, conf["name"], conf["tags"], sp.Name)
		case node != sp.Node:
			return "", fmt.Errorf("VM %d (%s) is on node %s, but the config puts it on %s: migrate it back, or set the node it is on", sp.VMID, sp.Name, node, sp.Node)
		}
		return fmt.Sprintf("VM %d (%s) exists on %s", sp.VMID, sp.Name, sp.Node), nil
	}
	var ok []string
	st, err := n.storageStatus(ctx, sp.Storage)
	if err != nil {
		return "", err
	}
	need := int64(sp.DiskGiB) << 30
	switch {
	case !hasContent(st.Content, "images"):
		return "", fmt.Errorf("storage %s on %s holds no VM disks (content %q): set spec.proxmox.storage to one that does, or add 'images' to its content", sp.Storage, sp.Node, st.Content)
	case st.Enabled != 1 || st.Active != 1:
		return "", fmt.Errorf("storage %s on %s is not active (enabled %d, active %d)", sp.Storage, sp.Node, st.Enabled, st.Active)
	case st.Avail < need:
		return "", fmt.Errorf("storage %s on %s has %s free, and the VM's disk needs %dG (spec.vm.diskGiB); a thin pool may overcommit: --skip-preflight proxmox if you mean it",
			sp.Storage, sp.Node, human(st.Avail), sp.DiskGiB)
	}
	ok = append(ok, fmt.Sprintf("%s has %s free", sp.Storage, human(st.Avail)))
	if n.API != nil {
		img, err := n.storageStatus(ctx, sp.ImageStorage)
		if err != nil {
			return "", err
		}
		if !hasContent(img.Content, "import") {
			return "", fmt.Errorf("storage %s on %s has no 'import' content (content %q) for the cloud image: pvesm set %s --content %s,import (or set spec.proxmox.imageStorage)",
				sp.ImageStorage, sp.Node, img.Content, sp.ImageStorage, img.Content)
		}
	}
	iface, err := n.iface(ctx, sp.Bridge)
	if err != nil {
		return "", err
	}
	if iface.Type != "bridge" && iface.Type != "OVSBridge" {
		return "", fmt.Errorf("%s on %s is a %s, not a bridge (spec.vm.bridge)", sp.Bridge, sp.Node, iface.Type)
	}
	ok = append(ok, "bridge "+sp.Bridge)
	addr := sp.Net.Addr().String()
	answered, err := probe(ctx, addr+":22")
	if err != nil {
		return "", err
	}
	if answered {
		return "", fmt.Errorf("%s already answers (its port 22): another machine has the address spec.vm.address gives the VM; choose a free one", addr)
	}
	ok = append(ok, addr+" free")
	return fmt.Sprintf("VMID %d free on %s: %s", sp.VMID, sp.Node, strings.Join(ok, ", ")), nil
}

// vmAnywhere is the node whose config holds the VMID and the config's
// name and tags ("" when the VMID is free in the cluster).
func (n *Node) vmAnywhere(ctx context.Context) (string, map[string]string, error) {
	if n.API != nil {
		vms, err := n.API.VMs(ctx)
		if err != nil {
			return "", nil, err
		}
		for _, vm := range vms {
			if vm.VMID == n.Spec.VMID {
				return vm.Node, map[string]string{"name": vm.Name, "tags": vm.Tags}, nil
			}
		}
		return "", nil, nil
	}
	res, err := n.Host.Look(ctx, remote.VMConfigFiles(n.VMID()))
	if err != nil {
		return "", nil, fmt.Errorf("read VM %s's config in /etc/pve: %w", n.VMID(), err)
	}
	out := string(res.Stdout)
	first, rest, _ := strings.Cut(out, "\n")
	path, ok := strings.CutPrefix(first, "#path ")
	if !ok {
		return "", nil, nil
	}
	// /etc/pve/nodes/<node>/qemu-server/<vmid>.conf
	parts := strings.Split(path, "/")
	if len(parts) < 5 {
		return "", nil, fmt.Errorf("unexpected VM config path %q", path)
	}
	return parts[len(parts)-3], ParseConfig(rest), nil
}

func hasContent(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if strings.TrimSpace(x) == c {
			return true
		}
	}
	return false
}

// storageStatus reads a storage's status on the node (pvesh over SSH, or
// the API).
func (n *Node) storageStatus(ctx context.Context, storage string) (pve.StorageStatus, error) {
	var st pve.StorageStatus
	err := n.read(ctx, "/nodes/"+url.PathEscape(n.Spec.Node)+"/storage/"+url.PathEscape(storage)+"/status", &st,
		func() error { var err error; st, err = n.API.Storage(ctx, n.Spec.Node, storage); return err })
	if err != nil {
		return st, fmt.Errorf("storage %s on %s: %w", storage, n.Spec.Node, err)
	}
	return st, nil
}

// iface reads one of the node's network interfaces.
func (n *Node) iface(ctx context.Context, name string) (pve.Interface, error) {
	var i pve.Interface
	err := n.read(ctx, "/nodes/"+url.PathEscape(n.Spec.Node)+"/network/"+url.PathEscape(name), &i,
		func() error { var err error; i, err = n.API.Interface(ctx, n.Spec.Node, name); return err })
	var ae *pve.APIError
	var pe *PveshError
	if errors.As(err, &ae) && ae.Errors["iface"] != "" || errors.As(err, &pe) && pe.Params["iface"] != "" {
		return i, fmt.Errorf("bridge %s does not exist on %s (spec.vm.bridge; the node's /etc/network/interfaces)", name, n.Spec.Node)
	}
	if err != nil {
		return i, fmt.Errorf("interface %s on %s: %w", name, n.Spec.Node, err)
	}
	return i, nil
}

// PveshError is pvesh refusing a read: its exit code, what it said, and
// for a parameter error (pvesh prints the API's 400 as "400 Parameter
// verification failed." and then "<param>: <message>" lines) each
// parameter's message.
type PveshError struct {
	Path   string
	Code   int
	Stderr string
	Params map[string]string
}

func (e *PveshError) Error() string {
	return fmt.Sprintf("pvesh get %s exited %d: %s", e.Path, e.Code, e.Stderr)
}

// read is an API path read: pvesh on the node over SSH into out, or, in
// api access, api.
func (n *Node) read(ctx context.Context, path string, out any, api func() error) error {
	if n.API != nil {
		return api()
	}
	res, err := n.Host.Look(ctx, remote.PVEGet(path))
	if err != nil {
		return err
	}
	if res.ExitCode == 127 {
		return errors.New("pvesh is not on the host: is it a Proxmox VE node?")
	}
	if res.ExitCode != 0 {
		// pvesh prints the API's error, then its usage: the first
		// paragraph is the error.
		msg, _, _ := strings.Cut(strings.TrimSpace(string(res.Stderr)), "\n\n")
		pe := &PveshError{Path: path, Code: res.ExitCode, Stderr: msg, Params: map[string]string{}}
		if rest, ok := strings.CutPrefix(msg, "400 Parameter verification failed.\n"); ok {
			for _, l := range strings.Split(rest, "\n") {
				if k, v, ok := strings.Cut(l, ": "); ok {
					pe.Params[k] = v
				}
			}
		}
		return pe
	}
	return json.Unmarshal(res.Stdout, out)
}
