package inbox_test

import (
	"fmt"

	"github.com/txinbox/txinbox/inbox"
)

// The producer's own message id, scoped by the producer's name: the recommended key. Two producers
// that both number their messages from 1 do not collide.
func ExampleProducerKey() {
	fmt.Println(inbox.ProducerKey("billing", "msg-1"))
	fmt.Println(inbox.ProducerKey("shipping", "msg-1"))
	// A ':' in the producer's name is escaped, so it cannot pass for another producer.
	fmt.Println(inbox.ProducerKey("eu:billing", "msg-1"))
	// Without a producer name the id is the key as it is.
	fmt.Println(inbox.ProducerKey("", "msg-1"))
	// Output:
	// billing:msg-1
	// shipping:msg-1
	// eu%3Abilling:msg-1
	// msg-1
}

// A key derived from the content, for producers that give no id. The kind is part of the hash, but
// two deliveries with the same bytes are one message: a customer who really pays twice the same
// amount for the same order is credited once. Prefer a producer id when there is one.
func ExampleContentKey() {
	payload := []byte(`{"order_id":"o-1","amount_cents":500}`)
	a := inbox.ContentKey("OrderPaid", payload)
	b := inbox.ContentKey("OrderPaid", payload)
	c := inbox.ContentKey("OrderRefunded", payload)
	fmt.Println(a[:len("sha256:")], len(a))
	fmt.Println("same content, same key:", a == b)
	fmt.Println("other kind, other key:", a == c)
	// The hash is over the exact bytes: the same JSON spaced differently is another key.
	fmt.Println("respaced, same key:", a == inbox.ContentKey("OrderPaid", []byte(`{"order_id": "o-1", "amount_cents": 500}`)))
	// Output:
	// sha256: 71
	// same content, same key: true
	// other kind, other key: false
	// respaced, same key: false
}

// Business fields joined into one key: one monthly invoice per customer, whoever asks for it.
func ExampleCompositeKey() {
	fmt.Println(inbox.CompositeKey("invoice", "customer-7", "2026-11"))
	// ':' and '%' inside a part are escaped, so different part lists never give the same key.
	fmt.Println(inbox.CompositeKey("a:b", "c"))
	fmt.Println(inbox.CompositeKey("a", "b:c"))
	fmt.Println(inbox.CompositeKey("100%", "sure"))
	// Output:
	// invoice:customer-7:2026-11
	// a%3Ab:c
	// a:b%3Ac
	// 100%25:sure
}

// Broker coordinates: a Kafka record is identified by its topic, partition and offset, which stay
// the same when the record is delivered again.
func ExampleBrokerKey() {
	fmt.Println(inbox.BrokerKey("payments", 3, 1042))
	fmt.Println(inbox.BrokerKey("eu:payments", 0, 7))
	// Output:
	// payments:3:1042
	// eu%3Apayments:0:7
}
