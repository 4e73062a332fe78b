package k3s

import (
	"context"
	"errors"
	"io/fs"
)

// Which server founds the cluster and whom the others join are k3s's
// decisions: the phase wires the servers, this file decides.

// FirstServerJoins says, from the servers as gathered, whether the first server joins the cluster rather
// than initialising it: its VM was re-created (no k3s) while other
// servers run the cluster, or it joined once already (its config.yaml
// has server:). cluster-init there would found a second cluster beside
// the first, with its own etcd and its own claim on the VIP.
func FirstServerJoins(ctx context.Context, vms []*VM) (bool, error) {
	first := vms[0]
	if first.Host != nil {
		cur, err := first.Host.ReadFile(ctx, ConfigPath, true)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		if JoinsCluster(cur) {
			return true, nil
		}
	}
	return first.Installed == "" && RunningOther(vms) != nil, nil
}

// RunningOther is the first server after the first that k3s runs on, or
// nil.
func RunningOther(vms []*VM) *VM {
	for _, o := range vms[1:] {
		if o.Installed != "" {
			return o
		}
	}
	return nil
}

// Seed is the server whose cluster token the others join with: the first
// server, unless it joins itself (FirstServerJoins), then the first
// other server k3s runs on.
func Seed(vms []*VM) *VM {
	if vms[0].Spec.Join == "" {
		return vms[0]
	}
	if o := RunningOther(vms); o != nil {
		return o
	}
	return vms[1]
}
