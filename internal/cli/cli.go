// Package cli is mgmtctl's command line: it parses flags, loads the config,
// builds the run's views and phases, and maps the outcome to an exit code.
// It is the only package that knows about streams and exit codes; it gets
// both injected, so every command runs in-process in tests.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/config"
	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/health"
	"github.com/mgmtctl/mgmtctl/internal/kubeconfig"
	"github.com/mgmtctl/mgmtctl/internal/localfile"
	"github.com/mgmtctl/mgmtctl/internal/phase"
	"github.com/mgmtctl/mgmtctl/internal/preflight"
	"github.com/mgmtctl/mgmtctl/internal/pvelock"
	"github.com/mgmtctl/mgmtctl/internal/redact"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/session"
	"github.com/mgmtctl/mgmtctl/internal/statuscheck"
	"github.com/mgmtctl/mgmtctl/internal/step"
	"github.com/mgmtctl/mgmtctl/internal/ui"
)

// Options are everything the CLI takes from its process.
type Options struct {
	In       io.Reader
	Out, Err io.Writer
	// Terminal says Out is a TTY (for the spinner).
	Terminal bool
	Getenv   func(string) string
	Home     string
	CacheDir string
	Hostname string
	Pid      int
	Now      func() time.Time
	Version  string
	// Phases builds the phases of a run; nil means phase.Build.
	Phases func(*session.Session) []step.Phase
	// Destroy builds the destroy command's phase; nil means phase.Destroy.
	Destroy func(*session.Session) step.Phase
	// Preflight builds the checks before a run's first change; nil means
	// phase.Preflight.
	Preflight func(*session.Session, []step.Phase, *preflight.Released) []preflight.Check
	// Exec is what carries out the plans of a run; nil means the
	// session's (*session.Session).Executor.
	Exec func(*session.Session) step.Executor
}

// global holds the flags every command shares.
type global struct {
	config, secrets, output string
	verbose                 bool
}

// Execute runs the command line args (without the program name) and
// returns the process exit code.
func Execute(ctx context.Context, args []string, o Options) int {
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Phases == nil {
		o.Phases = phase.Build
	}
	if o.Destroy == nil {
		o.Destroy = phase.Destroy
	}
	if o.Preflight == nil {
		o.Preflight = phase.Preflight
	}
	if o.Exec == nil {
		o.Exec = (*session.Session).Executor
	}
	g := &global{}
	root := newRoot(ctx, g, &o)
	root.SetArgs(args)
	root.SetIn(o.In)
	root.SetOut(o.Out)
	root.SetErr(o.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var code exitError
	if errors.As(err, &code) {
		return int(code)
	}
	// Cobra's own errors (unknown flag, bad argument count) are usage.
	if !isReported(err) {
		fmt.Fprintf(o.Err, "error: %v\n", err)
	}
	return exitCode(err)
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageError{fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())}
		}
		return usageError{fmt.Errorf("%s takes no arguments (got %q)", cmd.CommandPath(), args)}
	}
	return nil
}

// exitError carries an exit code from a command that already printed its
// outcome.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// reported wraps an error the command already printed.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

func isReported(err error) bool {
	var r reported
	return errors.As(err, &r)
}

func newRoot(ctx context.Context, g *global, o *Options) *cobra.Command {
	root := &cobra.Command{
		Use:   "mgmtctl",
		Short: "Build a Cluster API management cluster on Proxmox VE, idempotently",
		Long: `mgmtctl converges a Cluster API management cluster on Proxmox VE, on one node
or as three k3s servers across a Proxmox cluster behind a VIP: VMs from the pinned
Ubuntu cloud image, k3s, cert-manager, cluster-api-operator, the five providers,
and kubeconfigs on this laptop. A second run changes nothing.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVarP(&g.config, "config", "c", "mgmt.yaml", "config file")
	root.PersistentFlags().StringVar(&g.secrets, "secrets", "", "secrets file (default: secrets.yaml beside the config)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "print more detail")
	root.AddCommand(
		newInit(g, o),
		newValidate(g, o),
		newApply(g, o, false),
		newApply(g, o, true),
		newStatus(g, o),
		newKubeconfig(g, o),
		newBackup(g, o),
		newRestore(g, o),
		newDestroy(g, o),
		newProxmox(g, o),
		newPreflight(g, o),
		newUpgrade(g, o),
		newVersion(o),
	)
	return root
}

// phaseTags is the phases' tags as --tags takes them: "vm,k3s,…".
func phaseTags() string {
	tags := make([]string, len(step.Tags))
	for i, t := range step.Tags {
		tags[i] = string(t)
	}
	return strings.Join(tags, ",")
}

func (g *global) validateOutput() error {
	if g.output != "text" && g.output != "json" {
		return usageError{fmt.Errorf("--output must be text or json (got %q)", g.output)}
	}
	return nil
}

// load reads and validates the config, printing every problem.
func (g *global) load(o *Options) (*config.Loaded, error) {
	l, err := config.Load(g.config, g.secrets, config.Env{Home: o.Home, Getenv: o.Getenv})
	if err != nil {
		return nil, printConfigErrors(o, err)
	}
	return l, nil
}

func printConfigErrors(o *Options, err error) error {
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(o.Err, e.Error())
		}
		fmt.Fprintf(o.Err, "%d problem(s) found; nothing was changed\n", len(errs))
		return reported{err}
	}
	return err
}

func newInit(g *global, o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Write a commented mgmt.yaml and secrets.yaml.example (never overwrites)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := config.Init(g.config, config.Env{Home: o.Home, Getenv: o.Getenv})
			if err != nil {
				return err
			}
			for _, f := range files {
				if f.Written {
					fmt.Fprintf(o.Out, "wrote %s\n", f.Path)
				} else {
					fmt.Fprintf(o.Out, "kept %s (exists; not overwritten)\n", f.Path)
				}
			}
			// Say now what validate would say, so the first edit is the
			// right one (typically: no SSH key at the default path yet).
			_, err = config.Load(g.config, g.secrets, config.Env{Home: o.Home, Getenv: o.Getenv})
			var errs config.Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					fmt.Fprintf(o.Out, "note: %s: %s\n", e.Path, e.Msg)
				}
			}
			fmt.Fprintf(o.Out, "next: edit the values marked \"site\", copy secrets.yaml.example to secrets.yaml (chmod 600), then run: mgmtctl validate -c %s\n", g.config)
			return nil
		},
	}
}

func newValidate(g *global, o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "validate",
		Short: "Check the config and secrets; opens no connection",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.validateOutput(); err != nil {
				return err
			}
			l, err := g.load(o)
			if err != nil {
				return err
			}
			src := l.SecretSource
			if src == "" {
				src = "not set (the capi phase needs it: " + l.SecretsPath + " or " + config.SecretEnv + ")"
			}
			if g.output == "json" {
				// encoding/json, not %q: Go's quoting is not JSON's
				// for every string (\x escapes, invalid UTF-8).
				return json.NewEncoder(o.Out).Encode(struct {
					Valid       bool   `json:"valid"`
					Config      string `json:"config"`
					TokenSecret string `json:"tokenSecret"`
				}{true, l.Path, src})
			}
			fmt.Fprintf(o.Out, "%s: valid\n", l.Path)
			fmt.Fprintf(o.Out, "token secret: %s\n", src)
			return nil
		},
	}
}

type applyFlags struct {
	tags, skipTags []string
	check, diff    bool
	detailed       bool
	acceptNew      bool
	noSnapshot     bool
	skipPreflight  []string
	waitTimeout    time.Duration
	timings        bool
}

func parseTags(names []string) []step.Tag {
	var out []step.Tag
	for _, n := range names {
		for _, p := range strings.Split(n, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, step.Tag(p))
			}
		}
	}
	return out
}

func newApply(g *global, o *Options, plan bool) *cobra.Command {
	f := &applyFlags{}
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Converge the management cluster, phase by phase",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if plan {
				f.check, f.diff = true, true
			}
			return runApply(cmd.Context(), g, o, f)
		},
	}
	if plan {
		cmd.Use, cmd.Short = "plan", "Show what apply would change (apply --check --diff)"
	}
	cmd.Flags().StringSliceVar(&f.tags, "tags", nil, "run only these phases ("+phaseTags()+")")
	cmd.Flags().StringSliceVar(&f.skipTags, "skip-tags", nil, "skip these phases")
	cmd.Flags().BoolVar(&f.detailed, "detailed-exitcode", false, "exit 3 when changes were made or are pending")
	cmd.Flags().BoolVar(&f.acceptNew, "accept-new-host-key", false, "learn the VM's SSH host key although this run did not create the VM")
	cmd.Flags().BoolVar(&f.noSnapshot, "no-snapshot", false, "take no backup before a risky change (a k3s upgrade, a provider's version)")
	cmd.Flags().StringSliceVar(&f.skipPreflight, "skip-preflight", nil, "skip these preflight checks (mgmtctl preflight names them; all: every one)")
	cmd.Flags().BoolVar(&f.timings, "timings", false, "after the recap, say where the run's time went: the preflight, each phase, each host, the slowest steps (-o json: each step's duration_ms)")
	cmd.Flags().DurationVar(&f.waitTimeout, "wait-timeout", 0, "bound every wait (defaults: the VM answering SSH 5m, node Ready 5m, provider API 5m, a chart 10m, a provider 10m)")
	if !plan {
		cmd.Flags().BoolVar(&f.check, "check", false, "change nothing; report what would change")
		cmd.Flags().BoolVar(&f.diff, "diff", false, "show each change's effects and unified diffs of files and manifests (secrets redacted)")
	}
	return cmd
}

// loadForRun checks the output flag, loads the config and returns a
// redactor that already knows the token secret.
func (g *global) loadForRun(o *Options) (*config.Loaded, *redact.Redactor, error) {
	if err := g.validateOutput(); err != nil {
		return nil, nil, err
	}
	l, err := g.load(o)
	if err != nil {
		return nil, nil, err
	}
	x := &redact.Redactor{}
	x.Add(l.Secrets.Proxmox.TokenSecret, l.Secrets.Proxmox.MgmtctlTokenSecret, l.Secrets.S3.AccessKey, l.Secrets.S3.SecretKey)
	return l, x, nil
}

func runApply(ctx context.Context, g *global, o *Options, f *applyFlags) error {
	r, err := newRun(g, o)
	if err != nil {
		return err
	}
	l, x, s := r.l, r.x, r.s

	if f.waitTimeout < 0 {
		return usageError{fmt.Errorf("--wait-timeout must be positive, got %s", f.waitTimeout)}
	}
	s.ReadOnly, s.AcceptNewHostKey, s.WaitTimeout, s.NoSnapshot = f.check, f.acceptNew, f.waitTimeout, f.noSnapshot
	all := o.Phases(s)
	selected, err := engine.SelectPhases(all, parseTags(f.tags), parseTags(f.skipTags))
	if err != nil {
		return usageError{err}
	}
	if err := knownSkips(o.Preflight(s, all, &preflight.Released{}), f.skipPreflight); err != nil {
		return usageError{err}
	}
	for _, p := range selected {
		if p.Tag == step.TagCAPI {
			if err := l.RequireSecret(); err != nil {
				return printConfigErrors(o, err)
			}
		}
	}

	if err := r.open(); err != nil {
		return err
	}
	defer r.close()
	s.WarmVMs(ctx)
	if err := r.preflight(ctx, selected, f.skipPreflight, false); err != nil {
		return err
	}
	listeners := r.listeners(f.diff)
	if f.timings && g.output != "json" {
		t := ui.NewTimings(o.Out)
		t.Preflight = r.preflightTook
		listeners = engine.Listeners{listeners, t}
	}
	res, err := engine.Run(ctx, selected, engine.Options{Check: f.check, Now: o.Now, Lost: r.s.Lost, Exec: o.Exec(r.s)}, listeners)
	if err != nil {
		if g.output == "json" {
			fmt.Fprintf(o.Err, "error: %s\n%sdebug log: %s\n", x.String(err.Error()), nextHint(err), r.log.Path)
		} else {
			fmt.Fprintf(o.Err, "error: %s\n%s", x.String(err.Error()), nextHint(err))
		}
		return reported{err}
	}
	if f.detailed && res.Pending > 0 {
		return exitError(ExitChanges)
	}
	return nil
}

// nextHint says what to run or check after a failure, by error class.
func nextHint(err error) string {
	var hk *remote.HostKeyError
	var locked *remote.LockedError
	var apiLocked *pvelock.LockedError
	var unreachable *remote.UnreachableError
	var dropped *remote.DroppedError
	switch {
	case errors.As(err, &hk):
		return "next: verify the host key as described above; mgmtctl never skips host key checks\n"
	case errors.As(err, &locked), errors.As(err, &apiLocked):
		return "next: wait for the other run to finish, then run mgmtctl again\n"
	case errors.As(err, &dropped):
		host, _, err := net.SplitHostPort(dropped.Addr)
		if err != nil {
			host = dropped.Addr
		}
		return fmt.Sprintf("next: check the network to %s (%s), then run the same command again: it resumes where this run stopped\n", dropped.Host, host)
	case errors.As(err, &unreachable):
		host, port, err := net.SplitHostPort(unreachable.Addr)
		if err != nil {
			host, port = unreachable.Addr, "22"
		}
		return fmt.Sprintf("next: check that %s answers SSH (ssh -p %s %s), then run mgmtctl again\n", unreachable.Addr, port, host)
	case errors.Is(err, engine.ErrInterrupted):
		return "next: run the same command again; it continues where this run stopped\n"
	}
	return ""
}

func newStatus(g *global, o *Options) *cobra.Command {
	var tags, skip []string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Report whether the cluster is healthy and as configured (read-only)",
		Long: "status asks each phase's questions without changing anything (no lock, no write,\n" +
			"no token minted) and exits 0 when all is healthy and as configured, 1 otherwise;\n" +
			"each unhealthy line says what to run or read next.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), g, o, tags, skip)
		},
	}
	cmd.Flags().StringSliceVar(&tags, "tags", nil, "look at these phases only (vm, k3s, addons, capi, kubeconfig, inspector)")
	cmd.Flags().StringSliceVar(&skip, "skip-tags", nil, "skip these phases")
	return cmd
}

func runStatus(ctx context.Context, g *global, o *Options, tags, skip []string) error {
	l, x, err := g.loadForRun(o)
	if err != nil {
		return err
	}
	// A check session: every host behind the read-only gate, no lock.
	s := &session.Session{Config: l, ReadOnly: true, Redact: x.Add}
	defer s.Close()
	selected, err := engine.SelectPhases(phase.Build(s), parseTags(tags), parseTags(skip))
	if err != nil {
		return usageError{err}
	}
	s.Dialer = &remote.Dialer{AgentSocket: o.Getenv("SSH_AUTH_SOCK"), Redactor: x, Retry: remote.Retry{Attempts: 2},
		KeepAlive: keepAlive(l.Cluster.Spec.SSH)}
	s.WarmVMs(ctx)
	r := health.Run(ctx, selected, statuscheck.Extras(s))
	if g.output == "json" {
		err = health.WriteJSON(o.Out, r, x)
	} else {
		err = health.WriteText(o.Out, r, x)
	}
	if err != nil {
		return err
	}
	if !r.Healthy {
		// The same class, the same exit code as apply: a host that does
		// not answer or whose key is refused is 4, anything else 1.
		if r.Failure != nil && exitCode(r.Failure) == ExitUnreachable {
			return reported{r.Failure}
		}
		return reported{errors.New("unhealthy")}
	}
	return nil
}

func newKubeconfig(g *global, o *Options) *cobra.Command {
	var merge bool
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the admin kubeconfig path, or merge its context into $KUBECONFIG",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := g.load(o)
			if err != nil {
				return err
			}
			p := l.KubeconfigPath()
			admin, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("no kubeconfig at %s yet: run mgmtctl apply --tags kubeconfig first", p)
			}
			if !merge {
				fmt.Fprintln(o.Out, filepath.Clean(p))
				return nil
			}
			target := filepath.Join(o.Home, ".kube", "config")
			if kc := o.Getenv("KUBECONFIG"); kc != "" {
				target = filepath.SplitList(kc)[0]
			}
			name := l.Cluster.Metadata.Name
			cur, err := os.ReadFile(target)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			merged, switched, err := kubeconfig.Merged(admin, name, target, cur)
			if err != nil {
				return err
			}
			if err := localfile.Write(target, merged); err != nil {
				return err
			}
			if switched {
				fmt.Fprintf(o.Out, "merged context %s into %s and made it the current context (%s had none)\n", name, target, target)
				return nil
			}
			fmt.Fprintf(o.Out, "merged context %s into %s (current context unchanged; switch with: kubectl config use-context %s)\n", name, target, name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&merge, "merge", false, "merge the context into $KUBECONFIG (or ~/.kube/config); switch to it only if that file has no current context")
	return cmd
}

func newVersion(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print mgmtctl's version and the versions it pins by default",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(o.Out, "mgmtctl %s\n", o.Version)
			fmt.Fprintf(o.Out, "default pins: k3s %s, cert-manager %s, cluster-api-operator %s, cluster-api %s, CAPMOX %s, IPAM in-cluster %s\n",
				config.DefaultK3sVersion, config.DefaultCertManager, config.DefaultOperator, config.DefaultCAPIVersion, config.DefaultCAPMOXVersion, config.DefaultIPAMVersion)
			return nil
		},
	}
}

// knownSkips refuses a --skip-preflight name that no check of a whole run
// has (checks), before the first connection: a misspelt name would
// otherwise skip nothing, silently. "all" skips every check, and
// "prerequisites" is the check a run of later phases alone adds.
func knownSkips(checks []preflight.Check, skip []string) error {
	known := []string{"all", "prerequisites"}
	for _, c := range checks {
		known = append(known, c.Name)
	}
	for _, n := range skip {
		if !slices.Contains(known, n) {
			slices.Sort(known)
			return fmt.Errorf("--skip-preflight %s: no preflight check has that name (mgmtctl preflight runs them: %s)", n, strings.Join(known, ", "))
		}
	}
	return nil
}
