package phase

import (
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
)

// vmSpec is the vm phase's part of a loaded config: the proxmox package
// knows its own input, not mgmt.yaml's layout.
func vmSpec(c *config.ManagementCluster) proxmox.Spec {
	s := c.Spec
	return proxmox.Spec{Node: s.Proxmox.Node, Storage: s.Proxmox.Storage, ImageDir: s.Proxmox.ImageDir,
		ImageURL: s.Image.URL, ImageSHA256: s.Image.SHA256, VMID: s.VM.ID, Name: c.Metadata.Name,
		Cores: s.VM.Cores, MemoryMiB: s.VM.MemoryMiB, DiskGiB: s.VM.DiskGiB, Bridge: s.VM.Bridge, VLAN: s.VM.VLAN,
		Net: s.VM.Net, Gateway: s.VM.Gateway, Nameservers: s.VM.Nameservers, User: s.VM.User}
}

// k3sSpec is the k3s phase's part of a loaded config.
func k3sSpec(c *config.ManagementCluster) k3s.Spec {
	return k3s.Spec{Name: c.Metadata.Name, IP: c.Spec.VM.Net.Addr(), Version: c.Spec.K3s.Release, InstallScriptURL: c.Spec.K3s.InstallScriptURL}
}
