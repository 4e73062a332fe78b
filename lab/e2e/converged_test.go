package e2e

import "testing"

// TestConverged is every check that only reads a converged cluster, on one
// lab they share: a copy of the converged lab, restarted. The checks run
// one after another, so those that compare the disks before and after
// (status, plan) see no other's writes; what changes the lab is in tests
// of their own, each on a copy of its own (TestStatus,
// TestPlanAndStatusWriteNothing, TestVerification, TestBackupRestore,
// TestDestroy).
func TestConverged(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	for _, c := range []struct {
		name  string
		check func(e *env, t *testing.T)
	}{
		{"status", (*env).convergedStatus},
		// Nothing pending (0), healthy (0).
		{"plan-and-status-write-nothing", func(e *env, t *testing.T) { e.readOnlyRuns(t, "converged", 0, 0) }},
		{"verification", (*env).verificationList},
		{"clusterctl", func(e *env, t *testing.T) { e.clusterctlReads(t) }},
		{"inspector", (*env).inspectorReads},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(e.sub(t), t) })
	}
}

// sub is the env as seen from t, a subtest of the test that made it.
func (e *env) sub(t *testing.T) *env {
	c := *e
	c.t, c.Lab, c.planted = t, e.Lab.For(t), nil
	return &c
}
