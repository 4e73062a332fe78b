package kube

import (
	"context"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Reader is the cluster as a step sees it: it gets, lists and watches
// objects, reads a pod's log, discovery and a health endpoint, and asks
// the server what an apply would make of an object (a server-side dry
// run). It has no method that writes and its clients are unexported, so
// code that holds a Reader and tries to write does not compile. Only the
// run's effect.Executor holds a Cluster.
//
// client-go has no read-only half of its clients to hand out instead:
// every typed client has Create, Update and Delete beside Get. A Reader
// keeps client-go's signatures for what it does have, so a read reads as
// it would against client-go.
type Reader struct {
	typed   kubernetes.Interface
	dynamic dynamic.Interface
}

// NewReader builds a Reader from k3s.yaml's bytes, dialling through d.
// Its transport also makes any write a server-side dry run
// (DryRunTransport): no method of a Reader sends one, so this is a second
// guard, for a request that slipped past the first.
func NewReader(kubeconfig []byte, d Dialer, wrap ...func(http.RoundTripper) http.RoundTripper) (*Reader, error) {
	cl, err := NewCluster(kubeconfig, d, true, wrap...)
	if err != nil {
		return nil, err
	}
	return ReaderOf(cl.Typed, cl.Dynamic), nil
}

// ReaderOf reads through the given clients: tests hand it client-go's
// fakes.
func ReaderOf(typed kubernetes.Interface, dyn dynamic.Interface) *Reader {
	return &Reader{typed: typed, dynamic: dyn}
}

// reads is the read half of a client-go typed client of one kind.
type reads[T, L any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Objects reads one kind of object, as client-go's typed client does.
type Objects[T, L any] struct{ c reads[T, L] }

// Get is client-go's Get.
func (o Objects[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	return o.c.Get(ctx, name, opts)
}

// List is client-go's List.
func (o Objects[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	return o.c.List(ctx, opts)
}

// Watch is client-go's Watch.
func (o Objects[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return o.c.Watch(ctx, opts)
}

func objects[T, L any](c reads[T, L]) Objects[T, L] { return Objects[T, L]{c} }

// Nodes reads the cluster's nodes.
func (r *Reader) Nodes() Objects[*corev1.Node, *corev1.NodeList] {
	return objects(r.typed.CoreV1().Nodes())
}

// Namespaces reads the cluster's namespaces.
func (r *Reader) Namespaces() Objects[*corev1.Namespace, *corev1.NamespaceList] {
	return objects(r.typed.CoreV1().Namespaces())
}

// Secrets reads the Secrets of namespace ns.
func (r *Reader) Secrets(ns string) Objects[*corev1.Secret, *corev1.SecretList] {
	return objects(r.typed.CoreV1().Secrets(ns))
}

// ServiceAccounts reads the ServiceAccounts of namespace ns.
func (r *Reader) ServiceAccounts(ns string) Objects[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return objects(r.typed.CoreV1().ServiceAccounts(ns))
}

// Events reads the Events of namespace ns.
func (r *Reader) Events(ns string) Objects[*corev1.Event, *corev1.EventList] {
	return objects(r.typed.CoreV1().Events(ns))
}

// Jobs reads the Jobs of namespace ns.
func (r *Reader) Jobs(ns string) Objects[*batchv1.Job, *batchv1.JobList] {
	return objects(r.typed.BatchV1().Jobs(ns))
}

// Deployments reads the Deployments of namespace ns.
func (r *Reader) Deployments(ns string) Objects[*appsv1.Deployment, *appsv1.DeploymentList] {
	return objects(r.typed.AppsV1().Deployments(ns))
}

// DaemonSets reads the DaemonSets of namespace ns.
func (r *Reader) DaemonSets(ns string) Objects[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return objects(r.typed.AppsV1().DaemonSets(ns))
}

// Leases reads the Leases of namespace ns.
func (r *Reader) Leases(ns string) Objects[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return objects(r.typed.CoordinationV1().Leases(ns))
}

// ClusterRoles reads the cluster's ClusterRoles.
func (r *Reader) ClusterRoles() Objects[*rbacv1.ClusterRole, *rbacv1.ClusterRoleList] {
	return objects(r.typed.RbacV1().ClusterRoles())
}

// ClusterRoleBindings reads the cluster's ClusterRoleBindings.
func (r *Reader) ClusterRoleBindings() Objects[*rbacv1.ClusterRoleBinding, *rbacv1.ClusterRoleBindingList] {
	return objects(r.typed.RbacV1().ClusterRoleBindings())
}

// Pods reads the Pods of namespace ns and their logs.
func (r *Reader) Pods(ns string) Pods {
	c := r.typed.CoreV1().Pods(ns)
	return Pods{objects(c), c}
}

// Pods reads pods, and their containers' logs.
type Pods struct {
	Objects[*corev1.Pod, *corev1.PodList]
	logs typedcorev1.PodInterface
}

// Logs is a container's log, as kubectl logs reads it.
func (p Pods) Logs(ctx context.Context, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
	return p.logs.GetLogs(pod, opts).DoRaw(ctx)
}

// ServerGroupsAndResources is discovery's list of the API's groups and
// resources.
func (r *Reader) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return r.typed.Discovery().ServerGroupsAndResources()
}

// ServerVersion is the API server's version, as discovery reads it.
func (r *Reader) ServerVersion() (*version.Info, error) {
	return r.typed.Discovery().ServerVersion()
}

// CanI asks the API server whether the reader's own user may verb the
// resource of group in every namespace, as kubectl auth can-i does: a
// SelfSubjectAccessReview, which the server answers and never stores (and
// which the Reader's transport sends as a dry run, like every POST).
func (r *Reader) CanI(ctx context.Context, verb, group, resource string) (bool, error) {
	rev, err := r.typed.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource}}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return rev.Status.Allowed, nil
}

// GetPath GETs one of the API server's own paths, such as /readyz/etcd.
func (r *Reader) GetPath(ctx context.Context, path string) ([]byte, error) {
	return r.typed.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
}

// Resource reads the objects of any resource, unstructured.
func (r *Reader) Resource(gvr schema.GroupVersionResource) Resource {
	c := r.dynamic.Resource(gvr)
	return Resource{all: c, c: c}
}

// Resource reads the objects of one resource, in every namespace or, after
// Namespace, in one.
type Resource struct {
	all dynamic.NamespaceableResourceInterface
	c   dynamic.ResourceInterface
}

// Namespace narrows the resource to namespace ns.
func (r Resource) Namespace(ns string) Resource {
	return Resource{all: r.all, c: r.all.Namespace(ns)}
}

// Get is client-go's Get.
func (r Resource) Get(ctx context.Context, name string, opts metav1.GetOptions) (*unstructured.Unstructured, error) {
	return r.c.Get(ctx, name, opts)
}

// List is client-go's List.
func (r Resource) List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return r.c.List(ctx, opts)
}

// Watch is client-go's Watch.
func (r Resource) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return r.c.Watch(ctx, opts)
}

// DryRunApply is what the server would store if obj were applied with
// server-side apply by manager, forcing conflicts: defaults, admission
// and webhooks run, and nothing is persisted (dryRun=All).
func (r Resource) DryRunApply(ctx context.Context, obj *unstructured.Unstructured, manager string) (*unstructured.Unstructured, error) {
	return r.c.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: manager, Force: true, DryRun: []string{metav1.DryRunAll}})
}
