package addons

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mgmtctl/mgmtctl/internal/capi"
	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/kube"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// CRDTimeout is the default bound of the wait for the provider CRDs and
// webhooks.
const CRDTimeout = 5 * time.Minute

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ProviderAPI waits (a step.Waiter with nothing to change) until the
// operator's provider CRDs are Established and the API accepts a provider
// CR: a server-side dry-run of a CoreProvider goes through the operator's
// webhooks, which must answer (upstream #406).
type ProviderAPI struct {
	V         *VM
	Namespace string // where the dry-run object would live: the operator's
	// Timeout bounds the wait; zero means CRDTimeout.
	Timeout time.Duration
}

var _ step.Waiter = (*ProviderAPI)(nil)

// ID implements step.Step.
func (s *ProviderAPI) ID() string { return "provider-api" }

// Host implements step.Step.
func (s *ProviderAPI) Host() string { return s.V.Name }

const providerAPINote = "provider CRDs Established; a provider CR passes a server-side dry-run"

// Check implements step.Step: there is nothing to change, only to wait for.
func (s *ProviderAPI) Check(ctx context.Context) (step.Plan, error) {
	return step.Plan{Note: providerAPINote}, nil
}

// Observe implements step.Waiter.
func (s *ProviderAPI) Observe(ctx context.Context) (bool, string, error) {
	cl := s.V.Cluster()
	if cl == nil {
		return false, "the cluster does not exist yet", nil
	}
	why, _ := s.observe(ctx, cl)
	return why == "", why, nil
}

// Bound implements step.Waiter.
func (s *ProviderAPI) Bound() time.Duration { return orDefault(s.Timeout, CRDTimeout) }

// Wait implements step.Waiter.
func (s *ProviderAPI) Wait(ctx context.Context) error {
	cl := s.V.Cluster()
	if cl == nil {
		return errors.New("wait for the provider API: no connection to the cluster")
	}
	last := ""
	// The dry-run's answer changes when the operator's webhook starts
	// serving, which no watch shows; a failed dry-run is retried with a
	// back-off while the CRDs' events also wake the wait.
	backoff := 250 * time.Millisecond
	err := kube.Until(ctx, []kube.WatchFunc{kube.WatchResource(cl, crdGVR, "", metav1.ListOptions{})}, func(ctx context.Context) (bool, error) {
		for {
			why, webhook := s.observe(ctx, cl)
			if why == "" {
				return true, nil
			}
			if why != last {
				step.Progress(ctx, why)
				last = why
			}
			if !webhook {
				return false, nil
			}
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	})
	if err != nil && ctx.Err() != nil {
		return step.Timeout(s.Bound(), ctx.Err(), "provider API not usable after %s: %s", s.Bound(), last)
	}
	if err != nil {
		return fmt.Errorf("provider API not usable: %s: %w", last, err)
	}
	return nil
}

// observe returns what is still missing, or "" when the API is usable;
// webhook says it is the dry-run that was refused, which no watch will
// announce the end of.
func (s *ProviderAPI) observe(ctx context.Context, cl *kube.Reader) (why string, webhook bool) {
	// The five CRDs are read at once: one round trip's wait, not five.
	whys := make([]string, len(config.ProviderTypes))
	var wg sync.WaitGroup
	for i, t := range config.ProviderTypes {
		wg.Go(func() {
			name := capi.Kinds[t].Plural + "." + capi.Group
			crd, err := cl.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				whys[i] = "CRD " + name + " does not exist yet"
			case err != nil:
				whys[i] = "read CRD " + name + ": " + err.Error()
			case !established(crd):
				whys[i] = "CRD " + name + " not Established yet"
			}
		})
	}
	wg.Wait()
	for _, w := range whys {
		if w != "" {
			return w, false
		}
	}
	core := capi.Kinds[config.ProviderCore]
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": capi.Group + "/" + capi.Version, "kind": core.Kind,
		"metadata": map[string]any{"name": "cluster-api", "namespace": s.Namespace},
		"spec":     map[string]any{"version": "v1.0.0"},
	}}
	_, err := cl.Resource(core.GVR()).Namespace(s.Namespace).DryRunApply(ctx, probe, capi.FieldManager)
	if err != nil {
		return "dry-run of a CoreProvider refused: " + err.Error(), true
	}
	return "", false
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
