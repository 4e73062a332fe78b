package phase

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/backup"
	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/k3s"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
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
	// The Clusters are paused for the snapshot only: it holds them paused,
	// so a restored cluster wakes up paused (package capi, pause.go).
	cls := &capi.Clusters{Name: vm.Name, API: s.Cluster().API}
	return step.Phase{
		Tag:     step.TagBackup,
		Prepare: dialFor(s, vm),
		Steps: []step.Step{&capi.Pause{C: cls}, &backup.Save{T: t}, &backup.Fetch{T: t},
			&capi.Resume{C: cls}, &backup.Prune{Dir: dir, Keep: keep}},
	}
}

// before is apply's backup before a risky change, into the laptop's
// backups like any other: the Clusters paused, a snapshot on vm saved and
// copied with why, the Clusters resumed. reason says why, or "" for no
// risky change: then every step skips, reading nothing. vm's Host is
// the phase's to set.
func before(s *session.Session, vm *backup.VM, reason func(ctx context.Context) (string, error)) []step.Step {
	if s.NoSnapshot {
		return nil
	}
	c := &s.Config.Cluster
	// The config as it is now, as a backup keeps it; unreadable, the
	// backup keeps none rather than the run failing over it.
	raw, _ := os.ReadFile(s.Config.Path)
	b := &backup.Before{Reason: reason}
	t := &backup.Take{V: vm, Dir: s.BackupDir(), Config: raw, Now: time.Now, Before: b,
		Manifest: backup.Manifest{Cluster: c.Metadata.Name, Pins: Pins(c)}}
	cls := &capi.Clusters{Name: vm.Name, API: s.Cluster().API}
	var steps []step.Step
	for _, st := range []step.Step{&capi.Pause{C: cls}, &backup.Save{T: t}, &backup.Fetch{T: t}, &capi.Resume{C: cls}} {
		steps = append(steps, onlyIf(st, b))
	}
	return steps
}

// onlyIf makes s a step of the run only when b says a backup is taken
// (step.Conditional, through b's Applies), keeping what else s is (a
// Finisher).
func onlyIf(s step.Step, b *backup.Before) step.Step {
	if f, ok := s.(step.Finisher); ok {
		return struct {
			step.Finisher
			*backup.Before
		}{f, b}
	}
	return struct {
		step.Step
		*backup.Before
	}{s, b}
}

// Resume is restore --resume's phase: the Clusters a restore holds paused
// resumed, with those a backup left paused.
func Resume(s *session.Session) step.Phase {
	name := s.Config.Servers()[0].Name
	a := s.Cluster()
	return step.Phase{
		Tag:     step.TagRestore,
		Prepare: func(ctx context.Context) (string, error) { return name, a.Connect(ctx) },
		Steps:   []step.Step{&capi.Resume{C: &capi.Clusters{Name: name, API: a.API}, Held: true}},
	}
}

// Restore is the restore command's phases: the snapshot put back, then
// every phase after vm converged again, which waits for the nodes, the
// charts and the providers, and rewrites the laptop's kubeconfigs for the
// cluster's restored CA.
//
// With several servers it follows k3s's procedure for them (package
// k3s, rejoin.go): k3s stops on the other servers first; the first
// restores the snapshot alone; with a VIP, the restore waits for it to
// answer again, the address the others join at; then each other server
// moves its etcd data aside and joins, one at a time, and every member
// must be healthy before the phases that follow. A restore cut short
// anywhere is redone whole by running it again: each of these steps
// starts from whatever state the last one left.
func Restore(s *session.Session, b backup.Backup, snapshot, token []byte) []step.Phase {
	c := &s.Config.Cluster
	servers := s.Config.Servers()
	first := &backup.VM{Name: servers[0].Name}
	// The k3s phase's view of each server, for the peers' steps and the
	// wait for the VIP.
	vms := make([]*k3s.VM, len(servers))
	for i := range servers {
		vms[i] = &k3s.VM{Spec: k3sSpec(s.Config, i)}
	}
	a := s.Cluster()
	var steps []step.Step
	for _, v := range vms[1:] {
		steps = append(steps, &k3s.Stop{V: v})
	}
	// The restore held, from the reset until every Cluster is paused: k3s
	// starts without its agent and its API server calls no webhook
	// (k3s.HoldPath), the other servers stopped with their pods.
	from, held := b.Dir, filepath.Base(b.Dir)
	if b.S3 != "" {
		from, held = "s3:"+b.S3, "s3:"+b.S3
	}
	reset := &backup.Restore{V: first, B: b, Snapshot: snapshot, Token: token,
		Hold: remote.File{Path: k3s.HoldPath, Content: k3s.RenderHold(from), Mode: 0o600, Owner: "root:root", Sudo: true}}
	if b3 := c.Spec.Backup.S3; b3 != nil {
		reset.Bucket, reset.Folder = b3.Bucket, b3.Folder
	}
	// Every Cluster of the restored state paused and held until restore
	// --resume, before the capi phase that follows, whose resume would
	// otherwise take them for a backup's left-overs; then k3s restarted
	// with its agent, its pods, the providers' managers among them, and,
	// with a VIP, kube-vip, which the other servers join through.
	steps = append(steps, reset, &capi.Hold{C: &capi.Clusters{Name: first.Name, API: a.API}, Backup: held}, &k3s.Release{V: vms[0]})
	var rejoins []*k3s.Rejoin
	if len(servers) > 1 {
		if c.Spec.VIP.Addr.IsValid() {
			steps = append(steps, &k3s.APIAddress{V: vms[0], Addr: c.Spec.VIP.Addr, API: a.API, Timeout: s.WaitTimeout})
		}
		for _, v := range vms[1:] {
			r := &k3s.Rejoin{V: v, Token: token}
			rejoins = append(rejoins, r)
			steps = append(steps, r)
		}
		var names []string
		for _, srv := range servers {
			names = append(names, srv.Name)
		}
		steps = append(steps, &k3s.Members{Name: first.Name, Health: func(ctx context.Context) ([]k3s.MemberHealth, error) {
			return a.EtcdHealth(ctx, names)
		}}, &k3s.StaleNodes{Name: first.Name, Servers: names, API: a.API})
	}
	// What the restored Machines say against what Proxmox has now,
	// reported before the user resumes the Clusters.
	drift := &capi.Drift{Name: servers[0].Node, API: a.API, Node: func(ctx context.Context) (remote.Reader, error) {
		return s.Host(ctx, s.ProxmoxTarget(servers[0]))
	}}
	if s.API() {
		// mgmtctl's own token sees its VMs only: CAPMOX's sees CAPMOX's.
		px := s.Config.Cluster.Spec.Proxmox
		capmox := pve.New(px.APIURL, px.TokenID, s.Config.Secrets.Proxmox.TokenSecret, s.ProxmoxHTTP())
		drift.VMs = capmox.VMs
	}
	steps = append(steps, drift)
	restore := step.Phase{
		Tag: step.TagRestore,
		Prepare: func(ctx context.Context) (string, error) {
			var names []string
			for i, srv := range servers {
				names = append(names, srv.Name)
				h, err := s.DialVM(ctx, srv, false, nil)
				if err != nil {
					return srv.Name, err
				}
				if i == 0 {
					first.Host = h
				}
				vms[i].Host = h
				if err := vms[i].Gather(ctx); err != nil {
					return srv.Name, err
				}
			}
			if b.S3 != "" {
				// A snapshot the bucket does not have is refused here,
				// before the first step stops any server's k3s: stopping
				// two servers of three takes etcd's quorum with them.
				if _, err := backup.FindInBucket(ctx, first.Host, first.Name, reset.Bucket, reset.Folder, b.S3); err != nil {
					return first.Name, err
				}
				tok, err := s3Token(ctx, s, first, b.S3)
				if err != nil {
					return first.Name, err
				}
				reset.Token = tok
				for _, r := range rejoins {
					r.Token = tok
				}
			}
			return strings.Join(names, ","), nil
		},
		Steps: steps,
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

// s3Token is the token a snapshot in the bucket restores under: the one
// the laptop recorded for the cluster at the snapshot's time (KeepToken),
// so it restores onto new servers too; else, with none recorded by then,
// the first server's own (the cluster that took it, still there).
func s3Token(ctx context.Context, s *session.Session, first *backup.VM, name string) ([]byte, error) {
	known, err := backup.ReadTokens(s.BackupDir())
	if err != nil {
		return nil, err
	}
	for _, k := range known {
		s.Redact(k.Token)
	}
	if at, ok := backup.SnapshotTime(name); ok {
		if k, ok := backup.TokenAt(known, at); ok {
			return []byte(k.Token), nil
		}
	}
	tok, err := backup.ReadToken(ctx, first.Host, s.Redact)
	if err != nil {
		return nil, fmt.Errorf("read the cluster token on %s: %w", first.Name, err)
	}
	return tok, nil
}
