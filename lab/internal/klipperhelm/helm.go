package klipperhelm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	helmtime "helm.sh/helm/v3/pkg/time"

	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// result is one run of the Job's container: what it logged, and helm's
// error if it failed.
type result struct {
	log string
	err error
}

// helm does what klipper-helm's entry does for an install Job: helm
// status, then install or upgrade the release from the repository.
func (c *Runner) helm(ctx context.Context, name string, s Spec) result {
	rels, err := c.releases(ctx, name, s.TargetNamespace)
	if err != nil {
		return result{err: err}
	}
	upgrade := len(rels) > 0 && rels[len(rels)-1].Labels["status"] == "deployed"
	if upgrade && s.ConfigHash != "" && rels[len(rels)-1].Labels[ConfigHashLabel] == s.ConfigHash {
		return result{log: fmt.Sprintf("Release %s is already deployed with config hash %s\n", name, s.ConfigHash)}
	}
	verb, failed := "Installing", "INSTALLATION FAILED"
	if upgrade {
		verb, failed = "Upgrading", "UPGRADE FAILED"
	}
	log := verb + " helm chart\n"
	fail := func(format string, args ...any) result {
		return result{log: log, err: fmt.Errorf("Error: "+failed+": "+format, args...)}
	}
	if c.fault(name) {
		return fail("labsim fault helm-fail is on for %s", name)
	}
	// A chart from no repository (a name the lab's repositories do not
	// hold) is recorded as it is named.
	rel := &release.Release{Name: name, Namespace: s.TargetNamespace, Config: s.Values,
		Chart: &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: s.Chart, Version: s.Version}}}
	if s.Repo != "" {
		r, err := c.renderChart(ctx, name, s)
		var re *RepoError
		if errors.As(err, &re) {
			// helm repo add failed: klipper-helm stops before install.
			return result{log: log, err: fmt.Errorf("Error: %v", err)}
		}
		if err != nil {
			return fail("%v", err)
		}
		rel = r
	}
	if _, err := c.CS.CoreV1().Namespaces().Get(ctx, s.TargetNamespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if !s.CreateNamespace {
			return fail("create: failed to create: namespaces %q not found", s.TargetNamespace)
		}
		if err := simkube.EnsureNamespace(ctx, c.CS, s.TargetNamespace); err != nil {
			return fail("%v", err)
		}
	}
	values := s.Values
	var render func(context.Context, string, Spec, map[string]any, bool) error
	switch s.Chart {
	case "cert-manager":
		render = c.certManager
	case "cluster-api-operator":
		render = c.operator
	default:
		render = func(context.Context, string, Spec, map[string]any, bool) error { return nil }
	}
	if err := render(ctx, name, s, values, upgrade); err != nil {
		return fail("%v", err)
	}
	if err := c.recordRelease(name, s, rel); err != nil {
		return fail("%v", err)
	}
	return result{log: log}
}

// releases lists the release's revisions (Helm's secret driver), oldest
// first.
func (c *Runner) releases(ctx context.Context, release, ns string) ([]corev1.Secret, error) {
	list, err := c.CS.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + release})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		a, _ := strconv.Atoi(items[i].Labels["version"])
		b, _ := strconv.Atoi(items[j].Labels["version"])
		return a < b
	})
	return items, nil
}

// recordRelease stores the release as helm install or upgrade stores it,
// with Helm's own storage on Secrets: a new revision deployed, the one
// deployed before superseded, the Job's config hash as a label.
func (c *Runner) recordRelease(name string, s Spec, rel *release.Release) error {
	st := storage.Init(driver.NewSecrets(c.CS.CoreV1().Secrets(s.TargetNamespace)))
	hist, err := st.History(name)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return err
	}
	rev := 1
	for _, h := range hist {
		rev = max(rev, h.Version+1)
		if h.Info != nil && h.Info.Status == release.StatusDeployed {
			h.Info.Status = release.StatusSuperseded
			if err := st.Update(h); err != nil {
				return err
			}
		}
	}
	now := helmtime.Now()
	rel.Version = rev
	rel.Info = &release.Info{FirstDeployed: now, LastDeployed: now, Status: release.StatusDeployed, Description: "Install complete"}
	if rev > 1 {
		rel.Info.Description = "Upgrade complete"
		if first := hist[0].Info; first != nil {
			rel.Info.FirstDeployed = first.FirstDeployed
		}
	}
	if s.ConfigHash != "" {
		rel.Labels = map[string]string{ConfigHashLabel: s.ConfigHash}
	}
	return st.Create(rel)
}

// fullname is the charts' fullname helper: the release name if it
// contains the chart's name, else <release>-<chart> (docs/upstream.md §4.6, §5).
func fullname(release, chart string) string {
	if strings.Contains(release, chart) {
		return release
	}
	return release + "-" + chart
}

func helmLabels(release, name, component, version string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name": name, "app.kubernetes.io/instance": release, "app.kubernetes.io/component": component,
		"app.kubernetes.io/version": version, "app.kubernetes.io/managed-by": "Helm",
	}
}

func truthy(m map[string]any, path ...string) (bool, bool) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return false, false
		}
		cur, ok = mm[p]
		if !ok {
			return false, false
		}
	}
	b, ok := cur.(bool)
	return b, ok
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// certManager renders the cert-manager chart (docs/upstream.md §5).
func (c *Runner) certManager(ctx context.Context, release string, s Spec, values map[string]any, _ bool) error {
	crdsEnabled, _ := truthy(values, "crds", "enabled")
	installCRDs, _ := truthy(values, "installCRDs")
	keep, keepSet := truthy(values, "crds", "keep")
	if crdsEnabled && installCRDs {
		return fmt.Errorf("execution error at (cert-manager/templates/crds.yaml): ERROR: the deprecated .installCRDs option cannot be enabled at the same time as its replacement .crds.enabled")
	}
	if installCRDs && keepSet && !keep {
		return fmt.Errorf("execution error at (cert-manager/templates/crds.yaml): ERROR: .crds.keep is not compatible with .installCRDs, please use .crds.enabled and .crds.keep instead")
	}
	if crdsEnabled || installCRDs {
		// cert-manager's own CRDs (fixtures/crds/cert-manager, v1.21.2's
		// deploy/crds), so a Certificate or Issuer is validated as
		// upstream validates it; kept on uninstall unless crds.keep is
		// false.
		ann := map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": s.TargetNamespace}
		if !keepSet || keep {
			ann["helm.sh/resource-policy"] = "keep"
		}
		if err := c.applyFixtureCRDs(ctx, "cert-manager", ann); err != nil {
			return err
		}
	}
	fn := fullname(release, "cert-manager")
	for _, d := range []struct{ suffix, component, image string }{
		{"", "controller", "quay.io/jetstack/cert-manager-controller"},
		{"-cainjector", "cainjector", "quay.io/jetstack/cert-manager-cainjector"},
		{"-webhook", "webhook", "quay.io/jetstack/cert-manager-webhook"},
	} {
		name := strings.TrimPrefix(d.suffix, "-")
		if name == "" {
			name = "cert-manager"
		} else {
			name = "cert-manager-" + name
		}
		if err := simkube.ApplyDeployment(ctx, c.CS, simkube.Deployment{Namespace: s.TargetNamespace, Name: fn + d.suffix,
			Labels: helmLabels(release, name, d.component, s.Version), Image: d.image + ":" + s.Version}); err != nil {
			return err
		}
	}
	return nil
}

// operator renders the cluster-api-operator chart (docs/upstream.md §4.6):
// its CRDs (the real ones, kept on uninstall), the operator Deployment,
// and the Certificate and Issuer that need cert-manager first.
func (c *Runner) operator(ctx context.Context, release string, s Spec, values map[string]any, upgrade bool) error {
	var missing []string
	for _, k := range []struct{ name, kind, plural string }{{"capi-operator-serving-cert", "Certificate", "certificates"}, {"capi-operator-selfsigned-issuer", "Issuer", "issuers"}} {
		if _, err := c.DC.Resource(crdGVR).Get(ctx, k.plural+".cert-manager.io", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			missing = append(missing, fmt.Sprintf("resource mapping not found for name: %q namespace: %q from \"\": no matches for kind %q in version \"cert-manager.io/v1\"\nensure CRDs are installed first", k.name, s.TargetNamespace, k.kind))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("unable to build kubernetes objects from release manifest: [%s]", strings.Join(missing, ", "))
	}
	// Helm refuses to take over an object another release owns, before
	// it creates any object of this one.
	if err := c.webhookOwnership(ctx, release); err != nil {
		return err
	}
	// config/chart/patches/keep-crds.yaml, and Helm's ownership marks.
	if err := c.applyFixtureCRDs(ctx, "cluster-api-operator", map[string]string{"helm.sh/resource-policy": "keep",
		"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": s.TargetNamespace}); err != nil {
		return err
	}
	fn := fullname(release, "cluster-api-operator")
	if err := c.operatorRBAC(ctx, release, s.TargetNamespace); err != nil {
		return err
	}
	version := "v" + strings.TrimPrefix(s.Version, "v")
	labels := helmLabels(release, "cluster-api-operator", "manager", version)
	labels["control-plane"] = "controller-manager"
	labels["clusterctl.cluster.x-k8s.io/core"] = "capi-operator"
	if err := simkube.ApplyDeployment(ctx, c.CS, operatorDeployment(release, s.TargetNamespace, fn, version, labels)); err != nil {
		return err
	}
	if err := c.operatorWebhooks(ctx, release, s.TargetNamespace); err != nil {
		return err
	}
	// Providers in the chart's values are created by post-install (and
	// post-upgrade) hooks; klipper-helm installs without --wait, so the
	// hook reaches the operator's webhook before it serves (upstream #406).
	hook := "post-install"
	if upgrade {
		hook = "post-upgrade"
	}
	hooks := true
	if v, ok := truthy(values, "enableHelmHook"); ok {
		hooks = v
	}
	for _, kind := range []struct{ key, kind, file string }{{"core", "coreprovider", "core.yaml"}, {"bootstrap", "bootstrapprovider", "bootstrap.yaml"},
		{"controlPlane", "controlplaneprovider", "control-plane.yaml"}, {"infrastructure", "infrastructureprovider", "infra.yaml"},
		{"ipam", "ipamprovider", "ipam.yaml"}, {"addon", "addonprovider", "addon.yaml"}} {
		if m, ok := values[kind.key].(map[string]any); ok && len(m) > 0 && hooks {
			return fmt.Errorf("failed %s: warning: Hook %s cluster-api-operator/templates/%s failed: 1 error occurred:\n\t* Internal error occurred: failed calling webhook \"v%s.kb.io\": failed to call webhook: Post \"https://capi-operator-webhook-service.%s.svc:443/validate-operator-cluster-x-k8s-io-v1alpha2-%s?timeout=10s\": dial tcp 10.43.0.10:443: connect: connection refused",
				hook, hook, kind.file, kind.kind, s.TargetNamespace, kind.kind)
		}
	}
	return nil
}

// applyFixtureCRDs installs the real CRDs of fixtures/crds/<dir> with
// annotations added.
func (c *Runner) applyFixtureCRDs(ctx context.Context, dir string, annotations map[string]string) error {
	files, _ := filepath.Glob(filepath.Join(c.LabDir, "crds", dir, "*.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("the lab has no %s CRDs in %s", dir, filepath.Join(c.LabDir, "crds"))
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		for k, v := range annotations {
			ann[k] = v
		}
		u.SetAnnotations(ann)
		if err := c.applyCRD(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// applyCRD installs a CRD and waits until it is Established, as Helm's
// install does for CRDs before the rest of a release.
func (c *Runner) applyCRD(ctx context.Context, u *unstructured.Unstructured) error {
	return simkube.ApplyCRD(ctx, c.DC, u, "helm", 30*time.Second)
}

// operatorDeployment is the chart's Deployment with its default values
// (hack/charts/cluster-api-operator/templates/deployment.yaml and
// values.yaml of cluster-api-operator v0.28.0): the manager's args, the
// webhook certificate's volume, the probes on healthAddr. The lab's
// kubelet runs it and reports its availability.
func operatorDeployment(release, ns, name, version string, labels map[string]string) simkube.Deployment {
	sel := map[string]string{"app.kubernetes.io/name": "cluster-api-operator", "app.kubernetes.io/instance": release,
		"app.kubernetes.io/component": "controller", "control-plane": "controller-manager", "clusterctl.cluster.x-k8s.io/core": "capi-operator"}
	probe := func(path string, delay int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(9440), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	}
	grace, auto, mode := int64(10), true, int32(420)
	image := "registry.k8s.io/capi-operator/cluster-api-operator:" + version
	pod := &corev1.PodSpec{
		ServiceAccountName: "capi-operator-manager", AutomountServiceAccountToken: &auto, TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name: "manager", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/manager"},
			Args: []string{"--v=2", "--health-addr=:9440", "--diagnostics-address=:8443", "--leader-elect=true"},
			Ports: []corev1.ContainerPort{{ContainerPort: WebhookPort, Name: "webhook-server", Protocol: corev1.ProtocolTCP},
				{ContainerPort: 8443, Name: "diagnostics", Protocol: corev1.ProtocolTCP}},
			VolumeMounts:             []corev1.VolumeMount{{Name: "cert", MountPath: "/tmp/k8s-webhook-server/serving-certs", ReadOnly: true}},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			LivenessProbe:            probe("/healthz", 15), ReadinessProbe: probe("/readyz", 5),
		}},
		Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: WebhookCertSecret, DefaultMode: &mode}}}},
	}
	return simkube.Deployment{Namespace: ns, Name: name, Labels: labels, Image: image, Pod: pod, Selector: sel}
}

// operatorRBAC is the chart's ServiceAccount and RBAC for the manager
// (config/rbac of cluster-api-operator v0.28.0, kustomize namePrefix
// capi-operator-): every verb on every resource, as it installs
// providers' CRDs and RBAC, and its leader election's Role.
func (c *Runner) operatorRBAC(ctx context.Context, release, ns string) error {
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}}
	}
	sa := "capi-operator-manager"
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	objs := []func() error{
		func() error {
			_, err := c.CS.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta(sa, ns)}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CS.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta("capi-operator-manager-role", ""),
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CS.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta("capi-operator-manager-rolebinding", ""),
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "capi-operator-manager-role"}, Subjects: subjects}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CS.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: meta("capi-operator-leader-election-role", ns),
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
					{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CS.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta("capi-operator-leader-election-rolebinding", ns),
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "capi-operator-leader-election-role"}, Subjects: subjects}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}
