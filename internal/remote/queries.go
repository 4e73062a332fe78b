package remote

// The closed vocabulary of reads. A Query is a permission, not a label:
// the transport retries a query after a dropped link and kills it on
// cancel, which is safe only for a command that changes nothing, and a
// step's Check can run nothing else. So a Query is built only here, from
// these named reads, each a command that changes nothing on its host;
// queries_test.go lists them and fails on one it does not know, so a new
// read is added on purpose, and a review sees it.

// QMConfig reads a VM's configuration on a Proxmox node (qm config).
func QMConfig(vmid string) Query { return look("qm", "config", vmid) }

// QMStatus reads a VM's state on a Proxmox node (qm status --verbose).
func QMStatus(vmid string) Query { return look("qm", "status", vmid, "--verbose") }

// GuestHostKey reads the VM's public SSH host key of keyType through its
// guest agent (qm guest exec ... cat), on the Proxmox node. qm exits 2 and
// 255 when the agent does not answer; those are results.
func GuestHostKey(vmid, keyType string) Query {
	return look("qm", "guest", "exec", vmid, "--", "cat", HostKeyFile(keyType)).Allow(2, 255)
}

// VerifiedSHA256 is a file's sha256, taken from the record a verified
// download left beside it (SHA256Record: the sum, the size and the
// modification time it had then) while the file's size and modification
// time are still those; otherwise, or without a record, read from the
// file itself. A cloud image is hundreds of megabytes: hashing it on
// every converged run would cost seconds for a fact that has not
// changed. It prints the sum alone, nothing for a file that is not there.
func VerifiedSHA256(path string) Query {
	return lookScript("read the sha256 of "+path, `if read -r sum size mtime < "$1.sha256" 2>/dev/null &&
  [ "$(stat -c '%s %.9Y' -- "$1" 2>/dev/null)" = "$size $mtime" ]; then
  echo "$sum"
elif [ -e "$1" ]; then
  sha256sum < "$1" | cut -d' ' -f1
fi`, path)
}

// SHA256Record is the shell that records a verified file's sha256 ($want),
// size and modification time in "$dst.sha256", for VerifiedSHA256.
const SHA256Record = `printf '%s %s\n' "$want" "$(stat -c '%s %.9Y' -- "$dst")" > "$dst.sha256"`

// FileSHA256AndSize prints a file's sha256 and, on the next line, its
// size in bytes.
func FileSHA256AndSize(path string) Query {
	return lookScript("read the sha256 and size of "+path, `sha256sum < "$1" | cut -d' ' -f1; stat -c %s -- "$1"`, path)
}

// EncryptionConfigSummary prints, for k3s's secrets-encryption config at
// path, its sha256 and then the name of its first provider (the one that
// writes: identity, aescbc, secretbox), nothing when there is none. The
// config holds the key: only its hash and its providers' order leave the
// VM. k3s writes it as compact JSON (encoding/json), one line.
func EncryptionConfigSummary(path string) Query {
	return lookScript("read the secrets-encryption config's providers", `[ -e "$1" ] || exit 0
sum=$(sha256sum < "$1" | cut -d' ' -f1) || exit 1
first=$(grep -o '"providers":\[{"[a-z]*"' "$1" | head -n 1 | sed 's/.*{"//; s/"$//')
echo "$sum ${first:-unknown}"`, path)
}

// FileContent is cat of a file (in a Batch, where ReadFile's own script
// does not fit).
func FileContent(path string) Query { return look("cat", "--", path) }

// PathExists is test -e of a path: exit 0 when it exists, 1 when not.
func PathExists(path string) Query { return look("test", "-e", path).Allow(1) }

// FileModTime is a file's modification time, seconds with nanoseconds.
func FileModTime(path string) Query { return look("stat", "-c", "%.9Y", "--", path) }

// ServiceActive is systemctl is-active of a unit.
// It exits 3 for a unit that is not active (inactive, failed, activating:
// the state is on stdout) and 4 for one systemd does not know
// (systemctl(1), "Exit status", LSB's codes for "program is not
// running" and "program or service status is unknown"): results, not
// failures.
func ServiceActive(unit string) Query {
	return look("systemctl", "is-active", unit).Allow(3, 4)
}

// ServiceFileState is systemctl is-enabled of a unit: enabled, disabled,
// masked-runtime… on stdout. It exits 1 for every state but the enabled
// ones (systemctl(1), is-enabled): a result, not a failure.
func ServiceFileState(unit string) Query { return look("systemctl", "is-enabled", unit).Allow(1) }

// ServiceStateUnder is a unit's systemctl is-active and is-enabled, a
// line each, read once no script holding the flock on lock runs any more
// (one that is starting the unit, left running by a run that was cut
// short): read before, the state would be that script's to change a
// moment later. It exits 75 when lock stays busy for two minutes.
func ServiceStateUnder(lock, unit string) Query {
	return lookScript("read whether "+unit+" runs, once "+lock+" is free", `if [ -e "$1" ]; then
  exec 9<"$1"
  flock -s -w 120 9 || exit 75
fi
systemctl is-active "$2"
systemctl is-enabled "$2"
exit 0`, lock, unit).Allow(75)
}

// ServiceStartedAt is when a unit last became active, in UTC with
// microseconds.
func ServiceStartedAt(unit string) Query {
	return look("systemctl", "show", "-p", "ActiveEnterTimestamp", "--value", "--timestamp=us+utc", unit)
}

// PackageStatus is dpkg's status of a package ("install ok installed").
func PackageStatus(pkg string) Query { return look("dpkg-query", "-W", "-f=${Status}", pkg) }

// K3sVersion is k3s --version, exiting 127 when k3s is not installed.
// The version the install recorded (K3sVersionRecord) stands for it while
// the binary's size and modification time are still those it had then:
// k3s --version starts a 70 MB Go program, the slowest read of a
// converged run on the VM, for a fact that changes only with the binary.
func K3sVersion() Query {
	return lookScript("read the k3s version", `bin=$(command -v k3s) || exit 127
if read -r v size mtime < "$1" 2>/dev/null && [ "$(stat -L -c '%s %.9Y' -- "$bin")" = "$size $mtime" ]; then
  echo "k3s version $v"
else
  exec k3s --version
fi`, K3sVersionFile)
}

// K3sVersionFile holds the k3s version the install read from the binary
// it left, with that binary's size and modification time. It is mgmtctl's
// own, readable by the VM's user (k3s keeps /var/lib/rancher/k3s to root).
const K3sVersionFile = "/var/lib/mgmtctl/k3s-version"

// K3sVersionRecord is the shell that records k3s --version in
// K3sVersionFile, for K3sVersion; nothing when k3s does not say.
const K3sVersionRecord = `bin=$(command -v k3s)
v=$(k3s --version | sed -n 's/^k3s version \([^ ]*\).*/\1/p')
if [ -n "$v" ]; then
  mkdir -p -- "$(dirname -- "` + K3sVersionFile + `")"
  printf '%s %s\n' "$v" "$(stat -L -c '%s %.9Y' -- "$bin")" > "` + K3sVersionFile + `"
fi`

// CommandPath is where a command is installed (command -v); it exits 1
// or 127 when there is none, which are results.
func CommandPath(name string) Query {
	return lookScript("look for "+name, `command -v "$1"`, name).Allow(1, 127)
}

// EtcdSnapshots lists a k3s server's etcd snapshots (k3s etcd-snapshot
// ls: a header, then name, location, size and creation time per line),
// the bucket's too when config.yaml names one: k3s's environment file is
// read first (K3sEnv).
func EtcdSnapshots() Query {
	return lookScript("k3s etcd-snapshot ls", K3sEnv+"\nexec k3s etcd-snapshot \"$@\"", "ls")
}

// EtcdSnapshotsUnder is EtcdSnapshots with the bucket listed under folder
// rather than config.yaml's etcd-s3-folder (a server's own): k3s lists
// every object under the folder, its subfolders' too (pkg/etcd/s3/s3.go,
// ListSnapshots: Recursive), so every cluster's and server's snapshots
// under spec.backup.s3.folder are listed, in the layout before
// per-cluster folders too.
func EtcdSnapshotsUnder(folder string) Query {
	return lookScript("k3s etcd-snapshot ls", K3sEnv+"\nexec k3s etcd-snapshot \"$@\"", "ls", "--etcd-s3-folder="+folder)
}

// K3sEnvFile is the k3s unit's environment file, where mgmtctl keeps the
// S3 keys.
const K3sEnvFile = "/etc/default/k3s"

// K3sEnv is the line of sh that exports the variables of the k3s unit's
// environment file, as systemd gives them to k3s, for a script that runs
// k3s itself: the S3 keys reach k3s from that root-only file, never
// through a command line.
const K3sEnv = `[ ! -r ` + K3sEnvFile + ` ] || { set -a; . ` + K3sEnvFile + `; set +a; }`

// ClusterVMs is every VM of the Proxmox cluster, as the API's
// /cluster/resources lists them (vmid, name, node, status, tags), in JSON.
func ClusterVMs() Query {
	return look("pvesh", "get", "/cluster/resources", "--type", "vm", "--output-format", "json")
}

// PVEGet is `pvesh get PATH --output-format json` on a Proxmox node: an
// API read through the node's own CLI. pvesh exits 255 with the API's
// error on stderr (a missing storage or interface), and a shell 127 when
// the host has no pvesh (no Proxmox VE node): results.
func PVEGet(path string) Query {
	return look("pvesh", "get", path, "--output-format", "json").Allow(127, 255)
}

// VMConfigFiles prints, for each node of the Proxmox cluster whose
// config holds vmid, the file's path and then the file: pmxcfs's
// /etc/pve/nodes/<node>/qemu-server/<vmid>.conf, where a VMID exists once
// in the cluster. Nothing when the VMID is free. It reads files only (no
// qm, whose Perl start-up takes a real node a third of a second).
func VMConfigFiles(vmid string) Query {
	return lookScript("read VM "+vmid+"'s config in /etc/pve", `for f in /etc/pve/nodes/*/qemu-server/"$1".conf; do
  [ -e "$f" ] || continue
  printf '#path %s\n' "$f"; cat -- "$f"
done`, vmid)
}

// PVEVersion is pveversion on a Proxmox node:
// "pve-manager/<version>/<repoid> (running kernel: <kernel>)".
func PVEVersion() Query { return look("pveversion") }

// CloudInitStatus is cloud-init's status now.
func CloudInitStatus() Query { return look("cloud-init", "status") }

// CloudInitWait waits for cloud-init to finish and prints its status: it
// blocks, and reads only.
func CloudInitWait() Query { return look("cloud-init", "status", "--wait") }
