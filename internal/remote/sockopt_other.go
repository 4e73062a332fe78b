//go:build !linux

package remote

import (
	"syscall"
	"time"
)

// userTimeout is Linux's TCP_USER_TIMEOUT; elsewhere (a macOS laptop) the
// keepalive watch alone bounds a dead link.
func userTimeout(time.Duration) func(network, address string, rc syscall.RawConn) error {
	return nil
}
