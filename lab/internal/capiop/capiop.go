// Package capiop is the lab's cluster-api-operator (v0.28.0,
// upstream-facts 4): while the operator's Deployment (installed by its
// chart) is Available, it reconciles the provider CRs: finalizer first,
// then upstream's preflight rules, then the provider's release fetched
// from the mirror (metadata.yaml for the contract, the components with the
// configSecret's variables substituted), stored in the ConfigMap and cache
// Secret upstream names, installed into the CR's namespace, and Ready
// mirrored from the provider Deployment's Available condition. The
// configSecret is read when the provider is (re)installed and not watched,
// as upstream.
package capiop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/lab/internal/catalog"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// Group and version of the operator's CRs.
const (
	Group     = "operator.cluster.x-k8s.io"
	Version   = "v1alpha2"
	finalizer = "provider.cluster.x-k8s.io"
	// specHash is the annotation upstream puts on the provider and its
	// cache Secret.
	specHash = "operator.cluster.x-k8s.io/applied-spec-hash"
)

// Kinds maps each provider kind to its plural and the type prefix its
// cache and ConfigMap names carry (upstream-facts 4.1).
var Kinds = []struct{ Kind, Plural, Type string }{
	{"CoreProvider", "coreproviders", "core"},
	{"BootstrapProvider", "bootstrapproviders", "bootstrap"},
	{"ControlPlaneProvider", "controlplaneproviders", "control-plane"},
	{"InfrastructureProvider", "infrastructureproviders", "infrastructure"},
	{"IPAMProvider", "ipamproviders", "ipam"},
}

// Operator reconciles provider CRs.
type Operator struct {
	CS     kubernetes.Interface
	DC     dynamic.Interface
	LabDir string
	HTTP   *http.Client
	Log    io.Writer
	// NodeIP is where the operator's "pod" serves its webhooks.
	NodeIP string
}

func gvr(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: Version, Resource: plural}
}

// Run reconciles until ctx ends.
func (o *Operator) Run(ctx context.Context) {
	t := simkube.NewTrigger()
	for _, k := range Kinds {
		go simkube.Watch(ctx, o.DC, gvr(k.Plural), t)
	}
	go simkube.Watch(ctx, o.DC, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, t)
	go o.serveWebhooks(ctx)
	simkube.Loop(ctx, t, 3*time.Second, o.reconcileAll)
}

func (o *Operator) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "time=%q level=info msg=%q\n", time.Now().UTC().Format(time.RFC3339), "capi-operator: "+fmt.Sprintf(format, args...))
	}
}

// running reports whether the operator's own Deployment is Available:
// without it nothing reconciles providers, as upstream.
func (o *Operator) running(ctx context.Context) bool { return o.operatorNamespace(ctx) != "" }

type provider struct {
	*unstructured.Unstructured
	plural, typ string
}

func (o *Operator) reconcileAll(ctx context.Context) {
	start := time.Now()
	defer func() {
		if d := time.Since(start); d > 500*time.Millisecond {
			o.logf("slow reconcile pass: %s", d.Round(time.Millisecond))
		}
	}()
	if !o.running(ctx) {
		return
	}
	var all []provider
	for _, k := range Kinds {
		list, err := o.DC.Resource(gvr(k.Plural)).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range list.Items {
			all = append(all, provider{&list.Items[i], k.Plural, k.Type})
		}
	}
	for _, p := range all {
		if err := o.reconcile(ctx, p, all); err != nil {
			o.logf("reconcile %s %s/%s: %v", p.GetKind(), p.GetNamespace(), p.GetName(), err)
		}
	}
}

func (o *Operator) client(p provider) dynamic.ResourceInterface {
	return o.DC.Resource(gvr(p.plural)).Namespace(p.GetNamespace())
}

// condition is a metav1.Condition as the operator writes it.
type condition struct {
	Type, Status, Reason, Message string
}

func (o *Operator) reconcile(ctx context.Context, p provider, all []provider) error {
	if p.GetDeletionTimestamp() != nil {
		return o.remove(ctx, p)
	}
	if !contains(p.GetFinalizers(), finalizer) {
		// The first reconcile only adds the finalizer.
		p.SetFinalizers(append(p.GetFinalizers(), finalizer))
		_, err := o.client(p).Update(ctx, p.Unstructured, metav1.UpdateOptions{})
		return err
	}
	version, _, _ := unstructured.NestedString(p.Object, "spec", "version")
	installed, _, _ := unstructured.NestedString(p.Object, "status", "installedVersion")
	if og, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration"); og != p.GetGeneration() {
		o.logf("reconciling %s %s/%s generation %d (spec.version %s)", p.GetKind(), p.GetNamespace(), p.GetName(), p.GetGeneration(), version)
	}
	var conds []condition
	set := func(c condition) { conds = append(conds, c) }

	// Preflight (internal/controller/preflight_checks.go).
	if c, ok := o.preflight(ctx, p, all, version, installed); !ok {
		set(c)
		return o.writeStatus(ctx, p, conds, nil, true)
	}
	secretData, err := o.configSecret(ctx, p)
	if err != nil {
		// No condition: the reconcile errors and is retried.
		return fmt.Errorf("failed to get providers secret: %w", err)
	}
	set(condition{"PreflightCheckPassed", "True", "PreflightChecksPassed", "All preflight checks passed"})

	hash := appliedHash(p, secretData)
	status := map[string]any{}
	if p.GetAnnotations()[specHash] != hash || installed != version {
		if cache := o.fromCache(ctx, p, version, hash); cache != "" {
			// ApplyFromCache completes the reconcile: the cached
			// components are applied and nothing else runs, so
			// installedVersion stays where it was. An old cache Secret
			// whose hash matches again (a version that was installed
			// before) leaves an upgrade stuck like this (upstream #873,
			// #1075).
			o.logf("applied %s %s/%s from cache %s", p.GetKind(), p.GetNamespace(), p.GetName(), cache)
			if err := o.annotate(ctx, p, hash); err != nil {
				return err
			}
			set(condition{"ProviderInstalled", "True", "ProviderInstalled", "Provider installed successfully"})
			set(o.health(ctx, p))
			return o.writeStatus(ctx, p, conds, nil, true)
		}
		prov, _ := catalog.Lookup(p.typ, p.GetName())
		contract, ierr := o.install(ctx, p, prov, version, secretData, hash)
		if ierr != nil {
			set(condition{"ProviderInstalled", "False", ierr.reason, ierr.msg})
			return o.writeStatus(ctx, p, conds, nil, false)
		}
		if installed != "" && installed != version {
			set(condition{"ProviderUpgraded", "True", "ProviderUpgraded", "Provider upgraded successfully"})
		}
		status["installedVersion"], status["contract"] = version, contract
		// The hash lands on the CR once it is installed.
		fresh, err := o.client(p).Get(ctx, p.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if fresh.GetGeneration() != p.GetGeneration() {
			// The spec changed while this one installed: the next pass
			// installs the new one.
			return nil
		}
		p.Unstructured = fresh
		if err := o.annotate(ctx, p, hash); err != nil {
			return err
		}
		o.logf("installed %s %s/%s %s", p.GetKind(), p.GetNamespace(), p.GetName(), version)
	} else if o.health(ctx, p).Status != "True" {
		o.restart(ctx, p)
	}
	set(condition{"ProviderInstalled", "True", "ProviderInstalled", "Provider installed successfully"})
	set(o.health(ctx, p))
	return o.writeStatus(ctx, p, conds, status, true)
}

// restart is the kubelet restarting an unavailable provider's container:
// it comes up once what kept it down is gone (the provider-never-ready
// fault switched off, CAPMOX's credentials accepted by Proxmox again).
func (o *Operator) restart(ctx context.Context, p provider) {
	prov, ok := catalog.Lookup(p.typ, p.GetName())
	if !ok {
		return
	}
	d, err := o.CS.AppsV1().Deployments(p.GetNamespace()).Get(ctx, prov.Deployment, metav1.GetOptions{})
	if err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return
	}
	var creds map[string]string
	if len(prov.Variables) > 0 {
		sec, err := o.CS.CoreV1().Secrets(p.GetNamespace()).Get(ctx, "capmox-manager-credentials", metav1.GetOptions{})
		if err != nil {
			return
		}
		creds = map[string]string{}
		for k, v := range sec.Data {
			creds[k] = string(v)
		}
	}
	av := o.availability(ctx, prov, creds)
	if !av.Available {
		return
	}
	var owner *metav1.OwnerReference
	if len(d.OwnerReferences) > 0 {
		owner = &d.OwnerReferences[0]
	}
	if err := simkube.ApplyDeployment(ctx, o.CS, simkube.Deployment{Namespace: d.Namespace, Name: d.Name, Labels: d.Labels,
		Image: d.Spec.Template.Spec.Containers[0].Image, Owner: owner}, av); err != nil {
		o.logf("restart %s: %v", d.Name, err)
		return
	}
	o.logf("%s/%s is Available after a restart", d.Namespace, d.Name)
}

// fromCache is upstream's ApplyFromCache: a cache Secret for spec.version
// whose applied-spec-hash equals the provider's hash is used as is. It
// returns the Secret's name when it was.
func (o *Operator) fromCache(ctx context.Context, p provider, version, hash string) string {
	name := fmt.Sprintf("%s-%s-%s-cache", p.typ, p.GetName(), version)
	sec, err := o.CS.CoreV1().Secrets(p.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil || sec.Annotations[specHash] != hash {
		return ""
	}
	return name
}

// annotate puts the applied-spec-hash on the provider CR.
func (o *Operator) annotate(ctx context.Context, p provider, hash string) error {
	ann := p.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	if ann[specHash] == hash {
		return nil
	}
	ann[specHash] = hash
	p.SetAnnotations(ann)
	u, err := o.client(p).Update(ctx, p.Unstructured, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	p.Unstructured.Object = u.Object
	return nil
}

// health mirrors the provider Deployment's Available condition into Ready
// (internal/controller/healthcheck).
func (o *Operator) health(ctx context.Context, p provider) condition {
	prov, _ := catalog.Lookup(p.typ, p.GetName())
	list, err := o.CS.AppsV1().Deployments(p.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: "cluster.x-k8s.io/provider=" + prov.Label()})
	if err == nil {
		for _, d := range list.Items {
			owned := false
			for _, r := range d.OwnerReferences {
				owned = owned || r.Kind == p.GetKind()
			}
			if !owned {
				continue
			}
			for _, c := range d.Status.Conditions {
				if c.Type == "Available" {
					reason := c.Reason
					if reason == "" {
						reason = "DeploymentAvailable"
					}
					return condition{"Ready", string(c.Status), reason, c.Message}
				}
			}
		}
	}
	return condition{"Ready", "False", "NoDeploymentAvailableConditionReason", "No minimum availability condition found on the provider deployment"}
}

var semverRE = regexp.MustCompile(`^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func parseSemver(v string) ([3]int, bool) {
	m := semverRE.FindStringSubmatch(v)
	if m == nil {
		return [3]int{}, false
	}
	var out [3]int
	for i := 0; i < 3; i++ {
		out[i], _ = strconv.Atoi(m[i+1])
	}
	return out, true
}

// predefined are providers clusterctl knows by name (no fetchConfig needed).
func predefined(typ, name string) bool {
	_, ok := catalog.Lookup(typ, name)
	return ok
}

func (o *Operator) preflight(ctx context.Context, p provider, all []provider, version, installed string) (condition, bool) {
	fail := func(reason, msg string) (condition, bool) {
		return condition{"PreflightCheckPassed", "False", reason, msg}, false
	}
	if version != "" {
		v, ok := parseSemver(version)
		if !ok {
			return fail("IncorrectVersionFormat", fmt.Sprintf("could not parse %q as version", version))
		}
		if iv, ok := parseSemver(installed); ok && (v[0] < iv[0] || v[0] == iv[0] && v[1] < iv[1]) {
			return fail("UnsupportedProviderDowngradeReason", "Downgrade is not supported for provider %s")
		}
	}
	if p.typ == "core" && p.GetName() != "cluster-api" {
		return fail("IncorrectCoreProviderNameReason", fmt.Sprintf("Incorrect CoreProvider name: %s. It should be cluster-api", p.GetName()))
	}
	_, hasFetch, _ := unstructured.NestedMap(p.Object, "spec", "fetchConfig")
	if !hasFetch && !predefined(p.typ, p.GetName()) {
		return fail("FetchConfigValidationError", "Either Selector, OCI URL or provider URL must be provided for a not predefined provider")
	}
	for _, other := range all {
		if other.GetUID() == p.GetUID() || other.typ != p.typ {
			continue
		}
		if p.typ == "core" {
			return fail("MoreThanOneExists", "CoreProvider already exists in the cluster. Only one is allowed.")
		}
		if other.GetName() == p.GetName() {
			return fail("MoreThanOneExists", fmt.Sprintf("There is already a %s with name %s in the cluster. Only one is allowed.", other.GetName(), other.GetNamespace()))
		}
	}
	if p.typ != "core" {
		coreReady := false
		for _, other := range all {
			if other.typ == "core" && conditionStatus(other.Unstructured, "Ready") == "True" {
				coreReady = true
			}
		}
		if !coreReady {
			return fail("WaitingForCoreProviderReady", "Waiting for the CoreProvider to be installed.")
		}
	}
	return condition{}, true
}

func conditionStatus(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// configSecret reads the provider's configSecret (namespace defaulted to
// the provider's, as the operator's webhook does), or nil without one.
func (o *Operator) configSecret(ctx context.Context, p provider) (map[string]string, error) {
	name, _, _ := unstructured.NestedString(p.Object, "spec", "configSecret", "name")
	if name == "" {
		return nil, nil
	}
	ns, _, _ := unstructured.NestedString(p.Object, "spec", "configSecret", "namespace")
	if ns == "" {
		ns = p.GetNamespace()
	}
	s, err := o.CS.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

func appliedHash(p provider, secret map[string]string) string {
	spec, _, _ := unstructured.NestedMap(p.Object, "spec")
	b, _ := json.Marshal(spec)
	h := sha256.New()
	h.Write(b)
	keys := make([]string, 0, len(secret))
	for k := range secret {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, secret[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

type installErr struct{ reason, msg string }

func (o *Operator) get(ctx context.Context, url string) ([]byte, error) {
	b, err := simkube.Fetch(ctx, o.HTTP, url)
	var se *simkube.StatusError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("failed to download %q: %s", url, se.Status)
	}
	return b, err
}

var varRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:=([^}]*))?\}`)

// install fetches, stores and applies the provider's components
// (DownloadManifests, Load, Fetch, Store, Upgrade/Install).
func (o *Operator) install(ctx context.Context, p provider, prov catalog.Provider, version string, vars map[string]string, hash string) (string, *installErr) {
	if prov.Name == "" {
		return "", &installErr{"UnknownProvider", "unknown provider " + p.GetName()}
	}
	meta, err := o.get(ctx, prov.AssetURL(version, "metadata.yaml"))
	if err != nil {
		return "", &installErr{"ComponentsFetchError", fmt.Sprintf("failed to read %q from provider's repository %q: %v", "metadata.yaml", prov.Label(), err)}
	}
	comps, err := o.get(ctx, prov.AssetURL(version, prov.Components))
	if err != nil {
		return "", &installErr{"ComponentsFetchError", fmt.Sprintf("failed to read %q from provider's repository %q: %v", prov.Components, prov.Label(), err)}
	}
	v, _ := parseSemver(version)
	var md struct {
		ReleaseSeries []struct {
			Major, Minor int
			Contract     string
		} `json:"releaseSeries"`
	}
	_ = yaml.Unmarshal(meta, &md)
	contract := ""
	for _, rs := range md.ReleaseSeries {
		if rs.Major == v[0] && rs.Minor == v[1] {
			contract = rs.Contract
		}
	}
	if contract != "v1beta1" && contract != "v1beta2" {
		return "", &installErr{"CAPIVersionIncompatibility", fmt.Sprintf("current version of the provider %s is not compatible with the v1beta2 contract (%q)", prov.Label(), contract)}
	}
	var missing []string
	text := varRE.ReplaceAllStringFunc(string(comps), func(m string) string {
		g := varRE.FindStringSubmatch(m)
		if val, ok := vars[g[1]]; ok {
			return val
		}
		if g[2] != "" {
			return g[3]
		}
		missing = append(missing, g[1])
		return m
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", &installErr{"ComponentsFetchError", fmt.Sprintf("value for variables [%s] is not set. Please set the value using os environment variables or the clusterctl config file", strings.Join(missing, ", "))}
	}
	ns := p.GetNamespace()
	yes := true
	owner := metav1.OwnerReference{APIVersion: Group + "/" + Version, Kind: p.GetKind(), Name: p.GetName(), UID: p.GetUID(), Controller: &yes}
	labels := map[string]string{"provider.cluster.x-k8s.io/version": version, "provider.cluster.x-k8s.io/type": p.typ, "provider.cluster.x-k8s.io/name": p.GetName()}
	base := fmt.Sprintf("%s-%s-%s", p.typ, p.GetName(), version)
	if err := o.upsertConfigMap(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: base, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Data: map[string]string{"metadata": string(meta), "components": string(comps)}}); err != nil {
		return "", &installErr{"ComponentsFetchError", err.Error()}
	}
	if err := o.upsertSecret(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: base + "-cache", Namespace: ns, Labels: labels,
		Annotations: map[string]string{specHash: hash}, OwnerReferences: []metav1.OwnerReference{owner}},
		Data: map[string][]byte{"cache": []byte(text)}}); err != nil {
		return "", &installErr{"InstallFailed", err.Error()}
	}
	var creds map[string]string
	for _, doc := range strings.Split(text, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		switch u.GetKind() {
		case "Namespace":
			// Filtered: the provider's namespace already exists.
		case "Secret":
			data, _, _ := unstructured.NestedStringMap(obj, "stringData")
			creds = data
			b := map[string][]byte{}
			for k, v := range data {
				b[k] = []byte(v)
			}
			if err := o.upsertSecret(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: ns, Labels: u.GetLabels(),
				OwnerReferences: []metav1.OwnerReference{owner}}, Data: b}); err != nil {
				return "", &installErr{"InstallFailed", err.Error()}
			}
		case "Deployment":
			img := ""
			if cs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers"); len(cs) > 0 {
				img, _ = cs[0].(map[string]any)["image"].(string)
			}
			av := o.availability(ctx, prov, creds)
			if err := simkube.ApplyDeployment(ctx, o.CS, simkube.Deployment{Namespace: ns, Name: u.GetName(), Labels: u.GetLabels(), Image: img, Owner: &owner}, av); err != nil {
				return "", &installErr{"InstallFailed", err.Error()}
			}
		}
	}
	return contract, nil
}

// availability is how the provider's pod fares: the provider-never-ready
// fault keeps it down, and CAPMOX's manager exits when the Proxmox API
// refuses its credentials, so its Deployment never becomes Available.
func (o *Operator) availability(ctx context.Context, prov catalog.Provider, creds map[string]string) simkube.Availability {
	if b, err := os.ReadFile(filepath.Join(o.LabDir, "faults", "provider-never-ready")); err == nil {
		v := strings.TrimSpace(string(b))
		if v == "" || v == prov.Name || v == prov.Label() {
			return simkube.Availability{Message: "Deployment does not have minimum availability."}
		}
	}
	if creds == nil {
		return simkube.Availability{Available: true}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(creds["url"], "/")+"/api2/json/version", nil)
	if err != nil {
		return simkube.Availability{Message: "manager exited: invalid PROXMOX_URL: " + err.Error()}
	}
	req.Header.Set("Authorization", "PVEAPIToken="+creds["token"]+"="+creds["secret"])
	hc := o.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return simkube.Availability{Message: "manager exited: unable to connect to Proxmox: " + err.Error()}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return simkube.Availability{Message: "manager exited: unable to initialize Proxmox client: " + resp.Status}
	}
	return simkube.Availability{Available: true}
}

func (o *Operator) upsertConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	c := o.CS.CoreV1().ConfigMaps(cm.Namespace)
	if _, err := c.Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = c.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	} else {
		return err
	}
}

func (o *Operator) upsertSecret(ctx context.Context, s *corev1.Secret) error {
	c := o.CS.CoreV1().Secrets(s.Namespace)
	if _, err := c.Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = c.Update(ctx, s, metav1.UpdateOptions{})
		return err
	} else {
		return err
	}
}

// remove deletes what the provider installed (the lab has no garbage
// collector to follow ownerReferences) and drops the finalizer.
func (o *Operator) remove(ctx context.Context, p provider) error {
	prov, _ := catalog.Lookup(p.typ, p.GetName())
	if prov.Deployment != "" {
		_ = o.CS.AppsV1().Deployments(p.GetNamespace()).Delete(ctx, prov.Deployment, metav1.DeleteOptions{})
	}
	var keep []string
	for _, f := range p.GetFinalizers() {
		if f != finalizer {
			keep = append(keep, f)
		}
	}
	p.SetFinalizers(keep)
	_, err := o.client(p).Update(ctx, p.Unstructured, metav1.UpdateOptions{})
	return err
}

// writeStatus merges conds into the CR's conditions (keeping each one's
// lastTransitionTime while its status holds) and sets status fields;
// observedGeneration only when the reconcile succeeded.
func (o *Operator) writeStatus(ctx context.Context, p provider, conds []condition, fields map[string]any, observed bool) error {
	cur, err := o.client(p).Get(ctx, p.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	old, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
	byType := map[string]map[string]any{}
	var order []string
	for _, c := range old {
		if m, ok := c.(map[string]any); ok {
			t, _ := m["type"].(string)
			byType[t] = m
			order = append(order, t)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	for _, c := range conds {
		m := byType[c.Type]
		if m == nil {
			m = map[string]any{"type": c.Type}
			order = append(order, c.Type)
		}
		if m["status"] != c.Status || m["lastTransitionTime"] == nil {
			m["lastTransitionTime"] = now
		}
		if c.Reason == "" {
			c.Reason = c.Type
		}
		m["status"], m["reason"], m["message"] = c.Status, c.Reason, c.Message
		m["observedGeneration"] = p.GetGeneration()
		byType[c.Type] = m
	}
	list := make([]any, 0, len(order))
	for _, t := range order {
		list = append(list, byType[t])
	}
	before, _ := json.Marshal(cur.Object["status"])
	_ = unstructured.SetNestedSlice(cur.Object, list, "status", "conditions")
	for k, v := range fields {
		_ = unstructured.SetNestedField(cur.Object, v, "status", k)
	}
	if observed {
		// The generation this reconcile saw, not the one stored now: a
		// spec applied meanwhile is not observed yet.
		_ = unstructured.SetNestedField(cur.Object, p.GetGeneration(), "status", "observedGeneration")
	}
	after, _ := json.Marshal(cur.Object["status"])
	if string(before) == string(after) {
		return nil
	}
	_, err = o.client(p).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}
