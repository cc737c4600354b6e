package inbox

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txinbox/txinbox"
)

// StoredMessage is a stored message with every column of its row. Times that are not set are zero
// (and left out of its JSON form).
type StoredMessage struct {
	ID       int64  `json:"id"`
	Consumer string `json:"consumer"`
	Key      string `json:"key"`
	Kind     string `json:"kind"`
	// Payload is the JSON document as stored (jsonb: key order and spacing normalised); null for a
	// message stored undecodable.
	Payload json.RawMessage `json:"payload"`
	// Raw holds the original bytes of a message that could not be decoded; nil otherwise.
	Raw     []byte            `json:"raw,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Fingerprint is the SHA-256 of the kind and payload, which duplicates are compared by.
	Fingerprint Fingerprint `json:"fingerprint"`
	OrderingKey string      `json:"ordering_key,omitempty"`
	State       State       `json:"state"`
	// AttemptsStarted counts the attempts claimed by a worker, AttemptsFailed those that failed; more
	// started than failed means one is running or never finished.
	AttemptsStarted int       `json:"attempts_started"`
	AttemptsFailed  int       `json:"attempts_failed"`
	NextRunAt       time.Time `json:"next_run_at,omitzero"`
	Owner           string    `json:"owner,omitempty"`       // the worker holding the claim
	LeaseUntil      time.Time `json:"lease_until,omitzero"`  // end of the current claim
	Token           int64     `json:"token"`                 // fencing token, incremented by every claim
	LastError       string    `json:"last_error,omitempty"`  // error of the latest failed attempt; empty once completed
	ReceivedAt      time.Time `json:"received_at,omitzero"`  // when it was received (or renewed)
	StartedAt       time.Time `json:"started_at,omitzero"`   // start of the latest attempt
	CompletedAt     time.Time `json:"completed_at,omitzero"` // when it completed or died
	// ExpiresAt is the end of the dedup window of a completed message; after it the key is accepted as
	// a new message.
	ExpiresAt time.Time       `json:"expires_at,omitzero"`
	Result    json.RawMessage `json:"result,omitempty"` // what the handler stored, if anything
	// History is the message's last failed attempts, at most 10, oldest first (nil when none failed):
	// see txinbox.Attempt. A completed attempt is not listed: CompletedAt is its time.
	History []txinbox.Attempt `json:"history,omitempty"`
}

// Fingerprint is the SHA-256 digest a message's duplicates are compared by. Its text and JSON form
// is lowercase hex (64 digits), as txinbox's CLI prints it.
type Fingerprint []byte

// String returns f in lowercase hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f) }

// MarshalText returns f in lowercase hex.
func (f Fingerprint) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, f), nil }

// UnmarshalText reads f from hex (either case).
func (f *Fingerprint) UnmarshalText(b []byte) error {
	d, err := hex.AppendDecode(nil, b)
	if err != nil {
		return fmt.Errorf("txinbox: fingerprint: %w", err)
	}
	*f = d
	return nil
}
