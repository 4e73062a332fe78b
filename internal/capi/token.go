package capi

import (
	"context"
	"errors"
	"fmt"
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

// checkToken asks the API's version with CAPMOX's token, the way CAPMOX
// authenticates ("Authorization: PVEAPIToken=<id>=<secret>"), and
// returns the Proxmox VE version; a refused secret is a
// *TokenRejectedError.
func checkToken(ctx context.Context, api pve.Reader, apiURL, tokenID, source string, ca []byte) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := api.Version(ctx)
	if ue := pveaccess.Untrusted(err, strings.TrimSuffix(apiURL, "/"), ca); ue != nil {
		return "", ue
	}
	var ae *pve.APIError
	if errors.As(err, &ae) && (ae.Unauthenticated() || ae.Forbidden()) {
		return "", &TokenRejectedError{URL: strings.TrimSuffix(apiURL, "/"), TokenID: tokenID, Source: source, Status: ae.Status}
	}
	if err != nil {
		return "", fmt.Errorf("reach the Proxmox API: %w", err)
	}
	return v, nil
}

// Token checks the Proxmox token before any credential is written: a
// rejected secret fails the phase with nothing changed.
type Token struct {
	C      *Cluster
	Source string // where the secret came from, for the error
	// API is the Proxmox API with CAPMOX's token, its reads only: a step
	// holds no client that can change Proxmox.
	API pve.Reader
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
	v, err := checkToken(ctx, s.API, s.C.ProxmoxURL, s.C.TokenID, s.Source, s.C.ProxmoxCA)
	if err != nil {
		return step.Plan{}, err
	}
	note := fmt.Sprintf("token %s accepted by %s (Proxmox VE %s)", s.C.TokenID, s.C.ProxmoxURL, v)
	var warnings []string
	if s.C.SkipTLSVerify {
		warnings = append(warnings, "CAPMOX does not verify the Proxmox API's certificate (spec.proxmox.capmoxSkipTLSVerify): whatever answers at "+s.C.ProxmoxURL+" gets its token")
	}
	if s.Needs == nil {
		return step.Plan{Note: note, Warnings: warnings}, nil
	}
	major, ok := pveaccess.Known(pveaccess.Major(v))
	if !ok {
		return step.Plan{Note: note, Warnings: append(warnings, fmt.Sprintf("the token's privileges are not checked on Proxmox VE %s: mgmtctl knows those of PVE %d and %d", v, pveaccess.Versions[0], pveaccess.Versions[len(pveaccess.Versions)-1]))}, nil
	}
	missing, err := pveaccess.MissingFrom(ctx, s.Needs(major), s.API.Permissions)
	if err != nil {
		return step.Plan{}, err
	}
	if len(missing) > 0 {
		return step.Plan{}, &pveaccess.MissingError{TokenID: s.C.TokenID, Version: v, For: "CAPMOX", Missing: missing}
	}
	return step.Plan{Note: note + ", with every privilege CAPMOX needs", Warnings: warnings}, nil
}
