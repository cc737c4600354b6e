package inbox

import "crypto/sha256"

// seenFingerprint returns the fingerprint a seen-key cache entry holds for a message of kind and
// payload (txinbox.SeenEntry.Fingerprint): SHA-256 of kind, "\n" and the payload's exact bytes.
func seenFingerprint(kind string, payload []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{'\n'})
	h.Write(payload)
	var f [sha256.Size]byte
	h.Sum(f[:0])
	return f
}
