package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/labtest"
)

// clusterctl runs upstream's clusterctl on the laptop against the
// management cluster, with the admin kubeconfig mgmtctl wrote. GOPROXY=off
// makes its library read the providers' releases through GitHub's API,
// which the lab's internet serves (docs/lab.md).
func (e *env) clusterctl(vars []string, args ...string) labtest.Result {
	e.t.Helper()
	kc := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt.kubeconfig")
	argv := append([]string{"env", "GOPROXY=off", "KUBECONFIG=" + kc}, vars...)
	return e.Run("", append(append(argv, labtest.Clusterctl(e.t)), args...)...)
}

// The variables cluster-template.yaml of CAPMOX v0.9 requires
// (clusterctl generate cluster --list-variables).
var capmoxTemplateVars = []string{
	"BOOT_VOLUME_DEVICE=scsi0", "BRIDGE=vmbr0", "CONTROL_PLANE_ENDPOINT_IP=192.0.2.100", "DNS_SERVERS=[192.0.2.1]",
	"GATEWAY=192.0.2.1", "IP_PREFIX=24", "NODE_IP_RANGES=[192.0.2.101-192.0.2.120]", "PROXMOX_SOURCENODE=pve",
	"TEMPLATE_VMID=9000", "VM_SSH_KEYS=ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGxhYg lab",
}

// verificationList is the seed's verification list, read from a
// converged lab, with upstream's cluster-api-operator deciding every
// provider condition: the five providers Ready at their pins, installed
// from their releases (the real CRDs in the cluster); the pods, leases
// and Helm releases a user checks; cert-manager's and the operator's own
// logs.
func (e *env) verificationList(t *testing.T) {
	r := e.adminKubectl("get", allProviders, "-A", "-o", `jsonpath={range .items[*]}{.kind}/{.metadata.name}={.status.installedVersion},{.status.conditions[?(@.type=="Ready")].status},{.status.conditions[?(@.type=="ProviderInstalled")].reason}{"\n"}{end}`)
	want := "CoreProvider/cluster-api=v1.12.11,True,ProviderInstalled\nBootstrapProvider/kubeadm=v1.12.11,True,ProviderInstalled\nControlPlaneProvider/kubeadm=v1.12.11,True,ProviderInstalled\n" +
		"InfrastructureProvider/proxmox=v0.9.1,True,ProviderInstalled\nIPAMProvider/in-cluster=v1.1.1,True,ProviderInstalled\n"
	if r.Stdout != want {
		t.Errorf("providers:\n%s\nwant:\n%s%s", r.Stdout, want, r.Stderr)
	}
	// The providers' CRDs, installed by the operator from their releases.
	r = e.adminKubectl("get", "crd", "clusters.cluster.x-k8s.io", "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
		"proxmoxclusters.infrastructure.cluster.x-k8s.io", "inclusterippools.ipam.cluster.x-k8s.io", "-o", `jsonpath={range .items[*]}{.metadata.labels.cluster\.x-k8s\.io/provider}{" "}{end}`)
	if r.Code != 0 || r.Stdout != "cluster-api control-plane-kubeadm bootstrap-kubeadm infrastructure-proxmox ipam-in-cluster " {
		t.Errorf("provider CRDs: %q %s", r.Stdout, r.Stderr)
	}
	// kubectl get pods -A, as the seed's verification runs it: upstream's
	// controllers made each Deployment's ReplicaSet and Pod, the
	// scheduler bound them, the lab's kubelet runs them.
	r = e.adminKubectl("get", "pods", "-A")
	running, completed := map[string]int{}, map[string]int{}
	for _, l := range strings.Split(r.Stdout, "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 4 && f[2] == "1/1" && f[3] == "Running" {
			running[f[0]]++
		} else if len(f) >= 4 && f[2] == "0/1" && f[3] == "Completed" && strings.HasPrefix(f[1], "helm-install-") {
			completed[f[0]]++
		}
	}
	// helm-controller's Jobs ran to completion: upstream's Job
	// controller made their Pods, the kubelet ran klipper-helm's work.
	if completed["kube-system"] != 2 {
		t.Errorf("kubectl get pods -A: %d helm-install Pods Completed in kube-system, want 2 (cert-manager, cluster-api-operator):\n%s", completed["kube-system"], r.Stdout)
	}
	for ns, n := range map[string]int{"cert-manager": 3, "capi-operator-system": 1, "capi-system": 1, "capi-kubeadm-bootstrap-system": 1,
		"capi-kubeadm-control-plane-system": 1, "capmox-system": 1, "capi-ipam-in-cluster-system": 1} {
		if running[ns] != n {
			t.Errorf("kubectl get pods -A: %d of %s's pods Running 1/1, want %d:\n%s%s", running[ns], ns, n, r.Stdout, r.Stderr)
		}
	}
	// cert-manager is upstream's, running: its controller issued the
	// operator chart's Certificate from the chart's self-signed Issuer,
	// and its log is read as a user reads it.
	if r := e.adminKubectl("-n", "capi-operator-system", "get", "issuer/capi-operator-selfsigned-issuer", "certificate/capi-operator-serving-cert",
		"-o", `jsonpath={range .items[*]}{.kind}={.status.conditions[?(@.type=="Ready")].status} {end}`); r.Stdout != "Issuer=True Certificate=True " {
		t.Errorf("the operator's Issuer and Certificate: %q %s", r.Stdout, r.Stderr)
	}
	// The lab was restarted since it converged: the issuing is in the
	// log of the container that ran before (kubectl logs --previous).
	if r := e.adminKubectl("-n", "cert-manager", "logs", "deploy/cert-manager", "--previous"); r.Code != 0 || !strings.Contains(r.Stdout, `"Certificate must be re-issued"`) || !strings.Contains(r.Stdout, "capi-operator-serving-cert") {
		t.Errorf("kubectl logs deploy/cert-manager: nothing of the operator's Certificate:\n%.2000s%s", r.Stdout, r.Stderr)
	}
	// Each pod has an address of its own from its node's pod CIDR (the
	// lab's flannel and CNI plugins, podnet); the API server reaches the
	// operator's webhook there, through its Service's EndpointSlice.
	cidr := e.adminKubectl("get", "node", "lab-mgmt", "-o", "jsonpath={.spec.podCIDR}").Stdout
	opIP := e.adminKubectl("-n", "capi-operator-system", "get", "pods", "-l", "clusterctl.cluster.x-k8s.io/core=capi-operator", "-o", "jsonpath={.items[*].status.podIP}").Stdout
	eps := e.adminKubectl("-n", "capi-operator-system", "get", "endpointslices", "-l", "kubernetes.io/service-name=capi-operator-webhook-service", "-o", "jsonpath={.items[*].endpoints[*].addresses[*]}").Stdout
	if cidr != "10.42.0.0/24" || !strings.HasPrefix(opIP, "10.42.0.") || eps != opIP {
		t.Errorf("pod network: node's pod CIDR %q, operator pod's IP %q, webhook EndpointSlice %q", cidr, opIP, eps)
	}
	if r := e.adminKubectl("get", "replicasets", "-n", "capi-system", "-o", "jsonpath={.items[*].status.readyReplicas}"); r.Stdout != "1" {
		t.Errorf("kubectl get replicasets: %+v", r)
	}
	if r := e.adminKubectl("-n", "kube-system", "get", "lease", "kube-controller-manager", "kube-scheduler", "-o", "jsonpath={.items[*].spec.holderIdentity}"); !strings.HasPrefix(r.Stdout, "lab-mgmt_") {
		t.Errorf("the controller manager's and scheduler's leases: %+v", r)
	}
	// k3s's own leader-elected controllers (helm-controller among
	// them) run under the k3s Lease.
	if r := e.adminKubectl("-n", "kube-system", "get", "lease", "k3s", "-o", "jsonpath={.spec.holderIdentity}"); r.Stdout != "lab-mgmt" {
		t.Errorf("the k3s Lease: %+v", r)
	}
	if r := e.adminKubectl("get", "nodes", "-o", "wide"); r.Code != 0 || !strings.Contains(r.Stdout, "lab-mgmt   Ready    control-plane,etcd") && !strings.Contains(r.Stdout, "lab-mgmt   Ready    control-plane,master") {
		t.Errorf("kubectl get nodes -o wide:\n%s%s", r.Stdout, r.Stderr)
	}
	// helm list -A, Helm's own CLI (built from the Helm module the lab's
	// klipper-helm links) reading the release Secrets: both releases
	// deployed, at the pinned charts, upstream's app versions.
	kcfg := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt.kubeconfig")
	r = e.Run("", labtest.Helm(t), "--kubeconfig", kcfg, "list", "-A")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^cert-manager\s+cert-manager\s+\d+\s+.*\s+deployed\s+cert-manager-v1\.21\.2\s+v1\.21\.2\s*$`),
		regexp.MustCompile(`(?m)^cluster-api-operator\s+capi-operator-system\s+\d+\s+.*\s+deployed\s+cluster-api-operator-0\.28\.0\s+v0\.28\.0\s*$`),
	} {
		if r.Code != 0 || !want.MatchString(r.Stdout) {
			t.Errorf("helm list -A: no line like %s:\n%s%s", want, r.Stdout, r.Stderr)
		}
	}
	if r := e.adminKubectl("get", "secrets", "-A", "-l", "owner=helm,status=deployed", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.labels.name} {end}"); r.Stdout != "capi-operator-system/cluster-api-operator cert-manager/cert-manager " {
		t.Errorf("kubectl get secrets -A -l owner=helm: %+v", r)
	}
	// What Helm rendered from upstream's chart is what it stored.
	if r := e.Run("", labtest.Helm(t), "--kubeconfig", kcfg, "get", "manifest", "-n", "capi-operator-system", "cluster-api-operator"); !strings.Contains(r.Stdout, "name: capi-operator-serving-cert") {
		t.Errorf("helm get manifest cluster-api-operator: %.2000s%s", r.Stdout, r.Stderr)
	}
	// The operator's own log lines, through the API server and the
	// kubelet's API, as the seed's verification reads them.
	// The install is in the log of the container before the restart, the
	// manager's start in both.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{`"starting manager" logger="setup"`}},
		{[]string{"--previous"}, []string{`"starting manager" logger="setup"`, `"Provider successfully installed"`, `CoreProvider="capi-system/cluster-api"`}},
	} {
		r = e.adminKubectl(append([]string{"-n", "capi-operator-system", "logs", "deploy/cluster-api-operator"}, c.args...)...)
		for _, s := range c.want {
			if !strings.Contains(r.Stdout, s) {
				t.Errorf("kubectl logs deploy/cluster-api-operator %v has no %s:\n%.3000s%s", c.args, s, r.Stdout, r.Stderr)
			}
		}
	}
	// --tail and -f: the last line, then what follows (kubectl's
	// follow ends only with the container or the client: timeout ends it).
	if r := e.adminKubectl("-n", "capi-operator-system", "logs", "deploy/cluster-api-operator", "--tail=1"); strings.Count(r.Stdout, "\n") != 1 {
		t.Errorf("kubectl logs --tail=1: %+v", r)
	}
	kc := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt.kubeconfig")
	if r := e.Run("", "timeout", "5", labtest.Kubectl(t), "--kubeconfig", kc, "-n", "capi-operator-system", "logs", "-f", "--tail=2", "deploy/cluster-api-operator"); r.Code != 124 || strings.Count(r.Stdout, "\n") < 2 {
		t.Errorf("kubectl logs -f: want it still following after 5 s with 2 lines or more: %+v", r)
	}

}

// clusterctlReads: upstream's clusterctl reads the management cluster as
// the seed's verification runs it: generate cluster lists its variables,
// fails without them as clusterctl's library fails, and makes manifests
// a server-side dry-run accepts; a schema violation is refused by the real
// CRDs. It returns the manifests' file.
func (e *env) clusterctlReads(t *testing.T) string {
	// clusterctl, as the seed's verification runs it.
	gen := []string{"generate", "cluster", "lab1", "--infrastructure", "proxmox:v0.9.1", "--kubernetes-version", "v1.35.9",
		"--control-plane-machine-count", "1", "--worker-machine-count", "1"}
	r := e.clusterctl(nil, append(gen, "--list-variables")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "Required Variables:") || !strings.Contains(r.Stdout, "  - PROXMOX_SOURCENODE") || !strings.Contains(r.Stdout, "  - TEMPLATE_VMID") {
		t.Fatalf("clusterctl generate --list-variables: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// A missing variable fails as clusterctl's library fails.
	if r = e.clusterctl(nil, gen...); r.Code == 0 || !strings.Contains(r.Stderr, "value for variables [") {
		t.Errorf("generate without variables: exit %d\n%s", r.Code, r.Stderr)
	}
	r = e.clusterctl(capmoxTemplateVars, gen...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "kind: ProxmoxCluster") {
		t.Fatalf("clusterctl generate cluster: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	manifests := filepath.Join(t.TempDir(), "lab1.yaml")
	if err := os.WriteFile(manifests, []byte(r.Stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.adminKubectl("apply", "--dry-run=server", "-f", manifests)
	for _, obj := range []string{"cluster.cluster.x-k8s.io/lab1", "proxmoxcluster.infrastructure.cluster.x-k8s.io/lab1", "kubeadmcontrolplane.controlplane.cluster.x-k8s.io/lab1-control-plane",
		"machinedeployment.cluster.x-k8s.io/lab1-workers", "proxmoxmachinetemplate.infrastructure.cluster.x-k8s.io/lab1-worker", "kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io/lab1-worker"} {
		if !strings.Contains(r.Stdout, obj+" created (server dry run)") {
			t.Errorf("server-side dry-run of the generated cluster: no %s\n%s\n%s", obj, r.Stdout, r.Stderr)
		}
	}
	// A schema violation is refused by the real CRDs.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: ProxmoxCluster\nmetadata:\n  name: bad\n  namespace: default\nspec:\n  dnsServers: not-a-list\n"), 0o644)
	if r := e.adminKubectl("apply", "--dry-run=server", "-f", bad); r.Code == 0 {
		t.Errorf("a ProxmoxCluster with a string for dnsServers was accepted:\n%s", r.Stdout)
	}
	return manifests
}

// inspectorReads: the inspector reads all but Secrets.
func (e *env) inspectorReads(t *testing.T) {
	ro := filepath.Join(e.LaptopHome(), ".kube/lab-mgmt-ro.kubeconfig")
	for _, c := range []struct{ verb, res, want string }{{"list", "pods", "yes"}, {"list", "clusters.cluster.x-k8s.io", "yes"}, {"get", "secrets", "no"}, {"create", "coreproviders", "no"}} {
		if r := e.Run("", labtest.Kubectl(t), "--kubeconfig", ro, "auth", "can-i", c.verb, c.res, "-A"); strings.TrimSpace(r.Stdout) != c.want {
			t.Errorf("inspector can-i %s %s = %q", c.verb, c.res, r.Stdout)
		}
	}
}

// TestVerification is the end of the seed's verification list, what
// writes to a converged lab (its reads are TestConverged's): a Cluster of
// clusterctl's manifests created and described; a rollout of the
// operator; a run that changes nothing with a workload cluster defined;
// a version the operator has not fetched pinned while the internet is
// unreachable, reported with the operator's condition.
func TestVerification(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	gen := []string{"generate", "cluster", "lab1", "--infrastructure", "proxmox:v0.9.1", "--kubernetes-version", "v1.35.9",
		"--control-plane-machine-count", "1", "--worker-machine-count", "1"}
	r := e.clusterctl(capmoxTemplateVars, gen...)
	if r.Code != 0 {
		t.Fatalf("clusterctl generate cluster: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	manifests := filepath.Join(t.TempDir(), "lab1.yaml")
	if err := os.WriteFile(manifests, []byte(r.Stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, e.adminKubectl("apply", "-f", manifests), "create the generated cluster")
	r = e.clusterctl(nil, "describe", "cluster", "lab1")
	if r.Code != 0 || !strings.Contains(r.Stdout, "Cluster/lab1") {
		t.Errorf("clusterctl describe cluster lab1: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}

	opIP := e.adminKubectl("-n", "capi-operator-system", "get", "pods", "-l", "clusterctl.cluster.x-k8s.io/core=capi-operator", "-o", "jsonpath={.items[*].status.podIP}").Stdout
	// A rollout of the operator's Deployment, as `kubectl rollout
	// restart` makes one: upstream's controller starts the new pod beside
	// the old one (each on its own address, both listening on the
	// webhook and probe ports), waits for it to be ready, then stops the
	// old one.
	mustSucceed(t, e.adminKubectl("-n", "capi-operator-system", "rollout", "restart", "deploy/cluster-api-operator"), "rollout restart")
	if r := e.adminKubectl("-n", "capi-operator-system", "rollout", "status", "deploy/cluster-api-operator", "--timeout=180s"); r.Code != 0 || !strings.Contains(r.Stdout, "successfully rolled out") {
		t.Errorf("kubectl rollout status: %+v", r)
	}
	// The old pod may still be terminating (its grace period).
	var pods string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		pods = e.adminKubectl("-n", "capi-operator-system", "get", "pods", "-o", `jsonpath={range .items[*]}{.status.podIP},{.status.containerStatuses[0].ready},{.status.containerStatuses[0].restartCount} {end}`).Stdout
		if len(strings.Fields(pods)) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if f := strings.Fields(pods); len(f) != 1 || strings.HasPrefix(f[0], opIP+",") || !strings.HasSuffix(f[0], ",true,0") {
		t.Errorf("the operator's pods after the rollout: %q (the old one at %s)", pods, opIP)
	}
	// A Cluster in the management cluster changes nothing mgmtctl owns.
	if got := recap(t, e.apply()); !strings.Contains(got, "changed=0") {
		t.Errorf("run with a workload cluster defined: %s", got)
	}

	// The internet unreachable while a version the operator has not
	// fetched is pinned: clusterctl's library retries for a minute, then
	// the operator's condition says why, and mgmtctl reports it.
	if err := e.SetFault("drop-connections", "mirror", true); err != nil {
		t.Fatal(err)
	}
	e.editConfig("  kubeconfig:", providersAt("v1.12.11", "v0.9.0")+"  kubeconfig:")
	r = e.apply("--tags", "capi", "--wait-timeout", "100s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "ProviderInstalled=False ComponentsFetchError: ") || !strings.Contains(r.Stderr, "v0.9.0") {
		t.Errorf("unreachable release: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if err := e.SetFault("drop-connections", "", false); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, e.apply("--tags", "capi"), "the release reachable again")
	if got := e.adminKubectl("get", "infrastructureprovider", "-n", "capmox-system", "proxmox", "-o", "jsonpath={.status.installedVersion}").Stdout; got != "v0.9.0" {
		t.Errorf("infrastructure provider once reachable: %q", got)
	}
}
