package phase

import (
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/proxmox"
)

// vmSpec is the vm phase's part of a loaded config for one server: the
// proxmox package knows its own input, not mgmt.yaml's layout.
func vmSpec(c *config.ManagementCluster, srv config.Server) proxmox.Spec {
	s := c.Spec
	return proxmox.Spec{Node: srv.Node, Storage: s.Proxmox.Storage, ImageDir: s.Proxmox.ImageDir,
		ImageURL: s.Image.URL, ImageSHA256: s.Image.SHA256, VMID: srv.ID, Name: srv.Name,
		Cores: s.VM.Cores, MemoryMiB: s.VM.MemoryMiB, DiskGiB: s.VM.DiskGiB, Bridge: s.VM.Bridge, VLAN: s.VM.VLAN,
		Net: srv.Net, Gateway: s.VM.Gateway, Nameservers: s.VM.Nameservers, User: s.VM.User, ImageStorage: s.Proxmox.ImageStorage}
}

// k3sSpec is the k3s phase's part of a loaded config for the i-th server:
// the first initialises the cluster, the others join it at its API
// address (the VIP).
func k3sSpec(l *config.Loaded, i int) k3s.Spec {
	c := &l.Cluster
	srv := l.Servers()[i]
	s := k3s.Spec{Name: srv.Name, IP: srv.Net.Addr(), Version: c.Spec.K3s.Release, InstallScriptURL: c.Spec.K3s.InstallScriptURL,
		VIP: c.Spec.VIP.Addr, SnapshotSchedule: c.Spec.Backup.Schedule, SnapshotRetention: c.Spec.Backup.Retention,
		// Always: a cluster k3s initialised without it is turned over by
		// the k3s phase's secrets-encryption steps (k3s encrypt.go).
		SecretsEncryption: true}
	if b := c.Spec.Backup.S3; b != nil {
		k := l.Secrets.S3
		s.S3 = &k3s.S3Spec{Endpoint: b.Endpoint, Bucket: b.Bucket, Folder: b.Folder, Region: b.Region, CA: b.CA,
			AccessKey: k.AccessKey, SecretKey: k.SecretKey}
	}
	if i > 0 {
		s.Join = apiURL(l)
	}
	return s
}

// kubeVIPSpec is kube-vip's part of a loaded config.
func kubeVIPSpec(c *config.ManagementCluster) k3s.KubeVIPSpec {
	v := c.Spec.VIP
	return k3s.KubeVIPSpec{Address: v.Addr, Interface: v.Interface, Image: v.Image, Version: v.Version}
}
