package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// A restored management cluster holds the Machines of the snapshot's
// time; Proxmox holds the VMs of now. Their differences are what Cluster
// API's controllers would act on when the Clusters resume (delete a
// Machine whose VM is gone and make another; never see a VM made since),
// so a restore reports them before the user resumes: Drift reads both and
// leaves both alone.

// IPTagPrefix starts the tag CAPMOX gives each VM it made, with its first
// address (`ip_net0_<address>`, CAPMOX v0.9 internal/service/vmservice/
// ip.go, setVMIPAddressTag): how a VM of CAPMOX's is known on Proxmox.
const IPTagPrefix = "ip_net0_"

// InfraGroup is the API group of the infrastructure providers' kinds.
const InfraGroup = "infrastructure.cluster.x-k8s.io"

// machineVersions are Cluster API's Machine versions, newest first;
// proxmoxMachineVersions CAPMOX's (v1alpha2 since v0.8, v1alpha1 before).
var (
	machineVersions        = []string{"v1beta2", "v1beta1"}
	proxmoxMachineVersions = []string{"v1alpha2", "v1alpha1"}
)

// Drift compares every Machine of the management cluster with the
// Proxmox cluster's VMs: Machines whose VM is gone, and VMs tagged by
// CAPMOX that no Machine knows. It reports them as warnings and changes
// nothing.
type Drift struct {
	Name string // the host the step is shown on: the Proxmox node asked
	API  func(ctx context.Context) (*kube.Reader, error)
	// Node connects to a node of the Proxmox cluster, to read its VMs.
	Node func(ctx context.Context) (remote.Reader, error)
	// VMs reads them through the Proxmox API instead (api access: no SSH
	// to any node), with a token that sees CAPMOX's VMs (CAPMOX's own).
	VMs func(ctx context.Context) ([]pve.Resource, error)
}

var _ step.Step = (*Drift)(nil)

// ID implements step.Step.
func (d *Drift) ID() string { return "machine-drift" }

// Host implements step.Step.
func (d *Drift) Host() string { return d.Name }

// ClusterVM is a VM as the Proxmox API's /cluster/resources lists it.
type ClusterVM struct {
	VMID   int    `json:"vmid"`
	Name   string `json:"name"`
	Node   string `json:"node"`
	Status string `json:"status"`
	// Tags are separated by ";" (the API's form of the config's tags).
	Tags     string `json:"tags"`
	Template int    `json:"template"`
}

// CAPMOX reports whether CAPMOX made the VM: it carries CAPMOX's IP tag.
func (v ClusterVM) CAPMOX() (tag string, ok bool) {
	for _, t := range strings.FieldsFunc(v.Tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		if strings.HasPrefix(t, IPTagPrefix) {
			return t, true
		}
	}
	return "", false
}

// MachineVM is a Machine with the VM its ProxmoxMachine names.
type MachineVM struct {
	Machine string // namespace/name
	VMID    int    // 0: no VM yet (still provisioning)
	Node    string // the node CAPMOX placed it on, when it says
}

// Check implements step.Step.
func (d *Drift) Check(ctx context.Context) (step.Plan, error) {
	cl, err := d.API(ctx)
	if err != nil || cl == nil {
		return step.Plan{Skip: "the cluster is not reachable yet"}, err
	}
	machines, err := machineVMs(ctx, cl)
	if err != nil {
		return step.Plan{}, err
	}
	if len(machines) == 0 {
		return step.Plan{Note: "no Machine of CAPMOX's to compare with Proxmox"}, nil
	}
	// A report that cannot be made says so; the restore it ends stands.
	vms, err := d.vms(ctx)
	if err != nil {
		return step.Plan{Warnings: []string{fmt.Sprintf("the Machines were not compared with Proxmox: %v", err)}}, nil
	}
	warnings := Compare(machines, vms)
	p := step.Plan{Warnings: warnings}
	if len(warnings) == 0 {
		p.Note = fmt.Sprintf("%d Machines, each with its VM on Proxmox; no VM of CAPMOX's without a Machine", len(machines))
	}
	return p, nil
}

func (d *Drift) vms(ctx context.Context) ([]ClusterVM, error) {
	if d.VMs != nil {
		res, err := d.VMs(ctx)
		if err != nil {
			return nil, fmt.Errorf("list the Proxmox cluster's VMs: %w", err)
		}
		vms := make([]ClusterVM, len(res))
		for i, r := range res {
			vms[i] = ClusterVM{VMID: r.VMID, Name: r.Name, Node: r.Node, Status: r.Status, Tags: r.Tags, Template: r.Template}
		}
		return vms, nil
	}
	node, err := d.Node(ctx)
	if err != nil {
		return nil, err
	}
	res, err := node.Look(ctx, remote.ClusterVMs())
	if err != nil {
		return nil, fmt.Errorf("list the Proxmox cluster's VMs: %w", err)
	}
	var vms []ClusterVM
	if err := json.Unmarshal([]byte(res.Stdout), &vms); err != nil {
		return nil, fmt.Errorf("read pvesh's list of the cluster's VMs: %w", err)
	}
	return vms, nil
}

// Compare lists the drift between the Machines and the VMs, sorted: a
// Machine whose VM is not in the cluster (or not a VM of CAPMOX's, as a
// VMID taken again since would be), and a VM of CAPMOX's no Machine names.
func Compare(machines []MachineVM, vms []ClusterVM) []string {
	byID := map[int]ClusterVM{}
	for _, v := range vms {
		byID[v.VMID] = v
	}
	var out []string
	known := map[int]bool{}
	for _, m := range machines {
		if m.VMID == 0 {
			continue
		}
		known[m.VMID] = true
		where := ""
		if m.Node != "" {
			where = " on " + m.Node
		}
		v, ok := byID[m.VMID]
		switch _, ours := v.CAPMOX(); {
		case !ok:
			out = append(out, fmt.Sprintf("Machine %s: its VM %d%s is gone from Proxmox", m.Machine, m.VMID, where))
		case !ours:
			out = append(out, fmt.Sprintf("Machine %s: VM %d on %s is %q, not a VM of CAPMOX's (tags %q)", m.Machine, m.VMID, v.Node, v.Name, v.Tags))
		}
	}
	for _, v := range vms {
		if tag, ours := v.CAPMOX(); ours && !known[v.VMID] && v.Template == 0 {
			out = append(out, fmt.Sprintf("VM %d (%s) on %s: made by CAPMOX (tag %s), no Machine knows it", v.VMID, v.Name, v.Node, tag))
		}
	}
	sort.Strings(out)
	return out
}

// machineVMs reads every Machine and the ProxmoxMachine it refers to: one
// List of each, at the newest version the server serves.
func machineVMs(ctx context.Context, cl *kube.Reader) ([]MachineVM, error) {
	_, machines, err := listServed(ctx, cl, ClusterGroup, "machines", machineVersions)
	if err != nil || len(machines) == 0 {
		return nil, err
	}
	_, pms, err := listServed(ctx, cl, InfraGroup, "proxmoxmachines", proxmoxMachineVersions)
	if err != nil {
		return nil, err
	}
	byRef := map[string]*unstructured.Unstructured{}
	for i := range pms {
		byRef[ref(&pms[i])] = &pms[i]
	}
	var out []MachineVM
	for i := range machines {
		m := &machines[i]
		kind, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "kind")
		name, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
		if kind != "ProxmoxMachine" {
			continue // another provider's: not Proxmox's to compare
		}
		mv := MachineVM{Machine: ref(m)}
		if pm := byRef[m.GetNamespace()+"/"+name]; pm != nil {
			id, _, _ := unstructured.NestedInt64(pm.Object, "spec", "virtualMachineID")
			mv.VMID = int(id)
			mv.Node, _, _ = unstructured.NestedString(pm.Object, "status", "proxmoxNode")
		}
		out = append(out, mv)
	}
	return out, nil
}

// listServed lists resource at the first of versions the server serves,
// and says which; none where no version is (the provider is not
// installed). One List per version tried, not a discovery of every API
// group: a converged apply runs it.
func listServed(ctx context.Context, cl *kube.Reader, group, resource string, versions []string) (schema.GroupVersionResource, []unstructured.Unstructured, error) {
	for _, v := range versions {
		gvr := schema.GroupVersionResource{Group: group, Version: v, Resource: resource}
		l, err := cl.Resource(gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return gvr, nil, fmt.Errorf("list the %s: %w", resource, err)
		}
		items := l.Items
		sort.Slice(items, func(i, j int) bool { return ref(&items[i]) < ref(&items[j]) })
		return gvr, items, nil
	}
	return schema.GroupVersionResource{}, nil, nil
}
