package k3s

import (
	"context"
	"fmt"
	"io"

	helmchart "github.com/k3s-io/helm-controller/pkg/controllers/chart"
	helmcommon "github.com/k3s-io/helm-controller/pkg/controllers/common"
	"github.com/k3s-io/helm-controller/pkg/crds"
	helm "github.com/k3s-io/helm-controller/pkg/generated/controllers/helm.cattle.io"
	"github.com/rancher/wrangler/v3/pkg/apply"
	"github.com/rancher/wrangler/v3/pkg/generated/controllers/batch"
	"github.com/rancher/wrangler/v3/pkg/generated/controllers/core"
	"github.com/rancher/wrangler/v3/pkg/generated/controllers/rbac"
	"github.com/rancher/wrangler/v3/pkg/leader"
	"github.com/rancher/wrangler/v3/pkg/schemes"
	"github.com/rancher/wrangler/v3/pkg/start"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// HelmJobImage is the image of the Jobs helm-controller runs: k3s sets
// helm-controller's chart.DefaultJobImage at build time (the
// K3S_HELM_JOB_IMAGE of its build, rancher/klipper-helm at the tag of the
// release's image list). The lab's kubelet runs a Pod of this image as
// klipper-helm (lab/internal/klipperhelm).
const HelmJobImage = "rancher/klipper-helm:v0.9.8-build20250709"

// LeaderLease is the Lease k3s's leader-elected controllers run under
// (version.Program: k3s-io/k3s pkg/server/server.go, runControllers:
// leader.RunOrDie(ctx, "", version.Program, ...), in kube-system).
const LeaderLease = "k3s"

// applyHelmCRDs applies helm-controller's CRDs as k3s does at start, from
// helm-controller's own embedded copy (pkg/crds).
func applyHelmCRDs(ctx context.Context, dc dynamic.Interface) error {
	list, err := crds.List()
	if err != nil {
		return fmt.Errorf("helm-controller's CRDs: %w", err)
	}
	for _, crd := range list {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
		if err != nil {
			return err
		}
		if err := applyCRDObject(ctx, dc, obj); err != nil {
			return fmt.Errorf("CRD %s: %w", crd.Name, err)
		}
	}
	return nil
}

// runHelmController runs upstream's helm-controller as k3s does: in the
// server process, on the server that holds the "k3s" Lease, for all
// namespaces, its Jobs bound to cluster-admin (k3s-io/k3s
// pkg/server/server.go, coreControllers, at helm-controller v0.17.7).
// It returns when ctx ends.
func runHelmController(ctx context.Context, rc *rest.Config, cs kubernetes.Interface, node string, log io.Writer, apiServerPort string) {
	helmchart.DefaultJobImage = HelmJobImage
	leader.RunOrDie(ctx, "", LeaderLease, cs, func(ctx context.Context) {
		logf(log, "%s leads k3s's controllers (helm-controller)", node)
		if err := startHelmController(ctx, rc, node, apiServerPort); err != nil {
			logf(log, "helm-controller: %v", err)
		}
	})
}

func startHelmController(ctx context.Context, rc *rest.Config, node, apiServerPort string) error {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = helmcommon.Name
	k8s, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	helmF, err := helm.NewFactoryFromConfig(rc)
	if err != nil {
		return err
	}
	batchF, err := batch.NewFactoryFromConfig(rc)
	if err != nil {
		return err
	}
	rbacF, err := rbac.NewFactoryFromConfig(rc)
	if err != nil {
		return err
	}
	coreF, err := core.NewFactoryFromConfig(rc)
	if err != nil {
		return err
	}
	ap := apply.New(k8s, apply.NewClientFactory(rc)).WithDynamicLookup().WithSetOwnerReference(false, false)
	// k3s's util.BuildControllerEventRecorder: Events to the sink, from
	// component helm-controller on this node.
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: k8s.CoreV1().Events(metav1.NamespaceAll)})
	recorder := b.NewRecorder(schemes.All, corev1.EventSource{Component: helmcommon.Name, Host: node})
	h, bt, rb, co := helmF.Helm().V1(), batchF.Batch().V1(), rbacF.Rbac().V1(), coreF.Core().V1()
	helmchart.Register(ctx, metav1.NamespaceAll, helmcommon.Name, "cluster-admin", apiServerPort,
		k8s, ap, recorder,
		h.HelmChart(), h.HelmChart().Cache(), h.HelmChartConfig(), h.HelmChartConfig().Cache(),
		bt.Job(), bt.Job().Cache(), rb.ClusterRoleBinding(), co.ServiceAccount(), co.ConfigMap(),
		co.Secret(), co.Secret().Cache())
	return start.All(ctx, 5, helmF, batchF, rbacF, coreF)
}
