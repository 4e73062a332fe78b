package phase

import (
	"context"
	"fmt"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/backup"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Pins are the versions mgmt.yaml pins, as a backup records them and a
// restore compares them.
func Pins(c *config.ManagementCluster) map[string]string {
	p := map[string]string{
		"k3s":                c.Spec.K3s.Version,
		"certManager":        c.Spec.CertManager.Version,
		"clusterAPIOperator": c.Spec.ClusterAPIOperator.Version,
	}
	for _, pr := range c.Spec.Providers {
		p[fmt.Sprintf("provider %s/%s", pr.Type, pr.Name)] = pr.Version
	}
	return p
}

// Backup is the backup command's phase: an etcd snapshot on the VM, copied
// with the server token, the config and the pins into a new directory of
// dir, then the oldest backups beyond keep removed.
func Backup(s *session.Session, dir string, keep int, config []byte, now func() time.Time) step.Phase {
	c := &s.Config.Cluster
	vm := &backup.VM{Name: c.Metadata.Name}
	t := &backup.Take{V: vm, Dir: dir, Config: config, Now: now,
		Manifest: backup.Manifest{Cluster: c.Metadata.Name, Pins: Pins(c)}}
	return step.Phase{
		Tag:     step.TagBackup,
		Prepare: dialFor(s, vm),
		Steps:   []step.Step{&backup.Save{T: t}, &backup.Fetch{T: t}, &backup.Prune{Dir: dir, Keep: keep}},
	}
}

// Restore is the restore command's phases: the snapshot put back on the
// VM, then every phase after vm converged again, which waits for the node,
// the charts and the providers, and rewrites the laptop's kubeconfigs for
// the cluster's restored CA.
func Restore(s *session.Session, b backup.Backup, snapshot, token []byte) []step.Phase {
	c := &s.Config.Cluster
	vm := &backup.VM{Name: c.Metadata.Name}
	restore := step.Phase{
		Tag:     step.TagRestore,
		Prepare: dialFor(s, vm),
		Steps:   []step.Step{&backup.Restore{V: vm, B: b, Snapshot: snapshot, Token: token}},
	}
	return append([]step.Phase{restore}, Build(s)[1:]...)
}

func dialFor(s *session.Session, vm *backup.VM) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		h, err := s.DialVM(ctx, s.Config.Servers()[0], false, nil)
		if err != nil {
			return vm.Name, err
		}
		vm.Host = h
		return vm.Name, nil
	}
}
