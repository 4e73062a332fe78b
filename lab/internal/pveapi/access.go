package pveapi

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Permissions as Proxmox VE computes them, after proxmox/pve-access-control
// (src/PVE/AccessControl.pm: $privgroups, create_roles, roles,
// parse_user_config, write_user_config; src/PVE/RPCEnvironment.pm:
// permissions, $compile_acl_path): privileges grouped into built-in roles
// per major version (PVE 9, v9.1.1: VM.Monitor dropped, VM.GuestAgent.*
// and VM.Replicate added; PVE 8, v8.2.2), custom roles and ACLs in
// /etc/pve/user.cfg, the roles on a path taken from its deepest ACL entry
// for the user or token (a propagating entry above it, or one on the path
// itself), and a token with privilege separation holding only the
// privileges both it and its user have; pools (their VMs' roles, nested
// pools, comments). Not simulated: groups, pools' storage members,
// realms other than pam and pve, expiry, NoAccess's special case beyond
// it holding no privileges.

// privGroups is $privgroups: per category, root, admin, user and audit
// privileges, for the major version.
func privGroups(major int) map[string][4][]string {
	vmAdmin := []string{"VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.HWType",
		"VM.Config.Options", "VM.Allocate", "VM.Clone", "VM.Migrate", "VM.Snapshot", "VM.Snapshot.Rollback"}
	vmUser := []string{"VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup", "VM.PowerMgmt"}
	vmAudit := []string{"VM.Audit"}
	if major >= 9 {
		vmAdmin = append(vmAdmin, "VM.GuestAgent.Unrestricted", "VM.Replicate")
		vmUser = append(vmUser, "VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite")
		vmAudit = append(vmAudit, "VM.GuestAgent.Audit")
	} else {
		vmAdmin = append(vmAdmin, "VM.Monitor")
	}
	return map[string][4][]string{
		"VM":        {nil, vmAdmin, vmUser, vmAudit},
		"Sys":       {{"Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"}, {"Sys.Console", "Sys.Syslog"}, nil, {"Sys.Audit"}},
		"Datastore": {nil, {"Datastore.Allocate", "Datastore.AllocateTemplate"}, {"Datastore.AllocateSpace"}, {"Datastore.Audit"}},
		"SDN":       {nil, {"SDN.Allocate", "SDN.Audit"}, {"SDN.Use"}, {"SDN.Audit"}},
		"User":      {{"Realm.Allocate"}, {"User.Modify", "Group.Allocate", "Realm.AllocateUser"}, nil, nil},
		"Pool":      {nil, {"Pool.Allocate"}, {"Pool.Audit"}, {"Pool.Audit"}},
		"Mapping":   {nil, {"Mapping.Modify"}, {"Mapping.Use"}, {"Mapping.Audit"}},
	}
}

// BuiltinRoles is create_roles: Administrator (every privilege),
// NoAccess, PVE<cat>Admin, PVE<cat>User, PVEAdmin, PVEAuditor and
// PVETemplateUser.
func BuiltinRoles(major int) map[string]map[string]bool {
	valid := map[string]bool{"Permissions.Modify": true}
	roles := map[string]map[string]bool{"NoAccess": {}, "Administrator": valid}
	add := func(role, priv string) {
		if roles[role] == nil {
			roles[role] = map[string]bool{}
		}
		roles[role][priv] = true
	}
	for cat, g := range privGroups(major) {
		root, admin, user, audit := g[0], g[1], g[2], g[3]
		for _, l := range [][]string{root, admin, user, audit} {
			for _, p := range l {
				valid[p] = true
			}
		}
		for _, l := range [][]string{admin, user, audit} {
			for _, p := range l {
				add("PVE"+cat+"Admin", p)
				add("PVEAdmin", p)
			}
		}
		if len(user) > 0 {
			for _, l := range [][]string{user, audit} {
				for _, p := range l {
					add("PVE"+cat+"User", p)
				}
			}
		}
		for _, p := range audit {
			add("PVEAuditor", p)
		}
	}
	delete(roles["PVEAdmin"], "Mapping.Modify")
	roles["PVETemplateUser"] = map[string]bool{"VM.Clone": true, "VM.Audit": true}
	return roles
}

// ValidPriv says p is a privilege of the version.
func ValidPriv(major int, p string) bool { return BuiltinRoles(major)["Administrator"][p] }

// UserConfig is the cluster's /etc/pve/user.cfg, in its own format.
type UserConfig struct {
	Users  map[string]bool            // user IDs
	Tokens map[string]bool            // full token ID → privsep
	Roles  map[string]map[string]bool // custom roles → privileges
	// ACL is path → member (user or token ID) → role → propagate.
	ACL map[string]map[string]map[string]bool
	// Pools are pool ID → its member VMs (pve-access-control's pool:
	// lines, nested pools "parent/child" included; storage members are
	// not simulated).
	Pools map[string]map[int]bool
	// PoolComments are the pools' comments, as they read decoded.
	PoolComments map[string]string
}

// encodeText is pve-common's PVE::ParseUtils::encode_text, which
// write_user_config applies to a pool's comment: every byte of its
// UTF-8 but the printable ASCII other than '%' and ':' as %XX (URI::Escape,
// upper-case hex).
func encodeText(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 0x20 && c <= 0x7e && c != '%' && c != ':' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// decodeText is decode_text: %XX back to bytes (uri_unescape, which
// leaves '+' and a malformed escape as they are).
func decodeText(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// addPool records pool, and each of its parents as parse_user_config
// does for a nested pool whose parent has no line of its own.
func (c *UserConfig) addPool(pool string) {
	for p := pool; ; {
		if c.Pools[p] == nil {
			c.Pools[p] = map[int]bool{}
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return
		}
		p = p[:i]
	}
}

// poolOf is the pool VM vmid belongs to, "" for none.
func (c *UserConfig) poolOf(vmid int) string {
	for p, vms := range c.Pools {
		if vms[vmid] {
			return p
		}
	}
	return ""
}

// ReadUserConfig parses user.cfg; a missing file is an empty one.
func ReadUserConfig(path string) (*UserConfig, error) {
	c := &UserConfig{Users: map[string]bool{}, Tokens: map[string]bool{}, Roles: map[string]map[string]bool{}, ACL: map[string]map[string]map[string]bool{},
		Pools: map[string]map[int]bool{}, PoolComments: map[string]string{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		switch {
		case len(f) >= 2 && f[0] == "user":
			c.Users[f[1]] = true
		case len(f) >= 4 && f[0] == "token":
			c.Tokens[f[1]] = f[3] == "1"
		case len(f) >= 3 && f[0] == "role":
			privs := map[string]bool{}
			for _, p := range strings.Split(f[2], ",") {
				if p != "" {
					privs[p] = true
				}
			}
			c.Roles[f[1]] = privs
		case len(f) >= 4 && f[0] == "pool":
			// pool:<id>:<comment>:<vmids>:<storage>: (parse_user_config:
			// a nested pool's parents exist with it, the comment is
			// decode_text's).
			if !poolName.MatchString(f[1]) {
				continue
			}
			c.addPool(f[1])
			for _, v := range strings.Split(f[3], ",") {
				if id, err := strconv.Atoi(v); err == nil {
					c.Pools[f[1]][id] = true
				}
			}
			if f[2] != "" {
				c.PoolComments[f[1]] = decodeText(f[2])
			}
		case len(f) >= 5 && f[0] == "acl":
			for _, m := range strings.Split(f[3], ",") {
				for _, r := range strings.Split(f[4], ",") {
					if m != "" && r != "" {
						c.grant(f[2], m, r, f[1] == "1")
					}
				}
			}
		}
	}
	return c, nil
}

func (c *UserConfig) grant(path, member, role string, propagate bool) {
	if c.ACL[path] == nil {
		c.ACL[path] = map[string]map[string]bool{}
	}
	if c.ACL[path][member] == nil {
		c.ACL[path][member] = map[string]bool{}
	}
	c.ACL[path][member][role] = propagate
}

// Write saves user.cfg as write_user_config lays it out: users with their
// tokens, roles, then ACL lines grouped by propagate flag and role list.
func (c *UserConfig) Write(path string) error {
	var b strings.Builder
	for _, u := range sortedKeys(c.Users) {
		fmt.Fprintf(&b, "user:%s:1:0::::::\n", u)
		for _, t := range sortedKeys(c.Tokens) {
			if strings.HasPrefix(t, u+"!") {
				fmt.Fprintf(&b, "token:%s:0:%s::\n", t, map[bool]string{true: "1", false: "0"}[c.Tokens[t]])
			}
		}
	}
	// write_user_config: users (with their tokens), groups (the lab has
	// none), pools, roles, ACLs, a blank line after each block.
	b.WriteString("\n\n")
	for _, p := range sortedKeys(c.Pools) {
		var ids []string
		for id := range c.Pools[p] {
			ids = append(ids, strconv.Itoa(id))
		}
		sort.Strings(ids) // Perl's sort: as strings
		fmt.Fprintf(&b, "pool:%s:%s:%s::\n", p, encodeText(c.PoolComments[p]), strings.Join(ids, ","))
	}
	b.WriteString("\n")
	for _, r := range sortedKeys(c.Roles) {
		fmt.Fprintf(&b, "role:%s:%s:\n", r, strings.Join(sortedKeys(c.Roles[r]), ","))
	}
	b.WriteString("\n")
	for _, p := range sortedKeys(c.ACL) {
		for _, prop := range []bool{false, true} {
			byRoles := map[string][]string{}
			for _, m := range sortedKeys(c.ACL[p]) {
				var rs []string
				for _, r := range sortedKeys(c.ACL[p][m]) {
					if c.ACL[p][m][r] == prop {
						rs = append(rs, r)
					}
				}
				if len(rs) > 0 {
					k := strings.Join(rs, ",")
					byRoles[k] = append(byRoles[k], m)
				}
			}
			for _, rl := range sortedKeys(byRoles) {
				fmt.Fprintf(&b, "acl:%s:%s:%s:%s:\n", map[bool]string{true: "1", false: "0"}[prop], p, strings.Join(byRoles[rl], ","), rl)
			}
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// roles is AccessControl::roles for a user or token on path: the roles of
// the deepest ACL entry on the way down that applies (propagating, or on
// the path itself), a token's entries before its user's; a token without
// privilege separation has its user's.
func (c *UserConfig) roles(id, path string) map[string]bool {
	if id == "root@pam" {
		return map[string]bool{"Administrator": true}
	}
	if user, _, isToken := strings.Cut(id, "!"); isToken {
		privsep, ok := c.Tokens[id]
		if !ok {
			return nil
		}
		if !privsep {
			return c.roles(user, path)
		}
	}
	parts := []string{""}
	if path != "/" {
		parts = strings.Split(path, "/")
	}
	roles := map[string]bool{}
	cur := ""
	for i, p := range parts {
		if p != "" {
			cur += "/" + p
		}
		at := cur
		if at == "" {
			at = "/"
		}
		final := i == len(parts)-1
		var found map[string]bool
		for role, prop := range c.ACL[at][id] {
			if final || prop {
				if found == nil {
					found = map[string]bool{}
				}
				found[role] = prop
			}
		}
		if found != nil {
			roles = found
		}
	}
	if _, ok := roles["NoAccess"]; ok {
		return map[string]bool{"NoAccess": roles["NoAccess"]}
	}
	return roles
}

// poolRoles is RPCEnvironment's $compile_acl_path's roles on path:
// roles, and on /vms/<vmid> of a pool's member the roles id has on
// /pool/<pool> too, never propagated, unless the VM's own roles hold
// NoAccess; the pool's NoAccess trumps the VM's other roles
// (pve-access-control src/PVE/RPCEnvironment.pm, "apply roles inherited
// from pools").
func (c *UserConfig) poolRoles(id, path string) map[string]bool {
	roles := c.roles(id, path)
	rest, ok := strings.CutPrefix(path, "/vms/")
	if !ok {
		return roles
	}
	vmid, err := strconv.Atoi(rest)
	if err != nil {
		return roles
	}
	pool := c.poolOf(vmid)
	if pool == "" {
		return roles
	}
	if _, no := roles["NoAccess"]; no {
		return roles
	}
	inherited := c.roles(id, "/pool/"+pool)
	if len(inherited) == 0 {
		return roles
	}
	if _, no := inherited["NoAccess"]; no {
		return map[string]bool{"NoAccess": false}
	}
	out := map[string]bool{}
	for r, p := range roles {
		out[r] = p
	}
	for r := range inherited {
		if _, set := out[r]; !set {
			out[r] = false
		}
	}
	return out
}

// Permissions is RPCEnvironment::permissions: id's privileges on path,
// each with whether it propagates; a privilege-separated token's are those
// both it and its user hold.
func (c *UserConfig) Permissions(major int, id, path string) map[string]bool {
	builtin := BuiltinRoles(major)
	if id == "root@pam" {
		return copyPrivs(builtin["Administrator"], true)
	}
	privs := map[string]bool{}
	for role, prop := range c.poolRoles(id, path) {
		set := builtin[role]
		if set == nil {
			set = c.Roles[role]
		}
		for p := range set {
			if builtin["Administrator"][p] { // a privilege this version has
				privs[p] = privs[p] || prop
			}
		}
	}
	if user, _, isToken := strings.Cut(id, "!"); isToken && c.Tokens[id] && user != "root@pam" {
		up := c.Permissions(major, user, path)
		for p := range privs {
			if _, ok := up[p]; !ok {
				delete(privs, p)
			} else {
				privs[p] = privs[p] && up[p]
			}
		}
	}
	return privs
}

// Effective is id's privileges on each of paths that gives it any, as
// /access/permissions and `pveum user permissions` answer them: path →
// privilege → propagate (1 or 0).
func (c *UserConfig) Effective(major int, id string, paths []string) map[string]any {
	out := map[string]any{}
	for _, p := range paths {
		if privs := c.Permissions(major, id, p); len(privs) > 0 {
			m := map[string]any{}
			for k, v := range privs {
				m[k] = map[bool]int{true: 1, false: 0}[v]
			}
			out[p] = m
		}
	}
	return out
}

func copyPrivs(m map[string]bool, v bool) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = v
	}
	return out
}

// Major is a version string's major number ("9.2.11" → 9).
func Major(version string) int {
	n, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	return n
}
