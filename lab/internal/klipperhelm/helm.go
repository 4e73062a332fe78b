package klipperhelm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// result is one run of the Job's container: what it logged, and helm's
// error if it failed.
type result struct {
	log string
	err error
}

// defaultTimeout is helm's --timeout when the HelmChart sets none: how
// long it waits for hooks (cert-manager's startupapicheck Job) and for
// an uninstall's objects to go.
const defaultTimeout = 300 * time.Second

// helm does what klipper-helm's entry does for an install Job
// (k3s-io/klipper-helm entry, helm_update, at v0.13.3-build20260727):
// helm status, then by the release's state: install (none), upgrade
// (deployed), or, for a failed one, by FAILURE_POLICY: uninstall and
// install again (reinstall, the default), upgrade (retry) or stop
// (abort). A release an interrupted run left pending (or superseded) is
// set failed first; a pending upgrade or a superseded one is retried as
// an upgrade.
func (c *Runner) helm(ctx context.Context, name string, s Spec, j Job) result {
	cfg, err := c.configuration(j, s.TargetNamespace)
	if err != nil {
		return result{err: fmt.Errorf("Error: %v", err)}
	}
	last, err := cfg.Releases.Last(name)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return result{err: fmt.Errorf("Error: %v", err)}
	}
	// helm-controller's contract (chart.go, getJobAndRelatedResources):
	// a release deployed from the Job's config is not touched again.
	if last != nil && last.Info.Status == release.StatusDeployed && s.ConfigHash != "" && last.Labels[ConfigHashLabel] == s.ConfigHash {
		return result{log: fmt.Sprintf("Release %s is already deployed with config hash %s\n", name, s.ConfigHash)}
	}
	var log strings.Builder
	op := "install"
	if last != nil {
		st := last.Info.Status
		switch st {
		case release.StatusPendingInstall, release.StatusPendingUpgrade, release.StatusPendingRollback, release.StatusSuperseded, release.StatusUninstalling:
			fmt.Fprintf(&log, "Previous helm job was interrupted, updating status from %s to failed\n", st)
			last.Info.Status = release.StatusFailed
			if err := cfg.Releases.Update(last); err != nil {
				return result{log: log.String(), err: fmt.Errorf("Error: %v", err)}
			}
			if st == release.StatusPendingUpgrade || st == release.StatusSuperseded {
				fmt.Fprintf(&log, "Retrying upgrade of %s\n", name)
				op = "upgrade"
				break
			}
			st = release.StatusFailed
		case release.StatusDeployed:
			fmt.Fprintf(&log, "Already installed %s\nUpgrading %s\n", name, name)
			op = "upgrade"
		}
		switch st {
		case release.StatusFailed, release.StatusUninstalled, release.StatusUnknown:
			switch policy := cmp.Or(j.Env["FAILURE_POLICY"], "reinstall"); policy {
			case "abort":
				return result{log: log.String(), err: fmt.Errorf("Release status is '%s' and failure policy is '%s'; waiting for operator intervention", st, policy)}
			case "reinstall":
				un := action.NewUninstall(cfg)
				un.Wait, un.Timeout = true, timeout(j)
				if _, err := un.Run(name); err != nil {
					return result{log: log.String(), err: fmt.Errorf("Error: uninstall: %v", err)}
				}
				log.WriteString("Deleted\n")
				op = "install"
			case "retry":
				op = "upgrade"
			default:
				return result{log: log.String(), err: fmt.Errorf("Unknown failure policy '%s'", policy)}
			}
		}
	}
	failed := "INSTALLATION FAILED"
	if op == "upgrade" {
		failed = "UPGRADE FAILED"
	}
	fail := func(err error) result {
		return result{log: log.String(), err: fmt.Errorf("Error: %s: %v", failed, err)}
	}
	if c.fault(name) {
		return fail(fmt.Errorf("labsim fault helm-fail is on for %s", name))
	}
	ch, err := c.locateChart(name, s)
	var re *RepoError
	if errors.As(err, &re) {
		// helm repo add failed: klipper-helm stops before install.
		return result{log: log.String(), err: fmt.Errorf("Error: %v", err)}
	}
	if err != nil {
		return fail(err)
	}
	var labels map[string]string
	if s.ConfigHash != "" {
		labels = map[string]string{ConfigHashLabel: s.ConfigHash}
	}
	var rel *release.Release
	if op == "upgrade" {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Version, up.Timeout, up.Labels = s.TargetNamespace, s.Version, timeout(j), labels
		rel, err = up.RunWithContext(ctx, name, ch, copyValues(s.Values))
	} else {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = name, s.TargetNamespace, s.CreateNamespace
		in.Version, in.Timeout, in.Labels = s.Version, timeout(j), labels
		rel, err = in.RunWithContext(ctx, ch, copyValues(s.Values))
	}
	if err != nil {
		return fail(err)
	}
	// What the helm CLI prints of a release it installed or upgraded.
	fmt.Fprintf(&log, "NAME: %s\nLAST DEPLOYED: %s\nNAMESPACE: %s\nSTATUS: %s\nREVISION: %d\nTEST SUITE: None\n",
		rel.Name, rel.Info.LastDeployed.Format(time.ANSIC), rel.Namespace, rel.Info.Status, rel.Version)
	if rel.Info.Notes != "" {
		fmt.Fprintf(&log, "NOTES:\n%s\n", strings.TrimSpace(rel.Info.Notes))
	}
	return result{log: log.String()}
}

// timeout is the Job's TIMEOUT (helm --timeout), helm's default without.
func timeout(j Job) time.Duration {
	if d, err := time.ParseDuration(j.Env["TIMEOUT"]); err == nil && d > 0 {
		return d
	}
	return defaultTimeout
}

// configuration is Helm's action configuration for the release's
// namespace: its kube client and release storage (Secrets) on the
// container's credentials, as helm in the Job's pod has them.
func (c *Runner) configuration(j Job, ns string) (*action.Configuration, error) {
	cfg := &action.Configuration{}
	if c.KubeClient != nil {
		// Tests: Helm's own stand-in client, the release Secrets on
		// c.CS.
		cfg.KubeClient = c.KubeClient
		cfg.Releases = storage.Init(driver.NewSecrets(c.CS.CoreV1().Secrets(ns)))
		cfg.Capabilities = chartutil.DefaultCapabilities
		cfg.Log = func(string, ...any) {}
		return cfg, nil
	}
	if j.Kube == nil {
		return nil, fmt.Errorf("klipper-helm: the container has no credentials for the API server")
	}
	if err := cfg.Init(newRESTGetter(j.Kube, ns), ns, "secret", func(string, ...any) {}); err != nil {
		return nil, err
	}
	return cfg, nil
}
