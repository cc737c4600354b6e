// Package owner names a process in the claims, batches and leases of txinbox's tables.
package owner

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// New returns a fresh owner name, "hostname:pid:random" (8 hex digits): the default Owner of a
// pool, relay, maintainer and runner. Two calls in one process return different names.
func New() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
}
