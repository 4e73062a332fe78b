package kubevip

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func ctr(image string, env map[string]string) corev1.Container {
	c := corev1.Container{Name: "kube-vip", Image: image}
	for k, v := range env {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return c
}

// TestFromContainer: kube-vip's env as its manifests write it, with
// kube-vip's defaults (lease plndr-cp-lock in kube-system, the older
// vip_address), and another DaemonSet is not kube-vip.
func TestFromContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    corev1.Container
		ok   bool
		want Config
	}{
		{"arp control plane", ctr("ghcr.io/kube-vip/kube-vip:v1.2.3", map[string]string{"vip_arp": "true", "cp_enable": "true", "vip_leaderelection": "true",
			"address": "192.0.2.60", "vip_interface": "eth0", "vip_leaseduration": "5", "vip_renewdeadline": "3", "vip_retryperiod": "1"}), true,
			Config{Address: "192.0.2.60", Interface: "eth0", ARP: true, ControlPlane: true, LE: true, LeaseName: "plndr-cp-lock", Namespace: "kube-system",
				Lease: 5 * time.Second, Renew: 3 * time.Second, Retry: time.Second}},
		{"the old plndr image is not read", ctr("plndr/kube-vip:v0.3.6", map[string]string{}), false, Config{}},
		{"vip_address", ctr("ghcr.io/kube-vip/kube-vip:v0.8.0", map[string]string{"vip_address": "192.0.2.61", "vip_leasename": "mine", "cp_namespace": "ops"}), true,
			Config{Address: "192.0.2.61", LeaseName: "mine", Namespace: "ops", Lease: 5 * time.Second, Renew: 3 * time.Second, Retry: time.Second}},
		{"not kube-vip", ctr("quay.io/jetstack/cert-manager-controller:v1.21.2", nil), false, Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := FromContainer(tc.c)
			if ok != tc.ok || got != tc.want {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
			// Only the first is the mode the lab runs (ARP, control
			// plane, leader election, an address).
			if supported := got.Supported(); supported != (tc.name == "arp control plane") {
				t.Errorf("Supported() = %v", supported)
			}
		})
	}
}
