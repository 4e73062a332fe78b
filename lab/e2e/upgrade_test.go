package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestUpgradePlan: on a converged lab, upgrade plan says every component
// runs its pin and apply would change nothing, with the newest release of
// each line; after a k3s bump it says what apply then does, and apply
// does exactly that (the snapshot and the k3s upgrade, nothing else);
// a downgrade is shown refused.
func TestUpgradePlan(t *testing.T) {
	t.Parallel()
	e := startConverged(t)
	r := e.mgmtctl("upgrade", "plan")
	mustSucceed(t, r, "upgrade plan")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^k3s\s+v1\.35\.7\+k3s1\s+v1\.35\.7\+k3s1\s+v1\.35\.8\+k3s1\s+none$`),
		regexp.MustCompile(`(?m)^cert-manager\s+v1\.21\.2\s+v1\.21\.2\s+v1\.21\.2\s+none$`),
		regexp.MustCompile(`(?m)^cluster-api-operator\s+0\.28\.0\s+0\.28\.0\s+0\.28\.0\s+none$`),
		regexp.MustCompile(`(?m)^cluster-api\s+v1\.12\.11\s+v1\.12\.11\s+v1\.12\.11\s+none$`),
		regexp.MustCompile(`(?m)^infrastructure-proxmox\s+v0\.9\.1\s+v0\.9\.1\s+v0\.9\.1\s+none$`),
		regexp.MustCompile(`(?m)^ubuntu image\s+on pve\s+noble-server-cloudimg-amd64\.img\s+\?\s+none$`),
		regexp.MustCompile(`apply will change nothing`),
		regexp.MustCompile(`contracts: cluster-api v1beta2, bootstrap-kubeadm v1beta2, control-plane-kubeadm v1beta2, infrastructure-proxmox v1beta2, ipam-in-cluster v1beta2`),
	} {
		if !want.MatchString(r.Stdout) {
			t.Errorf("upgrade plan lacks %s:\n%s", want, r.Stdout)
		}
	}

	// A k3s bump within its line: the plan says what apply does, and apply
	// does that.
	e.editConfig("  kubeconfig:", "  k3s:\n    version: v1.35.8+k3s1\n  kubeconfig:")
	r = e.mgmtctl("upgrade", "plan", "-o", "json")
	mustSucceed(t, r, "upgrade plan -o json")
	var plan struct {
		Components []struct{ Name, Running, Pinned, Action string }
		Order      []string
	}
	if err := json.Unmarshal([]byte(r.Stdout), &plan); err != nil {
		t.Fatalf("%v: %s", err, r.Stdout)
	}
	var moving []string
	for _, c := range plan.Components {
		if c.Action != "none" {
			moving = append(moving, c.Name+":"+c.Action)
		}
	}
	if strings.Join(moving, " ") != "k3s:upgrade" || len(plan.Order) != 1 || !strings.Contains(plan.Order[0], "upgrade k3s to v1.35.8+k3s1 on lab-mgmt") {
		t.Fatalf("the plan after a k3s bump: %s", r.Stdout)
	}
	r = e.apply()
	mustSucceed(t, r, "apply the bump")
	var changed []string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if m := regexp.MustCompile(`^changed: \[[^]]+\] ([^:]+):`).FindStringSubmatch(l); m != nil {
			changed = append(changed, m[1])
		}
	}
	for _, c := range changed {
		if !strings.HasPrefix(c, "k3s/") {
			t.Errorf("apply changed %s, which the plan did not say:\n%s", c, r.Stdout)
		}
	}
	if !strings.Contains(strings.Join(changed, " "), "k3s/install") {
		t.Errorf("apply did not upgrade k3s:\n%s", r.Stdout)
	}
	r = e.mgmtctl("upgrade", "plan")
	mustSucceed(t, r, "upgrade plan after apply")
	if !regexp.MustCompile(`(?m)^k3s\s+v1\.35\.8\+k3s1\s+v1\.35\.8\+k3s1\s+v1\.35\.8\+k3s1\s+none$`).MatchString(r.Stdout) || !strings.Contains(r.Stdout, "apply will change nothing") {
		t.Errorf("upgrade plan after apply:\n%s", r.Stdout)
	}

	e.editConfig("version: v1.35.8+k3s1", "version: v1.34.10+k3s1")
	// A downgrade is shown refused, as apply refuses it, and upgrade plan
	// exits 1 for it.
	r = e.mgmtctl("upgrade", "plan")
	if r.Code != 1 || !strings.Contains(r.Stderr, "apply would refuse 1 of these pins") {
		t.Errorf("upgrade plan with a downgrade: exit %d\n%s", r.Code, r.Stderr)
	}
	if !regexp.MustCompile(`(?m)^k3s\s+v1\.35\.8\+k3s1\s+v1\.34\.10\+k3s1\s+v1\.34\.10\+k3s1\s+refused$`).MatchString(r.Stdout) || !strings.Contains(r.Stdout, "refuse the k3s pin before anything changes") {
		t.Errorf("upgrade plan with a downgrade:\n%s", r.Stdout)
	}
}
