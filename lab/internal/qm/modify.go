package qm

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

func (n *Node) set(vmid int, args []string) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	opts, err := options(args)
	if err != nil {
		return n.usage("set", err.Error())
	}
	for _, o := range opts {
		k, v := o[0], o[1]
		if k == "delete" {
			for _, d := range strings.Split(v, ",") {
				delete(c, strings.TrimSpace(d))
			}
			continue
		}
		val, err := n.check(vmid, k, v)
		if err != nil {
			if strings.HasPrefix(err.Error(), "Unknown option") {
				return n.usage("set", err.Error())
			}
			return n.die(exitDie, "%v", err)
		}
		if isDrive(k) {
			if err := n.checkDrive(k, val); err != nil {
				return n.die(exitDie, "%v", err)
			}
			if val, err = n.allocate(vmid, k, val, c); err != nil {
				return n.die(exitDie, "%v", err)
			}
		}
		if netKey.MatchString(k) {
			// A MAC the VM already had is kept when only other keys change.
			if old, ok := c[k]; ok && !strings.Contains(strings.Split(v, ",")[0], "=") {
				oldModel := strings.Split(old, ",")[0]
				parts := strings.Split(val, ",")
				if strings.HasPrefix(oldModel, strings.Split(parts[0], "=")[0]+"=") {
					parts[0] = oldModel
					val = strings.Join(parts, ",")
				}
			}
		}
		c[k] = val
	}
	if err := n.write(vmid, c); err != nil {
		return n.die(exitDie, "%v", err)
	}
	return 0
}

// resize implements `qm resize` / `qm disk resize`. It runs in a worker
// upstream, so its errors go to stderr while the command exits 0
// (docs/upstream.md §1.3): callers must check the size in `qm config`.
func (n *Node) resize(vmid int, args []string) int {
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if len(args) < 2 {
		n.errf("400 not enough arguments\nqm resize <vmid> <disk> <size> [OPTIONS]\n")
		return exitDie
	}
	disk, size := args[0], args[1]
	m := sizeFormat.FindStringSubmatch(size)
	if m == nil {
		n.errf("400 Parameter verification failed.\nsize: value does not match the regex pattern\nqm resize <vmid> <disk> <size> [OPTIONS]\n")
		return exitDie
	}
	val, ok := c[disk]
	if !ok || !isDrive(disk) {
		n.errf("disk '%s' does not exist\n", disk)
		return 0
	}
	if strings.Contains(val, "media=cdrom") {
		n.errf("you can't resize a cdrom\n")
		return 0
	}
	volid := volume(val)
	cur, ok := driveSize(val)
	if vs, vok := n.volumeSize(volid); vok {
		cur, ok = vs, true
	}
	if !ok {
		n.errf("Could not determine current size of volume '%s'\n", volid)
		return 0
	}
	f, _ := strconv.ParseFloat(m[2], 64)
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[3]]
	want := int64(f * mult)
	if m[1] == "+" {
		want += cur
	}
	if want < cur {
		n.errf("shrinking disks is not supported\n")
		return 0
	}
	if want == cur {
		return 0
	}
	if err := n.setVolumeSize(volid, want); err != nil {
		n.errf("%v\n", err)
		return 0
	}
	vol, opts := driveOpts(val)
	var kept []string
	for _, o := range opts {
		if !strings.HasPrefix(o, "size=") {
			kept = append(kept, o)
		}
	}
	c[disk] = strings.Join(append(append([]string{vol}, kept...), "size="+FormatSize(want)), ",")
	if err := n.write(vmid, c); err != nil {
		n.errf("%v\n", err)
		return 0
	}
	if !n.running(vmid) {
		lv := strings.SplitN(volid, ":", 2)[1]
		n.outf("  Size of logical volume pve/%s changed from %s (%d extents) to %s (%d extents).\n", lv, lvmSize(cur), cur/(4<<20), lvmSize(want), want/(4<<20))
		n.outf("  Logical volume pve/%s successfully resized.\n", lv)
	}
	return 0
}

func lvmSize(b int64) string {
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

func agentEnabled(c Config) bool {
	a := strings.Split(c["agent"], ",")[0]
	return a == "1" || a == "enabled=1"
}

// guest implements `qm guest cmd <vmid> <command>` and `qm guest exec`.
func (n *Node) guest(args []string) int {
	if len(args) < 2 {
		n.errf("400 not enough arguments\nqm guest cmd <vmid> <command>\n")
		return exitDie
	}
	sub := args[0]
	vmid, ok := parseVMID(args[1])
	if !ok {
		n.errf("400 Parameter verification failed.\nvmid: invalid format - value must be an integer from 100 to 999999999\n")
		return exitDie
	}
	c, err := n.load(vmid)
	if err != nil {
		return n.die(exitNoConfig, "%v", err)
	}
	if !agentEnabled(c) {
		return n.die(exitDie, "No QEMU guest agent configured")
	}
	if !n.running(vmid) {
		return n.die(exitDie, "VM %d is not running", vmid)
	}
	if up, err := n.Backend.GuestAgent(vmid); err != nil || !up {
		return n.die(exitDie, "QEMU guest agent is not running")
	}
	rest := args[2:]
	switch sub {
	case "cmd":
		if len(rest) == 0 {
			n.errf("400 not enough arguments\nqm guest cmd <vmid> <command>\n")
			return exitDie
		}
		switch rest[0] {
		case "ping":
			return 0
		case "network-get-interfaces":
			return n.interfaces(vmid, c)
		}
		n.errf("400 Parameter verification failed.\ncommand: value '%s' does not have a value in the enumeration\n", rest[0])
		return exitDie
	case "exec":
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		out, errOut, code, err := n.Backend.GuestExec(vmid, rest)
		if err != nil {
			return n.die(exitDie, "Agent error: %v", err)
		}
		res := map[string]any{"exitcode": code, "exited": 1}
		if out != "" {
			res["out-data"] = out
		}
		if errOut != "" {
			res["err-data"] = errOut
		}
		n.outf("%s\n", perlPretty(res, 0))
		return 0
	}
	n.errf("unknown command 'qm guest %s'\n", sub)
	return exitDie
}

func (n *Node) interfaces(vmid int, c Config) int {
	ip, prefix := "", 0
	for _, p := range strings.Split(c["ipconfig0"], ",") {
		if v, ok := strings.CutPrefix(p, "ip="); ok {
			a, b, _ := strings.Cut(v, "/")
			ip = a
			prefix, _ = strconv.Atoi(b)
		}
	}
	mac := ""
	if m := strings.Split(c["net0"], ",")[0]; strings.Contains(m, "=") {
		mac = strings.ToLower(strings.SplitN(m, "=", 2)[1])
	}
	res := []any{
		map[string]any{"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": []any{
			map[string]any{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
			map[string]any{"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
		}},
		map[string]any{"name": "eth0", "hardware-address": mac, "ip-addresses": []any{
			map[string]any{"ip-address": ip, "ip-address-type": "ipv4", "prefix": prefix},
		}},
	}
	n.outf("%s\n", perlPretty(res, 0))
	return 0
}

// perlPretty renders JSON the way Perl's to_json(pretty, canonical) does:
// sorted keys, 3-space indent, "key" : value.
func perlPretty(v any, depth int) string {
	ind := strings.Repeat("   ", depth+1)
	end := strings.Repeat("   ", depth)
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			kb, _ := json.Marshal(k)
			parts = append(parts, ind+string(kb)+" : "+perlPretty(t[k], depth+1))
		}
		return "{\n" + strings.Join(parts, ",\n") + "\n" + end + "}"
	case []any:
		var parts []string
		for _, e := range t {
			parts = append(parts, ind+perlPretty(e, depth+1))
		}
		return "[\n" + strings.Join(parts, ",\n") + "\n" + end + "]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
