package klipperhelm

import (
	"context"
	"fmt"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names the operator chart gives its webhook objects (kustomize namePrefix
// capi-operator-, docs/upstream.md §4.6).
const (
	WebhookService    = "capi-operator-webhook-service"
	WebhookCertSecret = "capi-operator-webhook-service-cert"
	// WebhookPort is where the operator's webhook server listens
	// (--webhook-port's default); the Service targets it.
	WebhookPort = 9443
)

// operatorKinds are the kinds the operator's webhooks serve.
var operatorKinds = []string{"coreprovider", "bootstrapprovider", "controlplaneprovider", "infrastructureprovider", "ipamprovider", "addonprovider", "runtimeextensionprovider"}

// WebhookPath is controller-runtime's path for a kind's webhook.
func WebhookPath(verb, kind string) string {
	return fmt.Sprintf("/%s-operator-cluster-x-k8s-io-v1alpha2-%s", verb, kind)
}

// webhookOwnership is Helm's check, before it creates anything of a
// release, that no object of the release exists owned by another: the
// cluster-wide webhook configurations of a second operator release are.
func (c *Runner) webhookOwnership(ctx context.Context, release string) error {
	cur, err := c.CS.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "capi-operator-validating-webhook-configuration", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	if owner := cur.Annotations["meta.helm.sh/release-name"]; owner != release {
		return fmt.Errorf("rendered manifests contain a resource that already exists. Unable to continue with install: ValidatingWebhookConfiguration %q in namespace \"\" exists and cannot be imported into the current release: invalid ownership metadata; annotation validation error: key \"meta.helm.sh/release-name\" must equal %q: current value is %q", cur.Name, release, owner)
	}
	return nil
}

// operatorWebhooks installs what the chart does for the operator's
// webhooks: the Service, the serving certificate's Secret (cert-manager
// issues it from the chart's Certificate; the lab's k3s issues it here
// from its own CA), and the validating and mutating configurations with
// that CA as caBundle (cert-manager's cainjector's job).
func (c *Runner) operatorWebhooks(ctx context.Context, release, ns string) error {
	if c.WebhookCA == nil {
		return nil
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookService, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"control-plane": "controller-manager"},
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(WebhookPort), Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := c.CS.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	host := WebhookService + "." + ns + ".svc"
	crt, key, err := c.WebhookCA.Issue(host, []string{host, host + ".cluster.local"}, nil)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: WebhookCertSecret, Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": c.WebhookCA.CertPEM}}
	if _, err := c.CS.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if _, err := c.CS.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	regs := c.CS.AdmissionregistrationV1()
	helmMeta := metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"},
		Annotations: map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}}
	fail, none := admv1.Fail, admv1.SideEffectClassNone
	var validating []admv1.ValidatingWebhook
	var mutating []admv1.MutatingWebhook
	for _, k := range operatorKinds {
		rules := []admv1.RuleWithOperations{{Operations: []admv1.OperationType{admv1.Create, admv1.Update},
			Rule: admv1.Rule{APIGroups: []string{"operator.cluster.x-k8s.io"}, APIVersions: []string{"v1alpha2"}, Resources: []string{k + "s"}}}}
		cc := func(verb string) admv1.WebhookClientConfig {
			p := WebhookPath(verb, k)
			return admv1.WebhookClientConfig{CABundle: c.WebhookCA.CertPEM, Service: &admv1.ServiceReference{Namespace: ns, Name: WebhookService, Path: &p}}
		}
		validating = append(validating, admv1.ValidatingWebhook{Name: "v" + k + ".kb.io", ClientConfig: cc("validate"), Rules: rules,
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}})
		mutating = append(mutating, admv1.MutatingWebhook{Name: "v" + k + ".kb.io", ClientConfig: cc("mutate"), Rules: rules,
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}})
	}
	vmeta, mmeta := *helmMeta.DeepCopy(), *helmMeta.DeepCopy()
	vmeta.Name, mmeta.Name = "capi-operator-validating-webhook-configuration", "capi-operator-mutating-webhook-configuration"
	vwc := &admv1.ValidatingWebhookConfiguration{ObjectMeta: vmeta, Webhooks: validating}
	if cur, err := regs.ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{}); err == nil {
		vwc.ResourceVersion = cur.ResourceVersion
		_, err = regs.ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
	} else if _, err := regs.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		return err
	}
	mwc := &admv1.MutatingWebhookConfiguration{ObjectMeta: mmeta, Webhooks: mutating}
	if cur, err := regs.MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{}); err == nil {
		mwc.ResourceVersion = cur.ResourceVersion
		_, err = regs.MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
		return err
	}
	_, err = regs.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{})
	return err
}
