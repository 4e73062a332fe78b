package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/util/jsonpath"
)

// watchJSONPath runs `kubectl get ... --watch` (argv, without the watch
// flags) until one of the listed objects has value at path, or timeout.
//
// A list watch, not `kubectl wait` on one name: helm-controller deletes and
// recreates a Job when its chart changes, and a watch on the name's field
// selector sees the DELETED and the new ADDED, where `kubectl wait` stops
// on NotFound. kubectl is started again if the server ends its watch. The
// error names the last value seen of every object, so a timeout says how
// far things got.
func watchJSONPath(argv []string, path, value string, timeout time.Duration) error {
	jp := jsonpath.New("wait").AllowMissingKeys(true)
	if err := jp.Parse(path); err != nil {
		return fmt.Errorf("jsonpath %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := map[string]string{} // object's UID -> value at path ("<deleted>" once gone)
	order := []string{}
	last := func() string {
		if len(order) == 0 {
			return "no such object was ever listed"
		}
		var parts []string
		for _, uid := range order {
			parts = append(parts, seen[uid])
		}
		return "last seen: " + strings.Join(parts, ", ")
	}
	lastErr := ""
	for ctx.Err() == nil {
		done, err := watchOnce(ctx, argv, func(typ string, obj map[string]any) bool {
			md, _ := obj["metadata"].(map[string]any)
			uid, _ := md["uid"].(string)
			name, _ := md["name"].(string)
			if _, ok := seen[uid]; !ok {
				order = append(order, uid)
			}
			if typ == "DELETED" {
				seen[uid] = name + " <deleted>"
				return false
			}
			var b strings.Builder
			if err := jp.Execute(&b, obj); err != nil {
				seen[uid] = fmt.Sprintf("%s: %v", name, err)
				return false
			}
			seen[uid] = fmt.Sprintf("%s: %q", name, b.String())
			return b.String() == value
		})
		if done {
			return nil
		}
		if err != nil {
			lastErr = err.Error()
		}
		// kubectl ended (the server closed its watch, or it failed):
		// start it again, after a pause if it failed.
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	msg := fmt.Sprintf("never had %s=%q within %s; %s", path, value, timeout, last())
	if lastErr != "" {
		msg += "; kubectl: " + lastErr
	}
	return errors.New(msg)
}

// watchOnce runs one `kubectl get --watch` and hands each event to f until
// f says done, kubectl ends, or ctx ends.
func watchOnce(ctx context.Context, argv []string, f func(typ string, obj map[string]any) bool) (bool, error) {
	args := append(append([]string{}, argv[1:]...), "--watch", "--output-watch-events", "-o", "json")
	cmd := exec.CommandContext(ctx, argv[0], args...)
	// kubectl runs under `ip netns exec`: end the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	dec := json.NewDecoder(bufio.NewReader(out))
	for {
		var ev struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait() // stderr is complete only once kubectl is reaped
			if errors.Is(err, io.EOF) {
				err = nil
			}
			if s := strings.TrimSpace(stderr.String()); s != "" {
				err = errors.New(s)
			}
			return false, err
		}
		if f(ev.Type, ev.Object) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			return true, nil
		}
	}
}
