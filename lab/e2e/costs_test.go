package e2e

// costs is each test's time in seconds in a run of the whole suite on 2
// cores (make test on e0fd49f, docs/testing.md), for the order in which
// labtest hands out lab slots: the longest first. A test not here counts
// as a minute; the figures need only their order to be about right.
var costs = map[string]float64{
	"TestHARestore":                   570,
	"TestHA":                          422,
	"TestFullRun":                     266,
	"TestVerification":                254,
	"TestHAGrowth":                    219,
	"TestBackupRestore":               179,
	"TestLabChartsAndOperator":        153,
	"TestK3sPhase":                    250,
	"TestUpgradePlan":                 145,
	"TestFaultsInTurn":                129,
	"TestPlanAndStatusWriteNothing":   123,
	"TestConverged":                   92,
	"TestAPIAccessHA":                 80,
	"TestAPIAccess":                   68,
	"TestDropDuringK3sInstall":        57,
	"TestStatus":                      56,
	"TestConfigTypoGuardFires":        52,
	"TestDestroy":                     51,
	"TestProxmoxRole":                 49,
	"TestChangedVMHostKey":            40,
	"TestVMDrift":                     36,
	"TestProxmoxDropsOffTheNetwork":   34,
	"TestPreflight":                   30,
	"TestKubeconfigAndInspector":      30,
	"TestVMPhaseConverges":            28,
	"TestKilledDuringK3sInstall":      25,
	"TestCorruptImage":                25,
	"TestChangedVMKeyBeforeAnyChange": 25,
	"TestDroppedDownload":             22,
	"TestKilledAfterCreate":           18,
	"TestVMIDTakenByAnotherVM":        15,
	"TestUnknownProxmoxHostKey":       12,
}
