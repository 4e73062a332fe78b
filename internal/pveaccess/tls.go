package pveaccess

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// HTTPClient is the client for a Proxmox VE API whose certificate is
// verified one of three ways, never skipped: by ca (PEM, the node's
// pve-root-ca.pem), by fingerprint (the SHA-256 of the certificate
// itself, as `pvenode cert info` prints it: for the self-signed
// certificate a node has out of the box, whose CA nobody else trusts), or,
// with neither, by the laptop's trust store.
func HTTPClient(ca []byte, fingerprint string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	switch {
	case fingerprint != "":
		want := normalizeFingerprint(fingerprint)
		// The chain is not checked against a CA: the pinned fingerprint
		// replaces it, and is checked on every connection.
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the Proxmox API sent no certificate")
				}
				sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
				if got := hex.EncodeToString(sum[:]); got != want {
					return &FingerprintError{Got: Fingerprint(cs.PeerCertificates[0].Raw), Want: fingerprint}
				}
				return nil
			}}
	case len(ca) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("spec.proxmox.caFile holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, nil
}

// Fingerprint is a certificate's SHA-256 as `pvenode cert info` prints it.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

func normalizeFingerprint(f string) string {
	return strings.ToLower(strings.ReplaceAll(f, ":", ""))
}

// FingerprintError is an API certificate that is not the pinned one.
type FingerprintError struct{ Got, Want string }

func (e *FingerprintError) Error() string {
	return fmt.Sprintf("the Proxmox API's certificate has SHA-256 fingerprint %s, not spec.proxmox.fingerprint %s: if the node's certificate was renewed, check the new one on the node (pvenode cert info) and pin it", e.Got, e.Want)
}

// ServedCertificate is the certificate the API at apiURL serves, read
// through hc (so verified as hc verifies: by the pinned fingerprint, for
// the one use it has, CAPMOX's trust in that same certificate), as PEM.
// The request carries no credentials; the API's answer (401) is not read.
func ServedCertificate(ctx context.Context, hc *http.Client, apiURL string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(apiURL, "/")+"/api2/json/version", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the Proxmox API's certificate: %w", err)
	}
	resp.Body.Close()
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return nil, fmt.Errorf("the Proxmox API at %s sent no certificate", apiURL)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: resp.TLS.PeerCertificates[0].Raw}), nil
}

// UntrustedError is the API's certificate refused by the configured CA:
// CAPMOX, which verifies it against the same CA, would refuse it too.
type UntrustedError struct {
	URL string
	// Served is the served certificate's fingerprint, CA the configured
	// CA's (of its first certificate).
	Served, CA string
	Err        error
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("the Proxmox API at %s serves a certificate (SHA-256 %s) that spec.proxmox.caFile's CA (SHA-256 %s) does not verify (%v): put the CA that signed it (the node's /etc/pve/pve-root-ca.pem) in caFile, or pin the certificate with spec.proxmox.fingerprint; CAPMOX, which verifies it the same way, is left as it is",
		e.URL, e.Served, e.CA, e.Err)
}

func (e *UntrustedError) Unwrap() error { return e.Err }

// Untrusted returns err as an *UntrustedError when it is the TLS
// handshake refusing the API's certificate for ca (PEM); otherwise nil.
func Untrusted(err error, apiURL string, ca []byte) *UntrustedError {
	var ve *tls.CertificateVerificationError
	if len(ca) == 0 || !errors.As(err, &ve) || len(ve.UnverifiedCertificates) == 0 {
		return nil
	}
	caFP := "(none)"
	if b, _ := pem.Decode(ca); b != nil {
		caFP = Fingerprint(b.Bytes)
	}
	return &UntrustedError{URL: apiURL, Served: Fingerprint(ve.UnverifiedCertificates[0].Raw), CA: caFP, Err: ve.Err}
}
