package k3s

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// addonCRD is k3s's Addon type (k3s.cattle.io/v1), which k3s registers at
// start; the lab keeps its schema open.
const addonCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: addons.k3s.cattle.io
spec:
  group: k3s.cattle.io
  names: {kind: Addon, listKind: AddonList, plural: addons, singular: addon}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
    additionalPrinterColumns:
    - {name: Source, type: string, jsonPath: .spec.source}
    - {name: Checksum, type: string, jsonPath: .spec.checksum}
`

var addonGVR = schema.GroupVersionResource{Group: "k3s.cattle.io", Version: "v1", Resource: "addons"}

// deployer is k3s's deploy controller (k3s-io/k3s v1.35.7+k3s1
// pkg/deploy/controller.go and pkg/deploy/stage.go, docs/upstream.md §2.5): it applies the
// files in the manifests directory, on start and when a file's mtime
// changes, rescanning every 15 s, and tracks each file as an Addon named
// after the file's base name up to the first '.'.
type deployer struct {
	dir    string
	cs     kubernetes.Interface
	dc     dynamic.Interface
	mapper meta.ResettableRESTMapper
	log    io.Writer
	mtimes map[string]time.Time
}

func newDeployer(rc *rest.Config, cs kubernetes.Interface, log io.Writer) (*deployer, error) {
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &deployer{dir: ManifestsDir, cs: cs, dc: dc, log: log, mtimes: map[string]time.Time{},
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

func (d *deployer) run(ctx context.Context) {
	for {
		d.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(15 * time.Second):
		}
	}
}

func manifestFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func (d *deployer) scan(ctx context.Context) {
	var files []string
	_ = filepath.Walk(d.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && manifestFile(fi.Name()) {
			if _, err := os.Stat(p + ".skip"); err != nil {
				files = append(files, p)
			}
		}
		return nil
	})
	sort.Strings(files)
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		if last, ok := d.mtimes[f]; ok && last.Equal(fi.ModTime()) {
			continue
		}
		d.mtimes[f] = fi.ModTime()
		if err := d.apply(ctx, f); err != nil {
			logf(d.log, "Failed to process config: %v", err)
		}
	}
}

func addonName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, "."); i >= 0 {
		base = base[:i]
	}
	return base
}

func (d *deployer) apply(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := sha256.Sum256(b)
	sum := hex.EncodeToString(s[:])
	name := addonName(path)
	addons := d.dc.Resource(addonGVR).Namespace("kube-system")
	cur, err := addons.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		if c, _, _ := unstructured.NestedString(cur.Object, "spec", "checksum"); c == sum {
			return nil
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	addon := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k3s.cattle.io/v1", "kind": "Addon",
		"metadata": map[string]any{"name": name, "namespace": "kube-system"},
		"spec":     map[string]any{"source": path, "checksum": sum},
	}}
	applied, err := addons.Apply(ctx, name, addon, metav1.ApplyOptions{FieldManager: "k3s", Force: true})
	if err != nil {
		return fmt.Errorf("Addon.k3s.cattle.io %q is invalid: %w", name, err)
	}
	d.event(ctx, applied, "Normal", "ApplyingManifest", "Applying manifest at "+path)
	var gvks []string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			d.event(ctx, applied, "Warning", "ParseManifestFailed", fmt.Sprintf("Parse manifest at %s failed: %v", path, err))
			return err
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			d.mapper.Reset()
			if m, err = d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				d.event(ctx, applied, "Warning", "ApplyManifestFailed", fmt.Sprintf("Applying manifest at %s failed: %v", path, err))
				return err
			}
		}
		var ri dynamic.ResourceInterface = d.dc.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := u.GetNamespace()
			if ns == "" {
				ns = "kube-system"
				u.SetNamespace(ns)
			}
			ri = d.dc.Resource(m.Resource).Namespace(ns)
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["objectset.rio.cattle.io/id"] = "deploy-" + name
		u.SetAnnotations(ann)
		if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "deploy@" + name, Force: true}); err != nil {
			d.event(ctx, applied, "Warning", "ApplyManifestFailed", fmt.Sprintf("Applying manifest at %s failed: %v", path, err))
			return err
		}
		gvks = append(gvks, gvk.String())
	}
	a := applied.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	j, _ := yaml.Marshal(gvks)
	a["addon.k3s.cattle.io/gvks"] = strings.TrimSpace(string(j))
	applied.SetAnnotations(a)
	_, _ = addons.Update(ctx, applied, metav1.UpdateOptions{})
	d.event(ctx, applied, "Normal", "AppliedManifest", "Applied manifest at "+path)
	return nil
}

func (d *deployer) event(ctx context.Context, addon *unstructured.Unstructured, typ, reason, msg string) {
	now := metav1.Now()
	_, _ = d.cs.CoreV1().Events("kube-system").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: addon.GetName() + ".", Namespace: "kube-system"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "k3s.cattle.io/v1", Kind: "Addon", Name: addon.GetName(), Namespace: "kube-system", UID: addon.GetUID()},
		Type:           typ, Reason: reason, Message: msg, Source: corev1.EventSource{Component: "deploy"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
}
