package pveaccess

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
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
