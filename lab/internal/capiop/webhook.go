package capiop

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mgmtctl/mgmtctl/lab/internal/helmctl"
	"github.com/mgmtctl/mgmtctl/lab/internal/simkube"
)

// webhookPort is where the operator's webhook server listens (the
// chart's Service targets it).
const webhookPort = 9443

// operatorNamespace is where the operator's Deployment is Available, or ""
// while it is not.
func (o *Operator) operatorNamespace(ctx context.Context) string {
	list, err := o.CS.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: "clusterctl.cluster.x-k8s.io/core=capi-operator"})
	if err != nil {
		return ""
	}
	for i := range list.Items {
		if simkube.Available(&list.Items[i]) {
			return list.Items[i].Namespace
		}
	}
	return ""
}

// serveWebhooks runs the operator's webhook server once the operator's
// Deployment is Available and its serving certificate exists, the way its
// pod would, and publishes the EndpointSlice the endpoint-slice controller
// would for the chart's Service. Until then the API server's calls to the
// webhooks fail, as they do while the real pod starts (upstream #406).
func (o *Operator) serveWebhooks(ctx context.Context) {
	var srv *http.Server
	defer func() {
		if srv != nil {
			_ = srv.Close()
		}
	}()
	for {
		if srv == nil {
			srv = o.startWebhooks(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (o *Operator) startWebhooks(ctx context.Context) *http.Server {
	ns := o.operatorNamespace(ctx)
	if ns == "" || o.NodeIP == "" {
		return nil
	}
	sec, err := o.CS.CoreV1().Secrets(ns).Get(ctx, helmctl.WebhookCertSecret, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	cert, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		o.logf("webhook certificate: %v", err)
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.NodeIP, strconv.Itoa(webhookPort)))
	if err != nil {
		o.logf("webhook server: %v", err)
		return nil
	}
	srv := &http.Server{Handler: http.HandlerFunc(o.admit), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.logf("webhook server: %v", err)
		}
	}()
	if err := o.publishEndpoints(ctx, ns); err != nil {
		o.logf("webhook endpoints: %v", err)
	}
	o.logf("serving webhooks on %s", ln.Addr())
	return srv
}

func (o *Operator) publishEndpoints(ctx context.Context, ns string) error {
	ready, name, tcp, port := true, "", corev1.ProtocolTCP, int32(webhookPort)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: helmctl.WebhookService + "-lab", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: helmctl.WebhookService, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{o.NodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}},
	}
	slices := o.CS.DiscoveryV1().EndpointSlices(ns)
	_, err := slices.Create(ctx, es, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The operator ran on another server before (a cluster of servers,
	// its leader gone): its endpoint moves here, as the endpoint-slice
	// controller moves it to the new pod.
	cur, err := slices.Get(ctx, es.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(cur.Endpoints) == 1 && len(cur.Endpoints[0].Addresses) == 1 && cur.Endpoints[0].Addresses[0] == o.NodeIP {
		return nil
	}
	cur.Endpoints = es.Endpoints
	_, err = slices.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// admit answers an AdmissionReview: the validating webhooks allow, the
// mutating ones default configSecret.namespace to the provider's
// namespace (internal/webhook/provider_webhook.go).
func (o *Operator) admit(w http.ResponseWriter, r *http.Request) {
	var rev admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Request == nil {
		http.Error(w, "malformed AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: true}
	if strings.HasPrefix(r.URL.Path, "/mutate-") {
		var obj struct {
			Spec struct {
				ConfigSecret *struct {
					Namespace string `json:"namespace"`
				} `json:"configSecret"`
			} `json:"spec"`
		}
		_ = json.Unmarshal(rev.Request.Object.Raw, &obj)
		if cs := obj.Spec.ConfigSecret; cs != nil && cs.Namespace == "" {
			patch, _ := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/configSecret/namespace", "value": rev.Request.Namespace}})
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	rev.Response, rev.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&rev)
}
