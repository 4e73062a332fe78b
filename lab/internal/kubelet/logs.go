package kubelet

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The container log files are kept as containerd keeps them, in the CRI
// logging format (k8s.io/cri-api docs, "CRI container logs", and
// Kubernetes v1.36.3 pkg/kubelet/kuberuntime/logs/logs.go, the reader
// kubectl logs goes through; the layout from
// pkg/kubelet/kuberuntime/helpers.go BuildContainerLogsDirectory): one line per record,
// "<RFC3339Nano time> <stream> <tag> <content>", the tag F for a full
// line and P for a part of a longer one. Each start of a container has
// its own file, /var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log.

// LogDir is where the kubelet keeps the pods' logs.
const LogDir = "/var/log/pods"

// logPath is the log file of a container's restart'th start.
func (k *Kubelet) logPath(ns, pod, uid, container string, restart int32) string {
	dir := k.LogDir
	if dir == "" {
		dir = LogDir
	}
	return filepath.Join(dir, ns+"_"+pod+"_"+uid, container, strconv.Itoa(int(restart))+".log")
}

// openLog opens the log file of the container's next start (its first,
// or the restart about to be counted).
func (k *Kubelet) openLog(p *corev1.Pod, container string, st *podState) (*os.File, error) {
	restart := st.restarts
	if st.everStarted {
		restart++
	}
	path := k.logPath(p.Namespace, p.Name, string(p.UID), container, restart)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
}

// criWriter writes a container's streams into its log file as CRI
// records, a line at a time.
type criWriter struct {
	mu  sync.Mutex
	wg  sync.WaitGroup
	f   io.Writer
	now func() time.Time
}

// wait returns once every stream was closed and written out.
func (w *criWriter) wait() { w.wg.Wait() }

// stream returns the writer of one stream ("stdout" or "stderr").
func (w *criWriter) stream(name string) io.WriteCloser {
	pr, pw := io.Pipe()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		r := bufio.NewReaderSize(pr, 16<<10)
		for {
			line, err := r.ReadSlice('\n')
			if len(line) > 0 {
				tag := "F"
				if !bytes.HasSuffix(line, []byte("\n")) {
					// A part: a line longer than the buffer, or the
					// stream ended mid-line.
					tag = "P"
				}
				w.record(name, tag, bytes.TrimSuffix(line, []byte("\n")))
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return
			}
		}
	}()
	return pw
}

func (w *criWriter) record(stream, tag string, content []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	fmt.Fprintf(w.f, "%s %s %s %s\n", now().UTC().Format(time.RFC3339Nano), stream, tag, content)
}

// logRecord is one parsed CRI record.
type logRecord struct {
	time    time.Time
	stream  string
	full    bool
	content string
}

func parseRecord(line string) (logRecord, bool) {
	f := strings.SplitN(line, " ", 4)
	if len(f) < 3 {
		return logRecord{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil {
		return logRecord{}, false
	}
	r := logRecord{time: t, stream: f[1], full: f[2] == "F"}
	if len(f) == 4 {
		r.content = f[3]
	}
	return r, true
}

// logOptions are the kubelet log endpoint's query (core/v1
// PodLogOptions, as kubectl logs sends them).
type logOptions struct {
	follow, timestamps bool
	tailLines          int64 // -1: all
	since              time.Time
	limitBytes         int64 // 0: no limit
}

// render writes the records of data as the kubelet returns them: the
// content (a full line with its newline), optionally behind its time;
// tailLines counts full lines from the end.
func render(w io.Writer, data []byte, o logOptions) (int64, error) {
	lines := strings.Split(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var recs []logRecord
	for _, l := range lines {
		if r, ok := parseRecord(l); ok && !r.time.Before(o.since) {
			recs = append(recs, r)
		}
	}
	if o.tailLines >= 0 {
		full := int64(0)
		i := len(recs)
		for i > 0 {
			if recs[i-1].full {
				if full == o.tailLines {
					break
				}
				full++
			}
			i--
		}
		recs = recs[i:]
	}
	var n int64
	for _, r := range recs {
		var s string
		if o.timestamps {
			s = r.time.Format(time.RFC3339Nano) + " "
		}
		s += r.content
		if r.full {
			s += "\n"
		}
		if o.limitBytes > 0 && n+int64(len(s)) > o.limitBytes {
			s = s[:o.limitBytes-n]
		}
		m, err := io.WriteString(w, s)
		n += int64(m)
		if err != nil || (o.limitBytes > 0 && n >= o.limitBytes) {
			return n, err
		}
	}
	return n, nil
}

// readFile reads a log file; a container that never wrote has none.
func readFile(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	return b, err
}
