package k3s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// HostKeyCheck cross-checks the VM's SSH host key, pinned on first contact,
// against the key file the guest agent reads inside the VM over the
// verified Proxmox connection. A mismatch means the first contact was not
// with this VM: a hard failure.
type HostKeyCheck struct {
	Node remote.Reader // the Proxmox node, verified by known_hosts
	// API is the Proxmox API instead (api access), verified by its
	// certificate: the agent reads the file (agent/file-read).
	API    pve.Reader
	Name   string // the node's name
	VMID   int
	Pinned func() ssh.PublicKey
}

var _ step.Step = (*HostKeyCheck)(nil)

// ID implements step.Step.
func (s *HostKeyCheck) ID() string { return "host-key-check" }

// Independent implements step.Independent: its Check reads the key through the node and the pinned one,
// nothing an earlier step left.
func (s *HostKeyCheck) Independent() {}

// Host implements step.Step.
func (s *HostKeyCheck) Host() string { return s.Name }

// Check implements step.Step. It never changes anything.
func (s *HostKeyCheck) Check(ctx context.Context) (step.Plan, error) {
	pinned := s.Pinned()
	if pinned == nil || (s.Node == nil && s.API == nil) {
		return step.Plan{Skip: "no VM connection yet"}, nil
	}
	if s.API != nil {
		content, err := s.API.FileRead(ctx, s.Name, s.VMID, remote.HostKeyFile(pinned.Type()))
		var ae *pve.APIError
		if errors.As(err, &ae) && agentNotRunning(ae.Message) {
			return step.Plan{Skip: "the guest agent is not running yet"}, nil
		}
		if err != nil {
			return step.Plan{}, fmt.Errorf("read VM %d's %s through the guest agent: %w", s.VMID, remote.HostKeyFile(pinned.Type()), err)
		}
		return s.compare(content, pinned)
	}
	vmid := strconv.Itoa(s.VMID)
	res, err := s.Node.Look(ctx, remote.GuestHostKey(vmid, pinned.Type()))
	if err != nil {
		return step.Plan{}, err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if agentNotRunning(msg) {
			return step.Plan{Skip: "the guest agent is not running yet"}, nil
		}
		return step.Plan{}, fmt.Errorf("qm guest exec %s: %s", vmid, msg)
	}
	var out struct {
		ExitCode int    `json:"exitcode"`
		Out      string `json:"out-data"`
	}
	if err := json.Unmarshal(res.Stdout, &out); err != nil || out.ExitCode != 0 {
		return step.Plan{}, fmt.Errorf("qm guest exec %s: cannot read %s: %q", vmid, remote.HostKeyFile(pinned.Type()), res.Stdout)
	}
	return s.compare(out.Out, pinned)
}

// compare checks the key file's content against the key SSH pinned.
func (s *HostKeyCheck) compare(content string, pinned ssh.PublicKey) (step.Plan, error) {
	vmid := strconv.Itoa(s.VMID)
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(content))
	if err != nil {
		return step.Plan{}, fmt.Errorf("VM %s's %s is not a public key: %w", vmid, remote.HostKeyFile(pinned.Type()), err)
	}
	if ssh.FingerprintSHA256(key) != ssh.FingerprintSHA256(pinned) {
		return step.Plan{}, fmt.Errorf("VM %s's host key, read through the guest agent, is %s, but SSH to the VM presented %s: the SSH peer is not this VM; nothing more is done",
			vmid, ssh.FingerprintSHA256(key), ssh.FingerprintSHA256(pinned))
	}
	return step.Plan{Note: "VM host key " + ssh.FingerprintSHA256(key) + " confirmed by the guest agent"}, nil
}

// agentNotRunning reports whether qm guest (or the API's agent call) said
// the VM's guest agent does not answer yet (`QEMU guest agent is not
// running`, qemu-server src/PVE/QemuServer/Agent.pm, docs/upstream.md
// §1.7): qm's stderr, or the API's 500 message, is all that tells it from
// another failure.
func agentNotRunning(stderr string) bool {
	return strings.Contains(stderr, "QEMU guest agent is not running")
}
