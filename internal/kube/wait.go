package kube

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// WatchFunc opens a watch on the objects a wait depends on.
type WatchFunc func(ctx context.Context) (watch.Interface, error)

// WatchResource watches gvr's objects in ns ("" for all or cluster-scoped),
// narrowed by opts (a field or label selector).
func WatchResource(r *Reader, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) WatchFunc {
	return func(ctx context.Context) (watch.Interface, error) {
		if ns == "" {
			return r.Resource(gvr).Watch(ctx, opts)
		}
		return r.Resource(gvr).Namespace(ns).Watch(ctx, opts)
	}
}

// Until re-runs check on every event of the watches until it reports done
// or an error, or ctx ends (then the error is ctx's). What is already true
// needs no watch: check runs once first, and only if that is not done are
// the watches opened, and check run again once they are, so no change
// between the two is missed. A watch that cannot open yet (a resource whose
// CRD a chart is still installing) is retried with a back-off, and each
// retry re-runs the check.
func Until(ctx context.Context, watches []WatchFunc, check func(ctx context.Context) (bool, error)) error {
	if done, err := check(ctx); err != nil || done {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan struct{}, 1)
	fire := func() {
		select {
		case events <- struct{}{}:
		default:
		}
	}
	var opened sync.WaitGroup
	opened.Add(len(watches))
	for _, w := range watches {
		go func(w WatchFunc) {
			first := true
			backoff := 250 * time.Millisecond
			for ctx.Err() == nil {
				wi, err := w(ctx)
				if first {
					opened.Done()
					first = false
				}
				if err != nil {
					select {
					case <-ctx.Done():
						return
					case <-time.After(backoff):
					}
					backoff = min(2*backoff, 5*time.Second)
					fire()
					continue
				}
				backoff = 250 * time.Millisecond
				for range wi.ResultChan() {
					fire()
				}
				wi.Stop()
				// The server ended the watch: look again, then resume.
				fire()
			}
		}(w)
	}
	opened.Wait()
	for {
		done, err := check(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-events:
		}
	}
}
