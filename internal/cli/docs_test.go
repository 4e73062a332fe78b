package cli

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/mgmtctl/mgmtctl/internal/config"
)

func docFiles(t *testing.T) map[string]string {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../ARCHITECTURE.md")
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(b)
	}
	return out
}

// TestDocsCommandsExist: every `mgmtctl ...` command and flag the docs
// mention is one the CLI has.
func TestDocsCommandsExist(t *testing.T) {
	var out, errb strings.Builder
	o := &Options{Out: &out, Err: &errb, Getenv: func(string) string { return "" }}
	root := newRoot(context.Background(), &global{}, o)
	root.InitDefaultCompletionCmd()
	use := regexp.MustCompile(`mgmtctl((?: [a-z][a-z-]*)*)((?: -{1,2}[a-z][a-z-]*(?:[ =][^ ` + "`" + `|]+)?)*)`)
	flag := regexp.MustCompile(`-{1,2}([a-z][a-z-]*)`)
	seen := 0
	for file, text := range docFiles(t) {
		for _, m := range use.FindAllStringSubmatch(text, -1) {
			words := strings.Fields(m[1])
			if len(words) == 0 {
				continue
			}
			cmd, rest, err := root.Find(words)
			if err != nil || cmd == root || len(rest) > 0 && cmd.Args != nil && cmd.Args(cmd, rest) != nil {
				// Prose such as "mgmtctl never skips" is not a command.
				if known(root, words[0]) {
					t.Errorf("%s: %q: no such command", file, m[0])
				}
				continue
			}
			seen++
			for _, f := range flag.FindAllStringSubmatch(m[2], -1) {
				short := len(f[1]) == 1 && (cmd.Flags().ShorthandLookup(f[1]) != nil || cmd.InheritedFlags().ShorthandLookup(f[1]) != nil)
				if cmd.Flags().Lookup(f[1]) == nil && cmd.InheritedFlags().Lookup(f[1]) == nil && !short {
					t.Errorf("%s: %q: %s has no flag --%s", file, m[0], cmd.CommandPath(), f[1])
				}
			}
		}
	}
	if seen < 5 {
		t.Errorf("only %d commands found in the docs; is the pattern broken?", seen)
	}
}

func known(root *cobra.Command, name string) bool {
	for _, c := range root.Commands() {
		if c.Name() == name {
			return true
		}
	}
	return false
}

// schemaPaths lists every leaf field of mgmt.yaml as a dotted path, list
// elements as [].
func schemaPaths(t reflect.Type, prefix string, out map[string]bool) {
	switch t.Kind() {
	case reflect.Pointer:
		// An optional struct (spec.backup.s3): a field of its own, and
		// its fields in their own table.
		if t.Elem().Kind() == reflect.Struct {
			out[prefix] = true
		}
		schemaPaths(t.Elem(), prefix, out)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			name := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			if name == "-" {
				continue
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			schemaPaths(t.Field(i).Type, p, out)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			schemaPaths(t.Elem(), prefix+"[]", out)
			return
		}
		out[prefix] = true
	default:
		out[prefix] = true
	}
}

// TestConfigDocsMatchSchema: docs/config.md documents every field of the
// schema, and no field that does not exist.
func TestConfigDocsMatchSchema(t *testing.T) {
	schema := map[string]bool{}
	schemaPaths(reflect.TypeOf(config.ManagementCluster{}), "", schema)
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	section := ""
	row := regexp.MustCompile("^\\| `([A-Za-z0-9.]+)` \\|")
	for _, line := range strings.Split(string(b), "\n") {
		h, ok := strings.CutPrefix(line, "## ")
		if !ok {
			h, ok = strings.CutPrefix(line, "### ") // a struct's own table
		}
		if ok {
			section = strings.Fields(strings.TrimSuffix(h, ","))[0]
			section = strings.TrimSuffix(section, ",")
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		field := m[1]
		var p string
		switch {
		case section == "Top":
			p = field
		case section == "spec.providers", section == "spec.servers":
			p = section + "[]." + field
		case strings.HasPrefix(section, "spec."):
			if strings.Contains(field, ".") {
				p = "spec." + field
			} else {
				p = section + "." + field
			}
		default:
			continue // secrets and laptop files: not mgmt.yaml
		}
		documented[p] = true
	}
	var missing, extra []string
	for p := range schema {
		if !documented[p] {
			missing = append(missing, p)
		}
	}
	for p := range documented {
		if !schema[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("fields not in docs/config.md: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("docs/config.md documents fields that do not exist: %v", extra)
	}
}
