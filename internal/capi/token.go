package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/pveaccess"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// TokenRejectedError is the Proxmox API refusing the configured token.
type TokenRejectedError struct {
	URL, TokenID, Source string
	Status               int
}

func (e *TokenRejectedError) Error() string {
	return fmt.Sprintf("Proxmox API %s: token secret rejected for %s (HTTP %d); check proxmox.tokenSecret in %s", e.URL, e.TokenID, e.Status, e.Source)
}

// CheckToken calls GET /api2/json/version with the token, the way CAPMOX
// authenticates ("Authorization: PVEAPIToken=<id>=<secret>"), and returns
// the Proxmox VE version. The secret travels only in that header.
func CheckToken(ctx context.Context, hc *http.Client, apiURL, tokenID, secret, source string) (string, error) {
	u := strings.TrimSuffix(apiURL, "/") + "/api2/json/version"
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("Proxmox API %s: %w", u, err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+tokenID+"="+secret)
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("reach the Proxmox API: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return "", &TokenRejectedError{URL: u, TokenID: tokenID, Source: source, Status: resp.StatusCode}
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("Proxmox API %s answered %s", u, resp.Status)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var v struct {
		Data struct {
			Version string `json:"version"`
		} `json:"data"`
	}
	_ = json.Unmarshal(b, &v)
	return v.Data.Version, nil
}

// Token checks the Proxmox token before any credential is written: a
// rejected secret fails the phase with nothing changed.
type Token struct {
	C      *Cluster
	Source string // where the secret came from, for the error
	HTTP   *http.Client
	// Needs is what the token needs on the node's major version (CAPMOX's
	// least privileges): its effective permissions are read and every
	// privilege missing is named before anything is written. nil checks
	// none.
	Needs func(major int) []pveaccess.Grant
}

var _ step.Step = (*Token)(nil)

// ID implements step.Step.
func (s *Token) ID() string { return "proxmox-token" }

// Independent implements step.Independent: its Check asks the Proxmox API,
// nothing an earlier step left.
func (s *Token) Independent() {}

// Host implements step.Step.
func (s *Token) Host() string { return s.C.Name }

// Check implements step.Step.
func (s *Token) Check(ctx context.Context) (step.Plan, error) {
	v, err := CheckToken(ctx, s.HTTP, s.C.ProxmoxURL, s.C.TokenID, s.C.TokenSecret, s.Source)
	if err != nil {
		return step.Plan{}, err
	}
	note := fmt.Sprintf("token %s accepted by %s (Proxmox VE %s)", s.C.TokenID, s.C.ProxmoxURL, v)
	if s.Needs == nil {
		return step.Plan{Note: note}, nil
	}
	major, ok := pveaccess.Known(pveaccess.Major(v))
	if !ok {
		return step.Plan{Note: note, Warnings: []string{fmt.Sprintf("the token's privileges are not checked on Proxmox VE %s: mgmtctl knows those of PVE %d and %d", v, pveaccess.Versions[0], pveaccess.Versions[len(pveaccess.Versions)-1])}}, nil
	}
	api := pve.New(s.C.ProxmoxURL, s.C.TokenID, s.C.TokenSecret, s.HTTP)
	missing, err := pveaccess.MissingFrom(ctx, s.Needs(major), api.Permissions)
	if err != nil {
		return step.Plan{}, err
	}
	if len(missing) > 0 {
		return step.Plan{}, &pveaccess.MissingError{TokenID: s.C.TokenID, Version: v, For: "CAPMOX", Missing: missing}
	}
	return step.Plan{Note: note + ", with every privilege CAPMOX needs"}, nil
}
