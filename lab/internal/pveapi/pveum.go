package pveapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// TokenConfig is the node's token store, priv/token.cfg's format: one
// "<userid>!<tokenid> <secret>" per line (pve-access-control
// src/PVE/TokenConfig.pm). The API accepts any token listed.
type TokenConfig struct{ Path string }

// Read parses the store; a missing file has no tokens.
func (c TokenConfig) Read() (map[string]string, error) {
	b, err := os.ReadFile(c.Path)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	tokens := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && fullTokenID.MatchString(f[0]) {
			tokens[f[0]] = f[1]
		}
	}
	return tokens, nil
}

func (c TokenConfig) write(tokens map[string]string) error {
	var b strings.Builder
	for _, id := range sortedIDs(tokens) {
		fmt.Fprintf(&b, "%s %s\n", id, tokens[id])
	}
	tmp := c.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.Path)
}

func sortedIDs(m map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

var (
	userID      = regexp.MustCompile(`^[^\s:/@]+@[A-Za-z][A-Za-z0-9.\-_]+$`)
	tokenSubID  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.\-_]+$`)
	fullTokenID = regexp.MustCompile(`^[^\s:/@]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$`)
)

// Users are the lab's user.cfg: the users a token may belong to.
var Users = []string{"root@pam", "capmox@pve"}

// PVEUM runs the lab's `pveum user token add|remove|delete|list` against
// store, as pve-access-control's pveum does (src/PVE/CLI/pveum.pm,
// src/PVE/API2/User.pm): add prints the new secret once, remove revokes
// it at once. Other pveum commands are not simulated.
func PVEUM(args []string, store TokenConfig, stdout, stderr io.Writer) int {
	die := func(format string, a ...any) int {
		fmt.Fprintf(stderr, format+"\n", a...)
		return 255
	}
	format := "text"
	var pos []string
	opts := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, val, has := strings.Cut(name, "=")
			if !has {
				if i+1 >= len(args) {
					return die("400 Parameter verification failed.\n%s: missing value", name)
				}
				i++
				val = args[i]
			}
			if name == "output-format" {
				format = val
				continue
			}
			opts[name] = val
			continue
		}
		pos = append(pos, a)
	}
	if len(pos) < 3 || pos[0] != "user" || pos[1] != "token" {
		return die("the lab's pveum knows only: pveum user token add|remove|list <userid> [<tokenid>]")
	}
	cmd, rest := pos[2], pos[3:]
	if len(rest) == 0 {
		return die("400 not enough arguments\npveum user token %s <userid> <tokenid> [OPTIONS]", cmd)
	}
	user := rest[0]
	if !userID.MatchString(user) {
		return die("400 Parameter verification failed.\nuserid: value does not look like a valid user name")
	}
	known := false
	for _, u := range Users {
		known = known || u == user
	}
	if !known {
		return die("no such user ('%s')", user)
	}
	tokens, err := store.Read()
	if err != nil {
		return die("%v", err)
	}
	if cmd == "list" {
		var list []map[string]any
		for _, id := range sortedIDs(tokens) {
			if sub, ok := strings.CutPrefix(id, user+"!"); ok {
				list = append(list, map[string]any{"tokenid": sub, "privsep": 0})
			}
		}
		return print(stdout, format, list)
	}
	if len(rest) < 2 {
		return die("400 not enough arguments\npveum user token %s <userid> <tokenid> [OPTIONS]", cmd)
	}
	sub := rest[1]
	if !tokenSubID.MatchString(sub) {
		return die("400 Parameter verification failed.\ntokenid: invalid format")
	}
	full := user + "!" + sub
	switch cmd {
	case "add":
		if _, ok := tokens[full]; ok {
			return die("400 Parameter verification failed.\ntokenid: Token already exists.")
		}
		tokens[full] = uuid()
		if err := store.write(tokens); err != nil {
			return die("generating token failed: %v", err)
		}
		privsep := 1
		if opts["privsep"] == "0" {
			privsep = 0
		}
		return print(stdout, format, map[string]any{"full-tokenid": full, "info": map[string]any{"privsep": privsep}, "value": tokens[full]})
	case "remove", "delete":
		if _, ok := tokens[full]; !ok {
			return die("no such token '%s' for user '%s'", sub, user)
		}
		delete(tokens, full)
		if err := store.write(tokens); err != nil {
			return die("deleting token failed: %v", err)
		}
		return 0
	}
	return die("unknown command 'pveum user token %s'", cmd)
}

// print writes an API result in one of the standard output formats. The
// text table's exact borders are not simulated (UNVERIFIED); json is
// JSON::PP's canonical form.
func print(w io.Writer, format string, v any) int {
	switch format {
	case "json":
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "%s\n", b)
	case "json-pretty":
		b, _ := json.MarshalIndent(v, "", "   ")
		fmt.Fprintf(w, "%s\n", b)
	default:
		if m, ok := v.(map[string]any); ok {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				val := m[k]
				if _, nested := val.(map[string]any); nested {
					b, _ := json.Marshal(val)
					val = string(b)
				}
				fmt.Fprintf(w, "%-12s %v\n", k, val)
			}
			return 0
		}
		for _, row := range v.([]map[string]any) {
			fmt.Fprintf(w, "%v\n", row["tokenid"])
		}
	}
	return 0
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b)
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
