package inbox

import "testing"

// A seen-key cache entry's fingerprint covers the kind as well as the payload, and keeps them apart:
// kind "K1" with payload 2 is not kind "K" with payload 12.
func TestSeenFingerprintCoversKind(t *testing.T) {
	p := []byte(`{"amount":1}`)
	if seenFingerprint("OrderPaid", p) != seenFingerprint("OrderPaid", []byte(`{"amount":1}`)) {
		t.Error("the same kind and payload have different fingerprints")
	}
	if seenFingerprint("OrderPaid", p) == seenFingerprint("OrderRefunded", p) {
		t.Error("the same payload under two kinds has one fingerprint")
	}
	if seenFingerprint("K1", []byte(`2`)) == seenFingerprint("K", []byte(`12`)) {
		t.Error("kind K1 with payload 2 has the fingerprint of kind K with payload 12")
	}
}
