package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of the Standard Webhooks specification.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a secret's text form: "whsec_" followed by the base64 (standard, padded) of
// its bytes.
const SecretPrefix = "whsec_"

// MinSecretBytes and MaxSecretBytes bound the length of a sender's secret (Config.Secret), as the
// specification asks.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// defaultTolerance is the tolerance [Verify] applies when it is given none (documented there).
const defaultTolerance = 5 * time.Minute

// Errors of [Verify] (matched with errors.Is).
var (
	// ErrSecret: the secret is not "whsec_" (or nothing) followed by non-empty standard base64.
	ErrSecret = errors.New("txinbox/webhook: bad secret")
	// ErrMissingHeader: webhook-id, webhook-timestamp or webhook-signature is missing.
	ErrMissingHeader = errors.New("txinbox/webhook: missing header")
	// ErrTimestamp: webhook-timestamp is not a number of seconds, or is further from now than the
	// tolerance (a replayed or delayed request).
	ErrTimestamp = errors.New("txinbox/webhook: timestamp outside the tolerance")
	// ErrSignature: no v1 signature of webhook-signature matches the request.
	ErrSignature = errors.New("txinbox/webhook: no matching signature")
)

// NewSecret returns a new random secret of 32 bytes in its text form ("whsec_" + base64), for
// Config.Secret and the receiver's [Verify].
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics rather)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// decodeSecret returns the bytes of a secret in its text form; the "whsec_" prefix may be left out.
func decodeSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: want %q followed by standard base64", ErrSecret, SecretPrefix)
	}
	return key, nil
}

// sign returns the v1 signature of a request: base64 of HMAC-SHA256 under key of
// id + "." + timestamp + "." + body.
func sign(key []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Sign returns the webhook-signature header value of a request with the headers webhook-id = id and
// webhook-timestamp = at's Unix seconds, and body: "v1," followed by base64 of HMAC-SHA256, under
// the secret's bytes, of id + "." + timestamp + "." + body. It is what the Publisher sends; a
// receiver checks a request with [Verify].
func Sign(secret, id string, at time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	return "v1," + sign(key, id, strconv.FormatInt(at.Unix(), 10), body), nil
}

// Verify checks a request received from a [Publisher] (or any Standard Webhooks sender) with the
// shared secret: its headers h must carry webhook-id, webhook-timestamp and webhook-signature; the
// timestamp must be within tolerance of now (tolerance ≤ 0 means 5 minutes); and one of the
// space-separated signatures of webhook-signature must be "v1," followed by the signature of
// webhook-id, webhook-timestamp and body (see [Sign]), compared in constant time. body must be the
// request's body byte for byte, as read, before any parsing.
//
// It returns nil for an authentic request, else an error matching [ErrSecret], [ErrMissingHeader],
// [ErrTimestamp] or [ErrSignature]. A receiver then deduplicates by webhook-id (the event id): a
// sender retries a request whose answer it did not get, under the same id.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt(secret, h, body, tolerance, time.Now())
}

func verifyAt(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := decodeSecret(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	for name, v := range map[string]string{HeaderID: id, HeaderTimestamp: ts, HeaderSignature: sigs} {
		if v == "" {
			return fmt.Errorf("%w: %s", ErrMissingHeader, name)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not a number of seconds", ErrTimestamp, HeaderTimestamp, ts)
	}
	if tolerance <= 0 {
		tolerance = defaultTolerance
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s is %v from now (tolerance %v)", ErrTimestamp, HeaderTimestamp, d.Round(time.Second), tolerance)
	}
	want := []byte(sign(key, id, ts, body))
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return ErrSignature
}
