package qm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// options parses "--key value" and "--key=value" pairs, in order.
func options(args []string) ([][2]string, error) {
	var out [][2]string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") && !(strings.HasPrefix(a, "-") && len(a) > 1) {
			return nil, fmt.Errorf("Unknown option: %s", a)
		}
		k := strings.TrimLeft(a, "-")
		if key, v, ok := strings.Cut(k, "="); ok {
			out = append(out, [2]string{key, v})
			continue
		}
		if i+1 >= len(args) {
			return nil, fmt.Errorf("Option %s requires an argument", k)
		}
		out = append(out, [2]string{k, args[i+1]})
		i++
	}
	return out, nil
}

var (
	driveKey   = regexp.MustCompile(`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$`)
	netKey     = regexp.MustCompile(`^net[0-9]$`)
	ipconfKey  = regexp.MustCompile(`^ipconfig[0-9]$`)
	serialKey  = regexp.MustCompile(`^serial[0-3]$`)
	newDisk    = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`)
	sizeFormat = regexp.MustCompile(`^(\+?)(\d+(?:\.\d+)?)([KMGT]?)$`)
	nicModels  = map[string]bool{"virtio": true, "e1000": true, "e1000e": true, "rtl8139": true, "vmxnet3": true}
)

func isDrive(k string) bool { return driveKey.MatchString(k) }

// plainKeys are options stored as given (after a format check where noted).
var plainKeys = map[string]string{
	"name": "dns", "cores": "int", "sockets": "int", "memory": "int", "balloon": "int",
	"scsihw": "scsihw", "boot": "any", "vga": "any", "agent": "agent", "ciuser": "any",
	"cipassword": "any", "nameserver": "any", "searchdomain": "any", "tags": "any",
	"description": "any", "ostype": "any", "onboot": "bool", "cpu": "any", "machine": "any", "bios": "any",
}

func (n *Node) paramErr(key, msg string) error {
	return fmt.Errorf("400 Parameter verification failed.\n%s: %s", key, msg)
}

// check validates one option's value; it returns the value to store.
func (n *Node) check(vmid int, key, val string) (string, error) {
	switch {
	case key == "sshkeys" && n.API:
		// Through the API the value is the keys themselves, URI-escaped
		// (qemu-server src/PVE/API2/Qemu.pm create_vm: uri_unescape, then
		// validate_ssh_public_keys, then uri_escape again).
		keys, err := url.PathUnescape(val)
		if err != nil {
			return "", n.paramErr(key, "invalid format - "+err.Error())
		}
		if err := validateSSHKeys(keys); err != nil {
			return "", n.paramErr(key, err.Error())
		}
		return uriEscape(keys), nil
	case key == "sshkeys":
		// On the CLI the value is a file; qm stores its contents escaped.
		b, err := os.ReadFile(val)
		if err != nil {
			return "", fmt.Errorf("unable to open file '%s' - %v", val, unwrap(err))
		}
		return uriEscape(string(b)), nil
	case netKey.MatchString(key):
		return n.checkNet(key, val)
	case ipconfKey.MatchString(key):
		return val, checkIPConfig(n, key, val)
	case serialKey.MatchString(key):
		if val != "socket" && !strings.HasPrefix(val, "/dev/") {
			return "", n.paramErr(key, "value does not match the regex pattern")
		}
		return val, nil
	case isDrive(key):
		return val, nil // allocation happens in create/set
	}
	kind, ok := plainKeys[key]
	if !ok {
		return "", fmt.Errorf("Unknown option: %s", key)
	}
	switch kind {
	case "int":
		if _, err := strconv.Atoi(val); err != nil {
			return "", n.paramErr(key, fmt.Sprintf("type check ('integer') failed - got '%s'", val))
		}
	case "bool":
		if val != "0" && val != "1" {
			return "", n.paramErr(key, fmt.Sprintf("type check ('boolean') failed - got '%s'", val))
		}
	case "dns":
		if !regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`).MatchString(val) {
			return "", n.paramErr(key, "invalid format - value does not look like a valid DNS name")
		}
	case "scsihw":
		switch val {
		case "lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi":
		default:
			return "", n.paramErr(key, fmt.Sprintf("value '%s' does not have a value in the enumeration 'lsi, lsi53c810, virtio-scsi-pci, virtio-scsi-single, megasas, pvscsi'", val))
		}
	case "agent":
		first := strings.Split(val, ",")[0]
		if first != "0" && first != "1" && !strings.HasPrefix(first, "enabled=") {
			return "", n.paramErr(key, "invalid format - format error")
		}
	}
	return val, nil
}

func unwrap(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// checkNet validates a netX value and adds a MAC to the model key, as
// create's add_random_macs does.
func (n *Node) checkNet(key, val string) (string, error) {
	parts := strings.Split(val, ",")
	model, mac, _ := strings.Cut(parts[0], "=")
	if !nicModels[model] {
		return "", n.paramErr(key, "invalid format - format error\n"+key+".model: value '"+model+"' does not have a value in the enumeration")
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "bridge", "firewall", "rate", "queues", "mtu", "link_down":
		case "tag":
			t, err := strconv.Atoi(v)
			if err != nil || t < 1 || t > 4094 {
				return "", n.paramErr(key, "invalid format - format error\n"+key+".tag: value must have a minimum value of 1")
			}
		default:
			return "", n.paramErr(key, "invalid format - format error\n"+key+"."+k+": property is not defined in schema and the schema does not allow additional properties")
		}
	}
	if mac == "" {
		b := n.mac()
		mac = fmt.Sprintf("BC:24:11:%02X:%02X:%02X", b[0], b[1], b[2])
	}
	parts[0] = model + "=" + mac
	return strings.Join(parts, ","), nil
}

func (n *Node) mac() [3]byte {
	if n.MAC != nil {
		return n.MAC()
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return b
}

func checkIPConfig(n *Node, key, val string) error {
	hasIP, hasIP6 := false, false
	for _, p := range strings.Split(val, ",") {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "ip":
			hasIP = true
			if v != "dhcp" {
				if pre, err := netip.ParsePrefix(v); err != nil || !pre.Addr().Is4() {
					return n.paramErr(key, "invalid format - format error\n"+key+".ip: invalid format - invalid CIDR notation")
				}
			}
		case "gw":
			if _, err := netip.ParseAddr(v); err != nil {
				return n.paramErr(key, "invalid format - format error\n"+key+".gw: invalid format - value does not look like a valid IPv4 address")
			}
		case "ip6":
			hasIP6 = true
		case "gw6":
		default:
			return n.paramErr(key, "invalid format - format error\n"+key+"."+k+": property is not defined in schema")
		}
	}
	if strings.Contains(val, "gw=") && !hasIP {
		return n.paramErr(key, "invalid format - format error\n"+key+".gw: gateway specified without specifying an IP address")
	}
	if strings.Contains(val, "gw6=") && !hasIP6 {
		return n.paramErr(key, "invalid format - format error\n"+key+".gw6: gateway specified without specifying an IP address")
	}
	return nil
}

// uriEscape is URI::Escape::uri_escape's default: everything outside
// A-Za-z0-9-._~ becomes %XX.
func uriEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (n *Node) create(vmid int, args []string) int {
	opts, err := options(args)
	if err != nil {
		return n.usage("create", err.Error())
	}
	if node, ok := n.owner(vmid); ok {
		return n.die(exitDie, "unable to create VM %d - VM %d already exists on node '%s'", vmid, vmid, node)
	}
	c := Config{}
	start := false
	var drives [][2]string
	for _, o := range opts {
		k, v := o[0], o[1]
		if k == "start" {
			start = v == "1"
			continue
		}
		val, err := n.check(vmid, k, v)
		if err != nil {
			if strings.HasPrefix(err.Error(), "Unknown option") {
				return n.usage("create", err.Error())
			}
			return n.die(exitDie, "%v", err)
		}
		if isDrive(k) {
			drives = append(drives, [2]string{k, val})
			continue
		}
		c[k] = val
	}
	// Check every drive before allocating any, so a bad one leaves nothing.
	for _, d := range drives {
		if err := n.checkDrive(d[0], d[1]); err != nil {
			return n.die(exitDie, "%v", err)
		}
	}
	// upstream allocates in drive-name order: ide, sata, scsi, virtio.
	sortDrives(drives)
	for _, d := range drives {
		stored, err := n.allocate(vmid, d[0], d[1], c)
		if err != nil {
			return n.die(exitDie, "unable to create VM %d - %v", vmid, err)
		}
		c[d[0]] = stored
	}
	if _, ok := c["boot"]; !ok {
		c["boot"] = defaultBoot(c)
	}
	now := int64(0)
	if n.Now != nil {
		now = n.Now()
	}
	c["meta"] = fmt.Sprintf("creation-qemu=9.2.0,ctime=%d", now)
	if _, ok := c["smbios1"]; !ok {
		c["smbios1"] = "uuid=" + newUUID()
	}
	c["vmgenid"] = newUUID()
	if err := n.write(vmid, c); err != nil {
		return n.die(exitDie, "unable to create VM %d - %v", vmid, err)
	}
	if start {
		n.outf("Execute autostart\n")
		return n.start(vmid)
	}
	return 0
}

func sortDrives(d [][2]string) {
	rank := func(k string) string {
		for i, p := range []string{"ide", "sata", "scsi", "virtio", "efidisk", "tpmstate"} {
			if strings.HasPrefix(k, p) {
				n, _ := strconv.Atoi(strings.TrimPrefix(k, p))
				return fmt.Sprintf("%d%03d", i, n)
			}
		}
		return k
	}
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && rank(d[j][0]) < rank(d[j-1][0]); j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

func defaultBoot(c Config) string {
	var order []string
	for _, k := range sortedKeys(c) {
		if isDrive(k) || netKey.MatchString(k) {
			order = append(order, k)
		}
	}
	return "order=" + strings.Join(order, ";")
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// driveOpts splits "vol,key=v,..." into the volume and its options.
func driveOpts(val string) (string, []string) {
	parts := strings.Split(val, ",")
	return parts[0], parts[1:]
}

func (n *Node) checkDrive(key, val string) error {
	vol, opts := driveOpts(val)
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		if k != "import-from" {
			continue
		}
		m := newDisk.FindStringSubmatch(vol)
		if m == nil || m[3] != "0" {
			return fmt.Errorf("400 Parameter verification failed.\n%s: 'import-from' requires special syntax - use <storage ID>:0,import-from=<source>", key)
		}
		p, err := n.sourcePath(v)
		if err != nil {
			return fmt.Errorf("400 Parameter verification failed.\n%s: %v", key, err)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("400 Parameter verification failed.\n%s: could not get file size of %s", key, strings.TrimPrefix(p, strings.TrimSuffix(n.Root, "/")))
		}
	}
	return nil
}

// volumes live in a small file per volume holding its size in bytes, under
// /var/lib/labsim/storage/<storage>/ on the node.
func (n *Node) volumePath(volid string) string {
	st, name, _ := strings.Cut(volid, ":")
	return filepath.Join(n.Root, "var/lib/labsim/storage", st, name)
}

func (n *Node) volumeSize(volid string) (int64, bool) {
	b, err := os.ReadFile(n.volumePath(volid))
	if err != nil {
		return 0, false
	}
	s, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return s, err == nil
}

func (n *Node) setVolumeSize(volid string, size int64) error {
	p := n.volumePath(volid)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(strconv.FormatInt(size, 10)+"\n"), 0o644)
}

func (n *Node) removeVolume(volid string) { _ = os.Remove(n.volumePath(volid)) }

func volume(val string) string { v, _ := driveOpts(val); return v }

// allocate creates the volume a new-disk drive asks for and returns the
// drive string to store.
func (n *Node) allocate(vmid int, key, val string, c Config) (string, error) {
	vol, opts := driveOpts(val)
	storage, name, _ := strings.Cut(vol, ":")
	if name == "cloudinit" {
		for k, v := range c {
			if isDrive(k) && strings.Contains(v, "cloudinit") {
				return "", fmt.Errorf("%s - cloud-init drive is already attached at '%s'", vol, k)
			}
		}
		volid := fmt.Sprintf("%s:vm-%d-cloudinit", storage, vmid)
		if err := n.setVolumeSize(volid, 4<<20); err != nil {
			return "", err
		}
		n.outf("  Logical volume \"vm-%d-cloudinit\" created.\n", vmid)
		stored := volid + ",media=cdrom"
		n.outf("%s: successfully created disk '%s'\n", key, stored)
		return stored, nil
	}
	m := newDisk.FindStringSubmatch(vol)
	if m == nil {
		return val, nil // an existing volume, attached as given
	}
	var size int64
	var kept []string
	var source string
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "import-from":
			source = v
		case "format":
		default:
			kept = append(kept, o)
		}
	}
	if source != "" {
		p, err := n.sourcePath(source)
		if err != nil {
			return "", err
		}
		s, err := virtualSize(p)
		if err != nil {
			return "", err
		}
		size = s
	} else {
		gib, _ := strconv.ParseFloat(m[3], 64)
		size = int64(gib * (1 << 30))
	}
	volid := fmt.Sprintf("%s:vm-%d-disk-%d", storage, vmid, n.nextDiskIndex(vmid, c))
	if err := n.setVolumeSize(volid, size); err != nil {
		return "", err
	}
	n.outf("  Logical volume \"%s\" created.\n", strings.SplitN(volid, ":", 2)[1])
	if source != "" {
		n.outf("transferred 0.0 B of %s (0.00%%)\n", renderBytes(size))
		n.outf("transferred %s of %s (100.00%%)\n", renderBytes(size), renderBytes(size))
	}
	stored := strings.Join(append([]string{volid}, kept...), ",") + ",size=" + FormatSize(size)
	n.outf("%s: successfully created disk '%s'\n", key, stored)
	return stored, nil
}

func (n *Node) nextDiskIndex(vmid int, c Config) int {
	for i := 0; ; i++ {
		name := fmt.Sprintf("vm-%d-disk-%d", vmid, i)
		used := false
		for k, v := range c {
			if isDrive(k) && strings.Contains(volume(v), name) {
				used = true
			}
		}
		if !used {
			return i
		}
	}
}

// virtualSize reads a qcow2 header's virtual size, or a raw file's length.
func virtualSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("could not get file size of %s", path)
	}
	defer f.Close()
	var hdr [32]byte
	if _, err := f.ReadAt(hdr[:], 0); err == nil && string(hdr[:4]) == "QFI\xfb" {
		return int64(binary.BigEndian.Uint64(hdr[24:32])), nil
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// FormatSize is PVE::JSONSchema::format_size: the largest unit that divides
// the size exactly.
func FormatSize(b int64) string {
	units := []struct {
		s string
		n int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}
	for _, u := range units {
		if b >= u.n && b%u.n == 0 {
			return strconv.FormatInt(b/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(b, 10)
}

// ParseSize reads a size= value back into bytes.
func ParseSize(s string) (int64, bool) {
	m := sizeFormat.FindStringSubmatch(s)
	if m == nil || m[1] != "" {
		return 0, false
	}
	f, _ := strconv.ParseFloat(m[2], 64)
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[3]]
	return int64(f * mult), true
}

func renderBytes(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(b)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.1f B", f)
	}
	return fmt.Sprintf("%.2f %s", f, units[i])
}

func bootDiskSize(c Config) int64 {
	for _, k := range sortedKeys(c) {
		if isDrive(k) && !strings.Contains(c[k], "media=cdrom") {
			if s, ok := driveSize(c[k]); ok {
				return s
			}
		}
	}
	return 0
}

func driveSize(val string) (int64, bool) {
	_, opts := driveOpts(val)
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			return ParseSize(v)
		}
	}
	return 0, false
}
