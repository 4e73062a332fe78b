package capi

import (
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/mgmtctl/mgmtctl/internal/config"
)

// Metadata is a provider release's metadata.yaml, as clusterctl reads it
// (cluster-api cmd/clusterctl/api/v1alpha3 Metadata): which contract each
// release series (major.minor) implements.
type Metadata struct {
	ReleaseSeries []struct {
		Major    int    `json:"major"`
		Minor    int    `json:"minor"`
		Contract string `json:"contract"`
	} `json:"releaseSeries"`
}

// ParseMetadata reads a metadata.yaml.
func ParseMetadata(b []byte) (Metadata, error) {
	var m Metadata
	err := yaml.Unmarshal(b, &m)
	return m, err
}

// Series is the version's release series, "major.minor".
func Series(version string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(parts[1])
	return a, b, err1 == nil && err2 == nil
}

// Contract is the contract the version's release series implements
// (GetReleaseSeriesForVersion: the series of the same major and minor).
func (m Metadata) Contract(version string) (string, bool) {
	major, minor, ok := Series(version)
	if !ok {
		return "", false
	}
	for _, s := range m.ReleaseSeries {
		if s.Major == major && s.Minor == minor {
			return s.Contract, true
		}
	}
	return "", false
}

// Label is a provider's cluster.x-k8s.io/provider label, as clusterctl
// names it in its messages (ManifestLabel): the core provider's name,
// else <type prefix>-<name>.
func Label(p config.Provider) string {
	if p.Type == config.ProviderCore {
		return p.Name
	}
	return Kinds[p.Type].Prefix + "-" + p.Name
}

// OperatorContracts are the contracts cluster-api-operator installs
// (v0.27.0 and v0.28.0, internal/controller/phase_load.go
// validateRepoCAPIVersion: any other is CAPIVersionIncompatibility).
var OperatorContracts = []string{"v1beta1", "v1beta2"}

// CompatibleContracts are the contracts providers may implement beside a
// core provider of contract (cluster-api v1.12.10
// internal/contract/version.go GetCompatibleVersions: v1beta2 is
// compatible with v1beta1 until v1beta1's end of life).
func CompatibleContracts(contract string) []string {
	if contract == "v1beta2" {
		return []string{"v1beta2", "v1beta1"}
	}
	return []string{contract}
}

// Pinned is a provider with its release's metadata.
type Pinned struct {
	Provider config.Provider
	Metadata Metadata
}

// CheckContracts checks the pinned set as clusterctl's installer does
// (cluster-api v1.12.10 cmd/clusterctl/client/cluster/installer.go
// getProviderContract, validateInstallRequest) and the operator after it:
// each provider version's release series is in its metadata.yaml, its
// contract one the operator installs, and every provider's contract one
// the core provider's is compatible with. It returns each provider's
// contract ("cluster-api v1beta2", in order) and every problem, in
// clusterctl's and the operator's words.
func CheckContracts(pinned []Pinned) (contracts, problems []string) {
	coreContract := ""
	found := map[int]string{}
	for i, p := range pinned {
		label, v := Label(p.Provider), p.Provider.Version
		c, ok := p.Metadata.Contract(v)
		if !ok {
			var series []string
			for _, s := range p.Metadata.ReleaseSeries {
				series = append(series, fmt.Sprintf("%d.%d", s.Major, s.Minor))
			}
			problems = append(problems, fmt.Sprintf("invalid provider metadata: version %s for the provider %s does not match any release series. Available series: [%s]",
				v, label, strings.Join(series, ", ")))
			continue
		}
		if !contains(OperatorContracts, c) {
			problems = append(problems, fmt.Sprintf("CAPI operator is only compatible with %s providers, detected %s for provider %s", strings.Join(OperatorContracts, ", "), c, label))
		}
		found[i] = c
		contracts = append(contracts, label+" "+c)
		if p.Provider.Type == config.ProviderCore {
			coreContract = c
		}
	}
	if coreContract == "" {
		return contracts, problems
	}
	compatible := CompatibleContracts(coreContract)
	for i, p := range pinned {
		c, ok := found[i]
		if !ok || p.Provider.Type == config.ProviderCore || contains(compatible, c) {
			continue
		}
		problems = append(problems, fmt.Sprintf("installing provider %q could lead to a non functioning management cluster: the target version for the provider implements the %s contract version, while the core provider is compatible with %s contract versions",
			Label(p.Provider), c, strings.Join(compatible, ",")))
	}
	return contracts, problems
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
