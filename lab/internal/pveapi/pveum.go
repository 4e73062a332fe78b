package pveapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
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

// Access is the cluster's access control as pveum and the API read it:
// the tokens' secrets (priv/token.cfg) and user.cfg (users, tokens with
// their privilege separation, roles, ACLs), both in /etc/pve.
type Access struct {
	Tokens  TokenConfig
	UserCfg string
}

// lock is lock_user_config (pve-access-control src/PVE/AccessControl.pm:
// cfs_lock_file on user.cfg): one change of the access control at a
// time, across pveum and every node's API, each reading user.cfg under
// it before it writes.
func (a Access) lock() (unlock func(), err error) {
	f, err := os.OpenFile(a.UserCfg+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// PVEUM runs the lab's pveum against the cluster's access control, as
// pve-access-control's pveum does (src/PVE/CLI/pveum.pm over
// src/PVE/API2/User.pm, Role.pm, ACL.pm): `user add|delete`, `user token
// add|remove|delete|list` (add prints the new secret once; privsep 1
// unless --privsep 0), `user permissions [ID] [--path P]`, `role
// add|modify|delete` (--privs, --append), `acl modify|delete PATH --roles
// R [--users U] [--tokens T] [--propagate 0|1]`, `pool add|modify|delete`
// (pve-manager PVE/API2/Pool.pm: create_pool, update_pool's --vms with
// --delete and --allow-move, delete_pool). Other pveum commands are not
// simulated.
func PVEUM(args []string, acc Access, stdout, stderr io.Writer) int {
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
	unlock, err := acc.lock()
	if err != nil {
		return die("%v", err)
	}
	defer unlock()
	cfg, err := ReadUserConfig(acc.UserCfg)
	if err != nil {
		return die("%v", err)
	}
	save := func() int {
		if err := cfg.Write(acc.UserCfg); err != nil {
			return die("%v", err)
		}
		return 0
	}
	if len(pos) >= 2 && pos[0] == "role" {
		return pveumRole(pos[1], pos[2:], opts, cfg, save, die)
	}
	if len(pos) >= 2 && pos[0] == "acl" {
		return pveumACL(pos[1], pos[2:], opts, cfg, save, die)
	}
	if len(pos) >= 2 && pos[0] == "pool" {
		return pveumPool(pos[1], pos[2:], opts, cfg, save, die)
	}
	if len(pos) >= 2 && pos[0] == "user" && pos[1] != "token" {
		return pveumUser(pos[1], pos[2:], opts, cfg, save, die, stdout, format)
	}
	if len(pos) < 3 || pos[0] != "user" || pos[1] != "token" {
		return die("the lab's pveum knows only: pveum user add|delete|permissions, pveum user token add|remove|list, pveum role add|modify|delete, pveum acl modify|delete, pveum pool add|modify|delete")
	}
	store := acc.Tokens
	cmd, rest := pos[2], pos[3:]
	if len(rest) == 0 {
		return die("400 not enough arguments\npveum user token %s <userid> <tokenid> [OPTIONS]", cmd)
	}
	user := rest[0]
	if !userID.MatchString(user) {
		return die("400 Parameter verification failed.\nuserid: value does not look like a valid user name")
	}
	if user != "root@pam" && !cfg.Users[user] {
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
				privsep := 0
				if cfg.Tokens[id] {
					privsep = 1
				}
				list = append(list, map[string]any{"tokenid": sub, "privsep": privsep})
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
		cfg.Users[user] = true
		cfg.Tokens[full] = privsep == 1
		if code := save(); code != 0 {
			return code
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
		delete(cfg.Tokens, full)
		for _, members := range cfg.ACL {
			delete(members, full)
		}
		return save()
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

var roleID = regexp.MustCompile(`^[A-Za-z0-9\.\-_]+$`)

// privList parses --privs: privileges separated by commas, semicolons or
// spaces (pve-priv-list), each one the version knows
// (AccessControl::verify_privlist: "invalid privilege '%s'").
func privList(v string, major int) (map[string]bool, error) {
	privs := map[string]bool{}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		if !ValidPriv(major, p) {
			return nil, fmt.Errorf("invalid privilege '%s'", p)
		}
		privs[p] = true
	}
	return privs, nil
}

// LabMajor is the PVE major version the lab's nodes run.
var LabMajor = Major(Version)

func pveumRole(cmd string, rest []string, opts map[string]string, cfg *UserConfig, save func() int, die func(string, ...any) int) int {
	if len(rest) != 1 {
		return die("400 not enough arguments\npveum role %s <roleid> [OPTIONS]", cmd)
	}
	id := rest[0]
	if !roleID.MatchString(id) {
		return die("400 Parameter verification failed.\nroleid: invalid format")
	}
	if BuiltinRoles(LabMajor)[id] != nil {
		return die("cannot modify special role '%s'", id)
	}
	privs, err := privList(opts["privs"], LabMajor)
	if err != nil {
		return die("400 Parameter verification failed.\nprivs: %v", err)
	}
	switch cmd {
	case "add":
		if cfg.Roles[id] != nil {
			return die("create role failed: role '%s' already exists", id)
		}
		cfg.Roles[id] = privs
	case "modify":
		if cfg.Roles[id] == nil {
			return die("update role failed: role '%s' does not exist", id)
		}
		if opts["append"] == "1" {
			for p := range privs {
				cfg.Roles[id][p] = true
			}
		} else {
			cfg.Roles[id] = privs
		}
	case "delete":
		if cfg.Roles[id] == nil {
			return die("delete role failed: role '%s' does not exist", id)
		}
		delete(cfg.Roles, id)
		for _, members := range cfg.ACL {
			for _, roles := range members {
				delete(roles, id)
			}
		}
	default:
		return die("unknown command 'pveum role %s'", cmd)
	}
	return save()
}

func pveumACL(cmd string, rest []string, opts map[string]string, cfg *UserConfig, save func() int, die func(string, ...any) int) int {
	if len(rest) != 1 || opts["roles"] == "" {
		return die("400 not enough arguments\npveum acl %s <path> --roles <string> [OPTIONS]", cmd)
	}
	path := rest[0]
	if !strings.HasPrefix(path, "/") {
		return die("400 Parameter verification failed.\npath: invalid ACL path '%s'", path)
	}
	var members []string
	for _, k := range []string{"users", "tokens"} {
		for _, m := range strings.Split(opts[k], ",") {
			if m == "" {
				continue
			}
			if k == "users" && !cfg.Users[m] {
				return die("update failed: user '%s' does not exist", m)
			}
			if _, ok := cfg.Tokens[m]; k == "tokens" && !ok {
				return die("update failed: token '%s' does not exist", m)
			}
			members = append(members, m)
		}
	}
	if len(members) == 0 {
		return die("400 Parameter verification failed.\nusers: either 'users', 'groups' or 'tokens' is required")
	}
	propagate := opts["propagate"] != "0"
	for _, r := range strings.Split(opts["roles"], ",") {
		if BuiltinRoles(LabMajor)[r] == nil && cfg.Roles[r] == nil {
			return die("update failed: role '%s' does not exist", r)
		}
		for _, m := range members {
			switch cmd {
			case "modify":
				cfg.grant(path, m, r, propagate)
			case "delete":
				delete(cfg.ACL[path][m], r)
			default:
				return die("unknown command 'pveum acl %s'", cmd)
			}
		}
	}
	return save()
}

func pveumUser(cmd string, rest []string, opts map[string]string, cfg *UserConfig, save func() int, die func(string, ...any) int, stdout io.Writer, format string) int {
	switch cmd {
	case "add", "delete":
		if len(rest) != 1 || !userID.MatchString(rest[0]) {
			return die("400 Parameter verification failed.\nuserid: value does not look like a valid user name")
		}
		u := rest[0]
		if cmd == "add" {
			if cfg.Users[u] {
				return die("create user failed: user '%s' already exists", u)
			}
			cfg.Users[u] = true
		} else {
			delete(cfg.Users, u)
		}
		return save()
	case "permissions":
		id := "root@pam"
		if len(rest) > 0 {
			id = rest[0]
		}
		paths := sortedKeys(cfg.ACL)
		if p := opts["path"]; p != "" {
			paths = []string{p}
		}
		return print(stdout, format, cfg.Effective(LabMajor, id, paths))
	}
	return die("unknown command 'pveum user %s'", cmd)
}

// poolName is the pattern of pve-access-control's verify_poolname
// (src/PVE/AccessControl.pm): [A-Za-z0-9.-_], up to three levels.
var poolName = regexp.MustCompile(`^[A-Za-z0-9.\-_]+(?:/[A-Za-z0-9.\-_]+){0,2}$`)

// verifyPoolName is verify_poolname: the depth first, then the
// characters, each with its message (a poolid parameter's error, for
// pveum and the API alike).
func verifyPoolName(pool string) error {
	if strings.Count(pool, "/") > 2 {
		return fmt.Errorf("pool name '%s' nested too deeply (max levels = 3)", pool)
	}
	if !poolName.MatchString(pool) {
		return fmt.Errorf("pool name '%s' contains invalid characters", pool)
	}
	return nil
}

// poolLeader is create_pool's own rule on top of it: a pool's name (a
// nested one's last part) starts with a letter (pve-manager
// PVE/API2/Pool.pm).
var poolLeader = regexp.MustCompile(`^[A-Za-z]`)

// createPool is create_pool's body under lock_user_config: its die
// messages, unprefixed.
func (c *UserConfig) createPool(pool, comment string) error {
	if _, ok := c.Pools[pool]; ok {
		return fmt.Errorf("pool '%s' already exists", pool)
	}
	if i := strings.LastIndexByte(pool, '/'); i >= 0 {
		parent, leaf := pool[:i], pool[i+1:]
		if _, ok := c.Pools[parent]; !ok {
			return fmt.Errorf("parent '%s' of pool '%s' does not exist", parent, pool)
		}
		if !poolLeader.MatchString(leaf) {
			return errors.New("pool name must start with a letter")
		}
	} else if !poolLeader.MatchString(pool) {
		return errors.New("pool name must start with a letter")
	}
	c.addPool(pool)
	if comment != "" {
		c.PoolComments[pool] = comment
	}
	return nil
}

// deletePool is delete_pool's body: only an empty pool, its first
// member named.
func (c *UserConfig) deletePool(pool string) error {
	vms, ok := c.Pools[pool]
	if !ok {
		return fmt.Errorf("pool '%s' does not exist", pool)
	}
	for _, p := range slices.Sorted(maps.Keys(c.Pools)) {
		if strings.HasPrefix(p, pool+"/") && !strings.Contains(p[len(pool)+1:], "/") {
			return fmt.Errorf("pool '%s' is not empty (contains pool '%s')", pool, p)
		}
	}
	if ids := slices.Sorted(maps.Keys(vms)); len(ids) > 0 {
		return fmt.Errorf("pool '%s' is not empty (contains VM %d)", pool, ids[0])
	}
	delete(c.Pools, pool)
	delete(c.PoolComments, pool)
	return nil
}

// pveumPool is `pveum pool add|modify|delete POOL` as pve-manager's
// PVE/API2/Pool.pm does it under lock_user_config, whose errors read
// "<what> failed: <why>". Storage members are not simulated (--storage
// is refused).
func pveumPool(cmd string, rest []string, opts map[string]string, cfg *UserConfig, save func() int, die func(string, ...any) int) int {
	if len(rest) != 1 {
		return die("400 not enough arguments\npveum pool %s <poolid> [OPTIONS]", cmd)
	}
	pool := rest[0]
	if err := verifyPoolName(pool); err != nil {
		return die("400 Parameter verification failed.\npoolid: %v", err)
	}
	if _, ok := opts["storage"]; ok {
		return die("the lab's pveum pool does not keep --storage")
	}
	switch cmd {
	case "add":
		if err := cfg.createPool(pool, opts["comment"]); err != nil {
			return die("create pool failed: %v", err)
		}
	case "modify":
		vms, ok := cfg.Pools[pool]
		if !ok {
			return die("update pools failed: pool '%s' does not exist", pool)
		}
		if c, ok := opts["comment"]; ok {
			cfg.PoolComments[pool] = c
		}
		for _, v := range strings.Split(opts["vms"], ",") {
			if v == "" {
				continue
			}
			id, err := strconv.Atoi(v)
			if err != nil {
				return die("400 Parameter verification failed.\nvms: invalid format - value '%s' does not look like a valid VM ID", v)
			}
			switch other := cfg.poolOf(id); {
			case opts["delete"] == "1":
				if !vms[id] {
					return die("update pools failed: VM %d is not a pool member", id)
				}
				delete(vms, id)
			case vms[id]:
				return die("update pools failed: VM %d is already a pool member", id)
			case other != "" && opts["allow-move"] != "1":
				return die("update pools failed: VM %d belongs already to pool '%s' and 'allow-move' is not set", id, other)
			default:
				delete(cfg.Pools[other], id)
				vms[id] = true
			}
		}
	case "delete":
		if err := cfg.deletePool(pool); err != nil {
			return die("delete pool failed: %v", err)
		}
	default:
		return die("unknown command 'pveum pool %s'", cmd)
	}
	return save()
}
