package step

import "context"

// Reporter receives progress from a step that waits, so the user sees what
// it waits for while it waits.
type Reporter interface {
	Progress(msg string)
}

type reporterKey struct{}

// WithReporter returns a context carrying r.
func WithReporter(ctx context.Context, r Reporter) context.Context {
	return context.WithValue(ctx, reporterKey{}, r)
}

// Progress reports msg to the run's reporter, if any.
func Progress(ctx context.Context, msg string) {
	if r, ok := ctx.Value(reporterKey{}).(Reporter); ok {
		r.Progress(msg)
	}
}
