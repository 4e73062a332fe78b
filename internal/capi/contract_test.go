package capi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mgmtctl/mgmtctl/internal/config"
)

const coreMeta = `apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
  - major: 1
    minor: 12
    contract: v1beta2
  - major: 1
    minor: 10
    contract: v1beta1
  - major: 1
    minor: 8
    contract: v1beta1
`

const ipamMeta = `releaseSeries:
  - {major: 1, minor: 0, contract: v1beta1}
  - {major: 1, minor: 1, contract: v1beta2}
  - {major: 0, minor: 1, contract: v1alpha4}
`

func pinned(t *testing.T, meta, typ, name, version string) Pinned {
	m, err := ParseMetadata([]byte(meta))
	if err != nil {
		t.Fatal(err)
	}
	return Pinned{Provider: config.Provider{Type: config.ProviderType(typ), Name: name, Version: version}, Metadata: m}
}

func TestCheckContracts(t *testing.T) {
	tests := []struct {
		name      string
		core      string
		ipam      string
		contracts []string
		problem   string
	}{
		{"v1beta2 core, v1beta1 ipam: compatible", "v1.12.11", "v1.0.3", []string{"cluster-api v1beta2", "ipam-in-cluster v1beta1"}, ""},
		{"v1beta2 both", "v1.12.11", "v1.1.1", []string{"cluster-api v1beta2", "ipam-in-cluster v1beta2"}, ""},
		{"v1beta1 core, v1beta2 ipam", "v1.8.4", "v1.1.1", []string{"cluster-api v1beta1", "ipam-in-cluster v1beta2"},
			`installing provider "ipam-in-cluster" could lead to a non functioning management cluster: the target version for the provider implements the v1beta2 contract version, while the core provider is compatible with v1beta1 contract versions`},
		{"a series the metadata lacks", "v1.12.11", "v1.2.0", []string{"cluster-api v1beta2"},
			"invalid provider metadata: version v1.2.0 for the provider ipam-in-cluster does not match any release series. Available series: [1.0, 1.1, 0.1]"},
		{"a contract the operator does not install", "v1.12.11", "v0.1.0", []string{"cluster-api v1beta2", "ipam-in-cluster v1alpha4"},
			"CAPI operator is only compatible with v1beta1, v1beta2 providers, detected v1alpha4 for provider ipam-in-cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := CheckContracts([]Pinned{pinned(t, coreMeta, "core", "cluster-api", tt.core), pinned(t, ipamMeta, "ipam", "in-cluster", tt.ipam)})
			if !reflect.DeepEqual(got, tt.contracts) {
				t.Errorf("contracts %q, want %q", got, tt.contracts)
			}
			if tt.problem == "" && len(problems) > 0 || tt.problem != "" && (len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), tt.problem)) {
				t.Errorf("problems %q, want %q", problems, tt.problem)
			}
		})
	}
}
