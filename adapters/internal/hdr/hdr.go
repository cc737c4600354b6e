// Package hdr checks event header names for the publishers whose brokers carry headers in an HTTP-like
// text form (webhooks, NATS).
package hdr

import "strings"

// Token reports whether name is an HTTP token (RFC 9110 section 5.6.2): one or more of the letters,
// digits and !#$%&'*+-.^_`|~. A header name must be one in HTTP and in NATS message headers; one
// that is not (a space, a colon, a non-ASCII letter in it) cannot be sent.
func Token(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
