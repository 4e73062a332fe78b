package main

import (
	"reflect"
	"testing"
)

// TestComponent: the name the kubelet runs the binary by picks the
// component; any other name picks none.
func TestComponent(t *testing.T) {
	for name, want := range map[string]string{
		"/var/lib/lab/bin/cert-manager-controller-v1.21.2": "controller",
		"cert-manager-webhook-v1.21.1":                     "webhook",
		"cert-manager-cainjector":                          "cainjector",
		"/bin/cert-manager-startupapicheck-v1.21.2":        "startupapicheck",
		"cert-manager-v1.21.2":                             "",
		"cert-manager-controllerx-v1.21.2":                 "",
		"controller":                                       "",
	} {
		run, ok := component(name)
		got := ""
		for c, f := range Components {
			if ok && reflect.ValueOf(f).Pointer() == reflect.ValueOf(run).Pointer() {
				got = c
			}
		}
		if got != want {
			t.Errorf("%s: component %q, want %q", name, got, want)
		}
	}
}
