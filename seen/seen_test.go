package seen

import "testing"

// Fingerprint covers the kind as well as the payload, and keeps them apart: kind "K1" with payload 2
// is not kind "K" with payload 12.
func TestFingerprintCoversKind(t *testing.T) {
	p := []byte(`{"amount":1}`)
	if Fingerprint("OrderPaid", p) != Fingerprint("OrderPaid", []byte(`{"amount":1}`)) {
		t.Error("the same kind and payload have different fingerprints")
	}
	if Fingerprint("OrderPaid", p) == Fingerprint("OrderRefunded", p) {
		t.Error("the same payload under two kinds has one fingerprint")
	}
	if Fingerprint("K1", []byte(`2`)) == Fingerprint("K", []byte(`12`)) {
		t.Error("kind K1 with payload 2 has the fingerprint of kind K with payload 12")
	}
}
