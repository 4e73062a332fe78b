package e2e

import (
	"fmt"
	"regexp"
)

var stepLine = regexp.MustCompile(`(?m)^\w+: \[([^\]]+)\] ([a-z0-9]+)/([a-z0-9-]+)`)

// phaseSteps is each step of phase in a run's text output, as step@host,
// in the order they ran (gather-facts left out).
func phaseSteps(out, phase string) []string {
	var steps []string
	for _, m := range stepLine.FindAllStringSubmatch(out, -1) {
		if m[2] == phase && m[3] != "gather-facts" {
			steps = append(steps, m[3]+"@"+m[1])
		}
	}
	return steps
}

// staleServer is a server's Node the backup holds and the config does not
// have: a server since removed, whose Node the restore brings back.
const staleServer = `apiVersion: v1
kind: Node
metadata:
  name: lab-mgmt-old
  labels:
    node-role.kubernetes.io/etcd: "true"
`

// workloadMachines are a Cluster with two Machines, as CAPMOX's cluster
// template makes them (Cluster API v1beta2, CAPMOX v1alpha2, the real
// CRDs), each ProxmoxMachine naming the VM CAPMOX made for it.
const workloadMachines = `apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: lab1
  namespace: default
spec:
  clusterNetwork:
    serviceDomain: cluster.local
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: lab1-cp-1
  namespace: default
spec:
  clusterName: lab1
  bootstrap:
    dataSecretName: lab1-cp-1
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxMachine
    name: lab1-cp-1
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: lab1-w-1
  namespace: default
spec:
  clusterName: lab1
  bootstrap:
    dataSecretName: lab1-w-1
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ProxmoxMachine
    name: lab1-w-1
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
kind: ProxmoxMachine
metadata:
  name: lab1-cp-1
  namespace: default
spec:
  sourceNode: pve1
  templateID: 9000
  virtualMachineID: 201
  network:
    networkDevices:
      - name: net0
        bridge: vmbr0
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
kind: ProxmoxMachine
metadata:
  name: lab1-w-1
  namespace: default
spec:
  sourceNode: pve1
  templateID: 9000
  virtualMachineID: 202
  network:
    networkDevices:
      - name: net0
        bridge: vmbr0
`

// capmoxVM makes VM id on node as CAPMOX's clone leaves it: named after
// its Machine, tagged with its address (CAPMOX's ip_net0_ tag).
func (e *env) capmoxVM(node string, id int, name, ip string) {
	e.t.Helper()
	if r := e.OnNode(node, fmt.Sprintf("qm create %d --name %s --cores 2 --memory 2048 --tags ip_net0_%s", id, name, ip)); r.Code != 0 {
		e.t.Fatalf("qm create %d on %s: %+v", id, node, r)
	}
}
