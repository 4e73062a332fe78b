// Command labsim builds and runs mgmtctl's simulated lab. It is also the
// simulated commands inside the lab's hosts, chosen by the name it is run
// as: qm and pvesh on the Proxmox node, cloud-init on a VM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/lab/internal/host"
	"github.com/mgmtctl/mgmtctl/lab/internal/lab"
	"github.com/mgmtctl/mgmtctl/lab/internal/mirror"
	"github.com/mgmtctl/mgmtctl/lab/internal/pveapi"
	"github.com/mgmtctl/mgmtctl/lab/internal/qm"
	"github.com/mgmtctl/mgmtctl/lab/internal/s3"
	"github.com/mgmtctl/mgmtctl/lab/internal/vmos"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "qm":
		os.Exit(runQM(os.Args[1:]))
	case "pvesh":
		os.Exit(runPvesh(os.Args[1:]))
	case "pveum":
		os.Exit(runPveum(os.Args[1:]))
	case "pveversion":
		// pve-manager's bin/pveversion without -v: one line.
		fmt.Printf("pve-manager/%s/14a22df3 (running kernel: 6.14.8-2-pve)\n", pveapi.Version)
		os.Exit(0)
	case "cloud-init":
		os.Exit(vmos.CloudInit(os.Args[1:], os.Stdout, os.Stderr))
	case "apt-get", "apt":
		os.Exit(vmos.AptGet(os.Args[1:], os.Stdout, os.Stderr))
	case "dpkg-query":
		os.Exit(vmos.DpkgQuery(os.Args[1:], os.Stdout, os.Stderr))
	case "systemctl":
		os.Exit(vmos.Systemctl(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(cli(os.Args[1:]))
}

const usage = `usage: labsim <command> --dir DIR [args]

  up      build the lab in DIR and return when it is ready
          (--nodes 3: a Proxmox cluster pve1..pve3 sharing /etc/pve;
          --access api: its config reaches the nodes through the API, with a
          token of mgmtctl's made with what mgmtctl proxmox role --for mgmtctl names)
  up      on a stopped lab (or a copy of one): start its hosts again from its files
  stop    power the lab off and keep its files (VMs halt as at a power cut)
  down    remove every namespace, process and file the lab made
  exec    run a command in the lab: labsim exec --dir DIR [--host pve] -- CMD...
  status  show the lab's hosts and VMs
  fault   labsim fault --dir DIR NAME [VALUE] | --off NAME
`

func cli(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet("labsim "+cmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "lab directory")
	hostName := fs.String("host", "", "exec: run on this host (pve, mirror, vm110) instead of the laptop")
	spec := fs.String("spec", "", "agent: host spec file")
	off := fs.Bool("off", false, "fault: turn the fault off")
	nodes := fs.Int("nodes", 1, "up: Proxmox nodes (1: \"pve\"; more: a cluster pve1..pveN)")
	access := fs.String("access", "ssh", "up: how the config reaches the nodes: ssh (root SSH, qm) or api (the API with a least-privileged token of mgmtctl's)")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if cmd == "agent" {
		return runAgent(*spec)
	}
	if *dir == "" {
		fmt.Fprintf(os.Stderr, "labsim %s: --dir is required\n", cmd)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "labsim: needs root (network namespaces, mounts)")
		return 1
	}
	l, err := lab.Open(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labsim:", err)
		return 1
	}
	switch cmd {
	case "up":
		if *nodes < 1 || *nodes > 9 {
			fmt.Fprintln(os.Stderr, "labsim: --nodes must be 1 to 9")
			return 2
		}
		if *access != "ssh" && *access != "api" {
			fmt.Fprintln(os.Stderr, "labsim: --access must be ssh or api")
			return 2
		}
		l.NodeCount = *nodes
		err = l.Up(os.Stdout)
		if err == nil && *access == "api" {
			// The mgmtctl built beside this labsim (bin/ of the repository).
			var self string
			if self, err = os.Executable(); err == nil {
				err = l.UseAPI(filepath.Join(filepath.Dir(self), "mgmtctl"))
			}
		}
	case "down":
		err = l.Down(os.Stdout)
	case "stop":
		err = l.Stop(os.Stdout)
	case "status":
		err = l.Status(os.Stdout)
	case "daemon":
		err = lab.RunDaemon(l, os.NewFile(3, "ready"))
	case "exec":
		err = l.Exec(*hostName, fs.Args())
	case "fault":
		a := fs.Args()
		if len(a) == 0 {
			for n, d := range lab.Faults {
				fmt.Printf("%-14s %s\n", n, d)
			}
			return 0
		}
		val := ""
		if len(a) > 1 {
			val = a[1]
		}
		err = l.SetFault(a[0], val, !*off)
	default:
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "labsim:", err)
		return 1
	}
	return 0
}

func runAgent(specPath string) int {
	b, err := os.ReadFile(specPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labsim agent:", err)
		return 1
	}
	var spec host.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "labsim agent:", err)
		return 1
	}
	if spec.Role == "mirror" {
		m := &mirror.Server{Root: filepath.Join(spec.LabDir, "mirror"), Addr: spec.Addr,
			CertFile: filepath.Join(spec.LabDir, "pki/mirror.crt"), KeyFile: filepath.Join(spec.LabDir, "pki/mirror.key"),
			Corrupt: func() bool {
				_, err := os.Stat(filepath.Join(spec.LabDir, "faults/corrupt-image"))
				return err == nil
			},
			Reset: func() bool {
				_, err := os.Stat(filepath.Join(spec.LabDir, "faults/reset-download"))
				return err == nil
			},
			Releases: &mirror.Releases{Binary: filepath.Join(spec.LabDir, "bin/k3s"), Versions: lab.K3sReleases}}
		spec.Services = append(spec.Services, m.Run)
		// The lab's S3, where versitygw was built (hack/build.sh all; the
		// demo has none).
		if gw := filepath.Join(spec.LabDir, "bin/versitygw"); exists(gw) {
			g := &s3.Gateway{Binary: gw, Addr: spec.Addr + ":" + s3.Port,
				Cert: filepath.Join(spec.LabDir, "pki/mirror.crt"), Key: filepath.Join(spec.LabDir, "pki/mirror.key"), CA: filepath.Join(spec.LabDir, "pki/ca.crt"),
				Root: "/var/lib/labsim/s3", Credentials: filepath.Join(spec.LabDir, "pki/s3-credentials"), Buckets: []string{s3.Bucket},
				Ready: filepath.Join(spec.LabDir, "hosts/mirror/s3-ready"), Log: os.Stderr}
			// The mirror outlives a failed S3: what needs S3 waits for
			// its ready file and finds the error in the mirror's log.
			spec.Services = append(spec.Services, func(ctx context.Context) error {
				if err := g.Run(ctx); err != nil {
					fmt.Fprintln(os.Stderr, "labsim s3:", err)
				}
				<-ctx.Done()
				return nil
			})
		}
	}
	if spec.Role == "pve" {
		api := &pveapi.Server{Addr: spec.Addr,
			CertFile: filepath.Join(spec.LabDir, "pki", spec.Name+".crt"), KeyFile: filepath.Join(spec.LabDir, "pki", spec.Name+".key"),
			Access: labAccess(spec.LabDir), Node: spec.Name,
			QM: func(stdout, stderr io.Writer) *qm.Node {
				return &qm.Node{Name: spec.Name, Root: "/", Backend: backend{filepath.Join(spec.LabDir, "control.sock")},
					Stdout: stdout, Stderr: stderr, Now: func() int64 { return time.Now().Unix() }}
			}}
		spec.Services = append(spec.Services, api.Run)
	}
	if err := host.Run(&spec, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "labsim agent:", err)
		return 1
	}
	return 0
}

// labConfig is what a host knows about its lab (/etc/labsim/lab.json).
type labConfig struct {
	Dir  string `json:"dir"`
	Node string `json:"node"`
}

func readLabConfig() (labConfig, error) {
	var c labConfig
	b, err := os.ReadFile("/etc/labsim/lab.json")
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// backend asks the lab daemon to run guests.
type backend struct{ sock string }

func (b backend) call(req lab.Request) (lab.Response, error) {
	return lab.Call(b.sock, req, time.Minute)
}

func (b backend) Boot(vmid int, c qm.Config) error {
	_, err := b.call(lab.Request{Op: "boot", VMID: vmid, Conf: c})
	return err
}
func (b backend) Halt(vmid int) error {
	_, err := b.call(lab.Request{Op: "halt", VMID: vmid})
	return err
}
func (b backend) Running(vmid int) (bool, error) {
	r, err := b.call(lab.Request{Op: "running", VMID: vmid})
	return r.Bool, err
}
func (b backend) Uptime(vmid int) (time.Duration, error) {
	r, err := b.call(lab.Request{Op: "uptime", VMID: vmid})
	return time.Duration(r.Code) * time.Second, err
}
func (b backend) GuestUp(vmid int) (bool, error) {
	r, err := b.call(lab.Request{Op: "guest-up", VMID: vmid})
	return r.Bool, err
}
func (b backend) Destroyed(vmid int) error {
	_, err := b.call(lab.Request{Op: "destroyed", VMID: vmid})
	return err
}
func (b backend) GuestAgent(vmid int) (bool, error) {
	r, err := b.call(lab.Request{Op: "agent", VMID: vmid})
	return r.Bool, err
}
func (b backend) GuestExec(vmid int, argv []string) (string, string, int, error) {
	r, err := b.call(lab.Request{Op: "exec", VMID: vmid, Argv: argv})
	return r.Stdout, r.Stderr, r.Code, err
}

func node() (*qm.Node, error) {
	c, err := readLabConfig()
	if err != nil {
		return nil, fmt.Errorf("not a lab Proxmox node: %w", err)
	}
	return &qm.Node{Name: c.Node, Root: "/", Backend: backend{filepath.Join(c.Dir, "control.sock")},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Now: func() int64 { return time.Now().Unix() }}, nil
}

func runQM(args []string) int {
	n, err := node()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 255
	}
	return n.QM(args)
}

func runPveum(args []string) int {
	c, err := readLabConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "not a lab Proxmox node:", err)
		return 255
	}
	return pveapi.PVEUM(args, labAccess(c.Dir), os.Stdout, os.Stderr)
}

// labAccess is the lab's Proxmox access control: the tokens' secrets
// beside its PKI, user.cfg in the cluster's /etc/pve.
func labAccess(dir string) pveapi.Access {
	return pveapi.Access{Tokens: pveapi.TokenConfig{Path: filepath.Join(dir, "pki/pve-token")}, UserCfg: filepath.Join(dir, "pmxcfs/user.cfg")}
}

func runPvesh(args []string) int {
	n, err := node()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 255
	}
	if len(args) >= 2 && args[0] == "get" && args[1] == "/cluster/nextid" {
		var rest []string
		for _, a := range args[2:] {
			if !strings.HasPrefix(a, "--output-format") && a != "text" && a != "json" {
				rest = append(rest, a)
			}
		}
		return n.NextID(rest)
	}
	if len(args) >= 2 && args[0] == "get" && args[1] == "/cluster/resources" {
		return n.Resources(args[2:])
	}
	// GET /nodes/<node>/storage/<storage>/status and
	// /nodes/<node>/network/<iface>, on the node itself, in JSON.
	if len(args) >= 2 && args[0] == "get" {
		p := strings.Split(strings.Trim(args[1], "/"), "/")
		var v map[string]any
		var err error
		switch {
		case len(p) == 5 && p[0] == "nodes" && p[1] == n.Name && p[2] == "storage" && p[4] == "status":
			v, err = n.StorageStatus(p[3])
		case len(p) == 4 && p[0] == "nodes" && p[1] == n.Name && p[2] == "network":
			v, err = n.Interface(p[3])
		default:
			fmt.Fprintf(os.Stderr, "no such API path in the lab: %s\n", strings.Join(args, " "))
			return 255
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%v\n\npvesh get <api_path> [OPTIONS] [FORMAT_OPTIONS]\n", err)
			return 255
		}
		b, _ := json.Marshal(v)
		fmt.Println(string(b))
		return 0
	}
	fmt.Fprintf(os.Stderr, "no such API path in the lab: %s\n", strings.Join(args, " "))
	return 255
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
