package e2e

// costs is each test's time in seconds holding its lab slot in a run of
// the whole suite on 2 cores with two slots (76c27f1, docs/testing.md:
// from its lab's start to its end; TestK3sPhase as it took alone once
// the lab's API server reloaded its encryption config every 5 s), for
// the order in which labtest hands out lab slots: the longest first. A
// test not here counts as a minute; the figures need only their order
// to be about right.
var costs = map[string]float64{
	"TestHARestore":                   925,
	"TestFullRun":                     369,
	"TestHA":                          306,
	"TestHAGrowth":                    250,
	"TestBackupRestore":               183,
	"TestLabChartsAndOperator":        182,
	"TestK3sPhase":                    170,
	"TestVerification":                168,
	"TestDestroy":                     140,
	"TestPlanAndStatusWriteNothing":   130,
	"TestFaultsInTurn":                128,
	"TestK3sInTurn":                   110, // three tests of 69, 36 and 29 s before, in one lab
	"TestAPIAccessHA":                 93,
	"TestUpgradePlan":                 67,
	"TestProxmoxRole":                 65,
	"TestConverged":                   63,
	"TestAPIAccess":                   125, // 61 before the run lock's lease is waited out (119 s alone)
	"TestStatus":                      61,
	"TestDropDuringK3sInstall":        55,
	"TestPreflight":                   42,
	"TestProxmoxDropsOffTheNetwork":   35,
	"TestChangedVMHostKey":            29,
	"TestVMDrift":                     24,
	"TestVMPhaseConverges":            21,
	"TestDroppedDownload":             20,
	"TestChangedVMKeyBeforeAnyChange": 19,
	"TestCorruptImage":                18,
	"TestKilledAfterCreate":           12,
	"TestVMIDTakenByAnotherVM":        5,
	"TestUnknownProxmoxHostKey":       1,
}
