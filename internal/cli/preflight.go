package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/engine"
	"github.com/mgmtctl/mgmtctl/internal/preflight"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// preflight runs the checks for the selected phases before the first
// change, minus those skipped. A failure is reported as a run's error
// (exit 1, or the class of what it met: an unreachable host is 4) with
// nothing touched; a check that could not look is a warning. With show,
// every check is printed.
func (r *run) preflight(ctx context.Context, selected []step.Phase, skip []string, show bool) error {
	rel := &preflight.Released{Cache: preflight.CacheFile(r.o.CacheDir)}
	var checks []preflight.Check
	for _, c := range r.o.Preflight(r.s, selected, rel) {
		if !slices.Contains(skip, c.Name) && !slices.Contains(skip, "all") {
			checks = append(checks, c)
		}
	}
	start := time.Now()
	results := preflight.Run(ctx, checks)
	r.preflightTook = time.Since(start)
	r.log.Logger.Info("preflight", "checks", len(results), "took", r.preflightTook.String())
	if show && r.g.output == "json" {
		type res struct {
			Check  string `json:"check"`
			State  string `json:"state"`
			Detail string `json:"detail"`
			MS     int64  `json:"ms"`
		}
		var out []res
		for _, x := range results {
			st, d := "ok", x.Detail
			switch {
			case x.Failed():
				st, d = "failed", x.Err.Error()
			case x.Skipped():
				st, d = "skipped", x.Err.Error()
			}
			out = append(out, res{x.Name, st, r.x.String(d), x.Took.Milliseconds()})
		}
		enc := json.NewEncoder(r.o.Out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	}
	for _, x := range results {
		switch {
		case show && r.g.output != "json" && x.Err == nil:
			fmt.Fprintf(r.o.Out, "ok: preflight/%s: %s (%s)\n", x.Name, x.Detail, x.Took.Round(time.Millisecond))
		case show && r.g.output != "json" && x.Failed():
			fmt.Fprintf(r.o.Out, "failed: preflight/%s: %s\n", x.Name, r.x.String(x.Err.Error()))
		case x.Skipped():
			fmt.Fprintf(r.info(), "warning: preflight/%s: %s\n", x.Name, r.x.String(x.Err.Error()))
		}
	}
	if err := preflight.Verdict(results); err != nil {
		fmt.Fprintf(r.o.Err, "error: %s\n", r.x.String(err.Error()))
		switch hint := nextHint(err); {
		case hint != "":
			fmt.Fprint(r.o.Err, hint)
		case !show:
			fmt.Fprintf(r.o.Err, "next: fix what it names, or skip a check with --skip-preflight NAME\n")
		}
		return reported{err}
	}
	return nil
}

func newPreflight(g *global, o *Options) *cobra.Command {
	var tags, skipTags []string
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Run the checks apply makes before its first change, and change nothing",
		Long: "preflight checks, for the phases apply would run (--tags, --skip-tags), that every pin they\n" +
			"fetch exists where it will be fetched from (the cloud image, the k3s release and its\n" +
			"installer, the charts' versions in their repositories) and that the phases before them have\n" +
			"done their part (a VM that exists and runs, k3s installed). The checks run side by side and\n" +
			"read only; a file found once is remembered in ~/.cache/mgmtctl/released.json. apply runs\n" +
			"them itself before its first change. Exit 0 when all pass, 1 when one fails, 2 for invalid\n" +
			"config or usage, 4 when a host cannot be reached or its host key is refused.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := newRun(g, o)
			if err != nil {
				return err
			}
			r.s.ReadOnly = true
			selected, err := engine.SelectPhases(o.Phases(r.s), parseTags(tags), parseTags(skipTags))
			if err != nil {
				return usageError{err}
			}
			if err := r.open(); err != nil {
				return err
			}
			defer r.close()
			return r.preflight(cmd.Context(), selected, nil, true)
		},
	}
	cmd.Flags().StringSliceVar(&tags, "tags", nil, "check for only these phases ("+phaseTags()+")")
	cmd.Flags().StringSliceVar(&skipTags, "skip-tags", nil, "check for all phases but these")
	return cmd
}
