package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Key strategies. Each returns a key that passes [txinbox.ValidateKey] when its inputs are valid text; a key
// longer than 512 bytes is rejected on receipt, so hash long business keys with ContentKey.

// ProducerKey is the recommended strategy: the producer's own message id, scoped by the producer's
// name so that two producers' ids cannot collide ("billing:9f1c..."). Nothing is applied by default:
// Message.Key is required, and the caller picks the strategy.
func ProducerKey(producer, messageID string) string {
	if producer == "" {
		return messageID
	}
	return escapePart(producer) + ":" + messageID
}

// ContentKey derives a key from the content: "sha256:" and the hex SHA-256 of kind, a newline and
// payload. Use it as a last resort, when the producer gives no id: two genuinely distinct messages with
// the same content are then applied once.
func ContentKey(kind string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{'\n'})
	h.Write(payload)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// CompositeKey joins business fields into one key ("customer-7:order-42:2026-11-22"). A ':' or '%'
// inside a part is percent-encoded, so distinct part lists never give the same key.
func CompositeKey(parts ...string) string {
	esc := make([]string, len(parts))
	for i, p := range parts {
		esc[i] = escapePart(p)
	}
	return strings.Join(esc, ":")
}

// BrokerKey is the broker-coordinates strategy, "topic:partition:offset": unique per record in a
// partitioned log such as Kafka, and stable across redeliveries.
func BrokerKey(topic string, partition int32, offset int64) string {
	return escapePart(topic) + ":" + strconv.FormatInt(int64(partition), 10) + ":" + strconv.FormatInt(offset, 10)
}

func escapePart(s string) string {
	if !strings.ContainsAny(s, ":%") {
		return s
	}
	return strings.NewReplacer("%", "%25", ":", "%3A").Replace(s)
}
