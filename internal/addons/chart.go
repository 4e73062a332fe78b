// Package addons holds the addons phase's steps: cert-manager and
// cluster-api-operator installed as k3s HelmChart CRs (files in k3s's
// manifests directory, which k3s applies; its helm-controller then runs
// the helm-install Job), each waited for until it is usable, and the
// operator's provider CRDs established and accepting provider CRs.
package addons

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// ManifestsDir is where k3s's deploy controller picks up manifests
// (k3s pkg/deploy/controller.go; docs/upstream.md §2.5).
const ManifestsDir = "/var/lib/rancher/k3s/server/manifests"

// ChartNamespace holds the HelmChart CRs, as in k3s's docs.
const ChartNamespace = "kube-system"

// Chart is one HelmChart mgmtctl keeps: its name is also the Helm release
// name, so the charts' fullname helpers give the upstream Deployment names.
type Chart struct {
	Name            string
	Chart           string
	Repo            string
	Version         string
	TargetNamespace string
	// ValuesContent is inline values YAML; empty for none.
	ValuesContent string
	// Deployment must be Available for the chart to count as usable.
	Deployment string
}

// Path is the chart's manifest file on the VM.
func (c Chart) Path() string { return ManifestsDir + "/" + c.Name + ".yaml" }

// CertManager is cert-manager with its CRDs, installed through the value
// that v1.15 and later document (crds.enabled; installCRDs is deprecated,
// cert-manager deploy/charts/cert-manager, docs/upstream.md §5). It counts as usable when its webhook is Available.
func CertManager(c config.Chart) Chart {
	return Chart{Name: "cert-manager", Chart: "cert-manager", Repo: c.Repo, Version: c.Version, TargetNamespace: "cert-manager",
		ValuesContent: "crds:\n  enabled: true\n", Deployment: "cert-manager-webhook"}
}

// Operator is cluster-api-operator with no providers in its values: the
// chart would create them in post-install hooks that reach the operator's
// webhook before it serves, since k3s's helm job never passes --wait
// (cluster-api-operator hack/charts, issue #406; docs/upstream.md §4.6).
// mgmtctl applies the
// providers itself in the capi phase.
func Operator(c config.Chart) Chart {
	return Chart{Name: "cluster-api-operator", Chart: "cluster-api-operator", Repo: c.Repo, Version: c.Version,
		TargetNamespace: "capi-operator-system", Deployment: "cluster-api-operator"}
}

// Render is the HelmChart manifest.
func (c Chart) Render() []byte {
	var b bytes.Buffer
	b.WriteString("# Managed by mgmtctl: changes are overwritten on the next apply.\n")
	b.WriteString("apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n")
	fmt.Fprintf(&b, "  name: %s\n  namespace: %s\n", c.Name, ChartNamespace)
	b.WriteString("spec:\n")
	fmt.Fprintf(&b, "  repo: %q\n  chart: %s\n  version: %q\n  targetNamespace: %s\n  createNamespace: true\n", c.Repo, c.Chart, c.Version, c.TargetNamespace)
	if c.ValuesContent != "" {
		b.WriteString("  valuesContent: |-\n")
		for _, l := range strings.Split(strings.TrimRight(c.ValuesContent, "\n"), "\n") {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.Bytes()
}

// VM is what the addons steps share: the VM's host and the cluster.
type VM struct {
	Name string
	Host remote.Reader
	// Cluster is nil in a check run before the cluster exists.
	Cluster func() *kube.Reader
}

// conn is the name of the connection the VM's files are written over:
// the server the run reached the cluster through, or before there is one
// (a check run) the cluster's name.
func (v *VM) conn() string {
	if v.Host == nil {
		return v.Name
	}
	return v.Host.Name()
}

// Manifest writes a chart's HelmChart file when its content differs, then
// (a step.Waiter) waits until the chart is usable, so a chart that fails to
// install fails this step, the one that changed it.
type Manifest struct {
	V *VM
	C Chart
	// Timeout bounds the wait; zero means ChartTimeout.
	Timeout time.Duration
}

var _ step.Waiter = (*Manifest)(nil)

// ID implements step.Step.
func (s *Manifest) ID() string { return s.C.Name + "-chart" }

// Independent implements step.Independent: its Check reads the manifest file on the VM,
// nothing an earlier step left.
func (s *Manifest) Independent() {}

// Host implements step.Step.
func (s *Manifest) Host() string { return s.V.Name }

// Check implements step.Step.
func (s *Manifest) Check(ctx context.Context) (step.Plan, error) {
	var cur []byte
	err := fs.ErrNotExist
	if s.V.Host != nil {
		cur, err = s.V.Host.ReadFile(ctx, s.C.Path(), true)
	}
	action := step.Update
	if errors.Is(err, fs.ErrNotExist) {
		action, cur, err = step.Create, nil, nil
	}
	if err != nil {
		return step.Plan{}, err
	}
	want := s.C.Render()
	if bytes.Equal(cur, want) {
		return step.Plan{Note: s.ready().note()}, nil
	}
	summary := fmt.Sprintf("%s HelmChart %s %s (%s)", action, s.C.Name, s.C.Version, s.C.Path())
	file := remote.File{Path: s.C.Path(), Content: want, Mode: 0o600, Owner: "root:root", Sudo: true}
	return step.Plan{Changes: []step.Change{{Target: s.C.Path(), Action: action, Summary: summary,
		Diff: &step.Diff{Path: s.C.Path(), Before: string(cur), After: string(want)}, Effects: []effect.Effect{effect.Write{Host: s.V.conn(), File: file}}}}}, nil
}

func (s *Manifest) ready() *Ready { return &Ready{C: s.C} }

// Bound implements step.Waiter.
func (s *Manifest) Bound() time.Duration { return orDefault(s.Timeout, ChartTimeout) }

// Observe implements step.Waiter.
func (s *Manifest) Observe(ctx context.Context) (bool, string, error) {
	cl := s.V.Cluster()
	if cl == nil {
		return false, "the cluster does not exist yet", nil
	}
	return s.ready().Observe(ctx, cl)
}

// Wait implements step.Waiter.
func (s *Manifest) Wait(ctx context.Context) error {
	cl := s.V.Cluster()
	if cl == nil {
		return fmt.Errorf("wait for %s: no connection to the cluster", s.C.Name)
	}
	return s.ready().wait(ctx, cl, s.Bound())
}
