package lab_test

// costs is each test's time in seconds in a run of the whole suite on 2
// cores (make test on e0fd49f, docs/testing.md), for the order in which
// labtest hands out lab slots: the longest first.
var costs = map[string]float64{
	"TestK3s":                   136,
	"TestK3sHA":                 131,
	"TestTemplateCopies":        39,
	"TestVMLifecycle":           20,
	"TestProxmoxCluster":        18,
	"TestPlainSSHToProxmox":     9,
	"TestS3":                    8,
	"TestFaults":                8,
	"TestDownAfterKilledDaemon": 8,
	"TestWatchBuilds":           0,
}
