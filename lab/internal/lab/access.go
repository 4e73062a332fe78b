package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/mgmtctl/mgmtctl/lab/internal/pveapi"
)

// UseAPI turns the lab's configs (mgmt.yaml, and ha.yaml on a cluster)
// to spec.proxmox.access: api, with no node's SSH address, and makes
// mgmtctl's own token (MgmtctlTokenID) with exactly the grants `mgmtctl
// proxmox role --for mgmtctl` names for them: the lab's mgmtctl prints
// them, the lab's pveum makes them, and its secret goes to secrets.yaml
// as proxmox.mgmtctlTokenSecret. mgmtctl is the mgmtctl binary to ask.
// `labsim up --access api` calls it.
func (l *Lab) UseAPI(mgmtctl string) error {
	for _, p := range []string{l.ConfigPath(), l.HAConfigPath()} {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		s := string(b)
		if strings.Contains(s, "access: api") {
			continue
		}
		s = regexp.MustCompile(`(?m)^    host: .*\n`).ReplaceAllString(s, "")
		s = strings.Replace(s, "    user: root\n", "    access: api\n    mgmtctlTokenID: "+MgmtctlTokenID+"\n", 1)
		s = regexp.MustCompile(`, host: [0-9.]+`).ReplaceAllString(s, "")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return err
		}
	}
	secrets, err := os.ReadFile(l.SecretsPath())
	if err != nil {
		return err
	}
	if bytes.Contains(secrets, []byte("mgmtctlTokenSecret:")) {
		return nil
	}
	grants, err := l.mgmtctlRole(mgmtctl)
	if err != nil {
		return err
	}
	secret, err := l.grant(grants)
	if err != nil {
		return err
	}
	secrets = bytes.Replace(secrets, []byte("proxmox:\n"), []byte("proxmox:\n  mgmtctlTokenSecret: "+secret+"\n"), 1)
	return os.WriteFile(l.SecretsPath(), secrets, 0o600)
}

// mgmtctlRole runs the lab's mgmtctl: `proxmox role --for mgmtctl -o
// json` for the lab's PVE version, on the config with the most servers.
func (l *Lab) mgmtctlRole(mgmtctl string) ([]string, error) {
	cfg := l.ConfigPath()
	if exists(l.HAConfigPath()) {
		cfg = l.HAConfigPath()
	}
	cmd := exec.Command(mgmtctl, "--config", cfg, "--secrets", l.SecretsPath(), "-o", "json",
		"proxmox", "role", "--for", "mgmtctl", "--pve-version", strconv.Itoa(pveapi.LabMajor))
	cmd.Env = append(os.Environ(), "HOME="+l.LaptopHome())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("mgmtctl proxmox role --for mgmtctl: %v: %s", err, stderr.String())
	}
	var role struct {
		Commands []string `json:"commands"`
	}
	if err := json.Unmarshal(out, &role); err != nil {
		return nil, fmt.Errorf("mgmtctl proxmox role --for mgmtctl: %w", err)
	}
	return role.Commands, nil
}

// grant runs the pveum command lines (as package shell quotes them) on
// the cluster's access control, and returns the secret `user token add`
// made.
func (l *Lab) grant(lines []string) (string, error) {
	acc := pveapi.Access{Tokens: pveapi.TokenConfig{Path: l.TokenPath()}, UserCfg: l.UserCfgPath()}
	secret := ""
	for _, line := range lines {
		argv, err := splitShell(line)
		if err != nil || len(argv) < 2 || argv[0] != "pveum" {
			return "", fmt.Errorf("not a pveum command: %q", line)
		}
		args := argv[1:]
		tokenAdd := len(args) >= 3 && args[0] == "user" && args[1] == "token" && args[2] == "add"
		if tokenAdd {
			args = append(args, "--output-format", "json")
		}
		var out, errb bytes.Buffer
		if code := pveapi.PVEUM(args, acc, &out, &errb); code != 0 {
			return "", fmt.Errorf("%s: exit %d: %s", line, code, errb.String())
		}
		if tokenAdd {
			var t struct {
				Value string `json:"value"`
			}
			if err := json.Unmarshal(out.Bytes(), &t); err != nil || t.Value == "" {
				return "", fmt.Errorf("%s: no secret in %q", line, out.String())
			}
			secret = t.Value
		}
	}
	if secret == "" {
		return "", fmt.Errorf("mgmtctl's commands made no token")
	}
	return secret, nil
}

// splitShell splits a line package shell joined: words separated by
// spaces, a word in single quotes taken as is ('\” for a quote).
func splitShell(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, has := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case in && c == '\'':
			in = false
		case in:
			cur.WriteByte(c)
		case c == '\'':
			in, has = true, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			has = true
		case c == ' ':
			if has || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteByte(c)
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if has || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}
