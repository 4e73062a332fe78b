package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decode fills out from the YAML document in data, strictly: unknown fields,
// wrong types, duplicate keys and aliases are errors. Unlike yaml.v3's own
// decoder it reports every problem with its field path, and it records the
// line of every field it saw so later validation can point at it.
func decode(data []byte, out any, r *report) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		r.addNoValue("", "not valid YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		r.addNoValue("", "file is empty")
		return
	}
	r.lines[""] = doc.Content[0].Line
	d := decoder{r: r}
	d.value(doc.Content[0], reflect.ValueOf(out).Elem(), "")
}

type decoder struct{ r *report }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	// A mapping key's line was recorded by the caller: a field whose value
	// is a block starts on the key's line, not on its first child's.
	if _, ok := d.r.lines[path]; !ok {
		d.r.lines[path] = n.Line
	}
	if n.Kind == yaml.AliasNode {
		d.r.addNoValue(path, "YAML aliases are not supported; write the value out")
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an explicit null leaves the default in place
	}
	if d.r.set != nil {
		d.r.set[path] = true
	}
	switch v.Kind() {
	case reflect.Pointer:
		// An optional section (spec.backup.s3): present once written.
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.r.addNoValue(path, "must be a list, not %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.value(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.r.addNoValue(path, "must be a mapping, not %s", kindName(n))
			return
		}
		m := reflect.MakeMap(v.Type())
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			kp := join(path, k.Value)
			d.r.lines[kp] = k.Line
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				d.r.add(kp, k.Value, "duplicate key")
				continue
			}
			ev := reflect.New(v.Type().Elem()).Elem()
			d.value(val, ev, kp)
			m.SetMapIndex(reflect.ValueOf(k.Value), ev)
		}
		v.Set(m)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.r.addNoValue(path, "must be a string, not %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!str") {
			d.r.add(path, n.Value, "must be a whole number")
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			d.r.add(path, n.Value, "must be a whole number")
			return
		}
		v.SetInt(i)
	default:
		panic(fmt.Sprintf("config: no decoder for %s", v.Type()))
	}
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.r.addNoValue(path, "must be a mapping, not %s", kindName(n))
		return
	}
	fields := map[string]int{}
	var names []string
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if name == "-" {
			continue // derived by Load, not written in the file
		}
		fields[name] = i
		names = append(names, name)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		d.r.lines[kp] = k.Line
		idx, ok := fields[k.Value]
		if !ok {
			msg := "unknown field"
			if strings.Contains(strings.ToLower(k.Value), "secret") || strings.Contains(strings.ToLower(k.Value), "password") {
				msg += "; secrets never belong in the config: put them in the secrets file or " + SecretEnv
			} else if s := suggest(k.Value, names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else {
				msg += fmt.Sprintf("; known fields here: %s", strings.Join(names, ", "))
			}
			d.r.addNoValue(kp, "%s", msg)
			continue
		}
		if seen[k.Value] {
			d.r.addNoValue(kp, "duplicate field")
			continue
		}
		seen[k.Value] = true
		d.value(val, v.Field(idx), kp)
	}
}

// suggest returns the known name closest to a misspelt one, if any is close.
func suggest(got string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := distance(strings.ToLower(got), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein edit distance.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
