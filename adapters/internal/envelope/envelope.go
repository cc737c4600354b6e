// Package envelope maps the CloudEvents 1.0 envelope of an outbox event ([outbox.Event.CloudEvent])
// to and from the headers of each broker, in binary content mode (the payload is the event's data,
// byte for byte), as the CloudEvents protocol bindings say: the publishers write it, and the
// consumers read it into adapters.Record.CloudEvent.
//
// The CloudEvents SDK for Go is not used here: its event and binding packages would bring
// json-iterator (and reflect2) into every program that imports a broker adapter, its HTTP binding
// zap, it has no binding for AMQP 0-9-1, and the envelope of an outbox event is a fixed set of string
// attributes whose mapping fits in this file. The tests check the publishers' messages with the SDK.
package envelope

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// The CloudEvents 1.0 attributes of the envelope (see [outbox.Event.CloudEvent]).
const (
	AttrSpecVersion     = "specversion"
	AttrID              = "id"
	AttrSource          = "source"
	AttrType            = "type"
	AttrTime            = "time"
	AttrDataContentType = "datacontenttype"
	AttrPartitionKey    = "partitionkey" // the Partitioning extension
	AttrTraceParent     = "traceparent"  // the Distributed Tracing extension
	AttrTraceState      = "tracestate"
)

// Names are the attributes of the envelope, in the order the publishers write them.
var Names = []string{
	AttrSpecVersion, AttrID, AttrSource, AttrType, AttrTime,
	AttrDataContentType, AttrPartitionKey, AttrTraceParent, AttrTraceState,
}

// Binding is how one protocol binding of CloudEvents carries the attributes in headers.
type Binding struct {
	// Prefix is put before an attribute's name to make its header's: "ce-" (HTTP, NATS), "ce_"
	// (Kafka), "cloudEvents_" (AMQP application properties).
	Prefix string
	// Alt is another prefix that readers accept: "cloudEvents:" (AMQP); "" for none.
	Alt string
	// Percent says that values are percent-encoded (HTTP and NATS headers, which carry printable
	// ASCII only): see [PercentEncode].
	Percent bool
	// ContentType names the header that carries datacontenttype instead of a prefixed one:
	// "Content-Type" (HTTP), "content-type" (Kafka); "" when datacontenttype is prefixed as the other
	// attributes (NATS) or when NoContentType is set.
	ContentType string
	// NoContentType says that datacontenttype is not a header at all but a property of the
	// protocol's message (AMQP's content-type), which the caller reads and writes itself.
	NoContentType bool
}

// The bindings of the brokers txinbox supports.
var (
	// HTTP: ce- headers, percent-encoded values, datacontenttype as Content-Type.
	HTTP = Binding{Prefix: "ce-", Percent: true, ContentType: "Content-Type"}
	// NATS: ce- headers for every attribute, percent-encoded values.
	NATS = Binding{Prefix: "ce-", Percent: true}
	// Kafka: ce_ headers, datacontenttype as the content-type header.
	Kafka = Binding{Prefix: "ce_", ContentType: "content-type"}
	// AMQP: cloudEvents_ application properties (headers in AMQP 0-9-1), datacontenttype as the
	// content-type property.
	AMQP = Binding{Prefix: "cloudEvents_", Alt: "cloudEvents:", NoContentType: true}
)

// bindings are every binding, for recognizing the prefixed copies of attributes whatever the broker.
var bindings = []Binding{HTTP, NATS, Kafka, AMQP}

// Header is one header of a message.
type Header struct {
	Name, Value string
}

// Headers returns the headers of the message that carries ev in binding b, in this order:
//
//   - ev's own headers, by name, except those named, in any case, like one of the headers below:
//     among them the W3C trace context "traceparent" and "tracestate", the protocol's headers, which
//     the relay puts there (the envelope's traceparent and tracestate attributes are their copies);
//   - the envelope (ev.CloudEvent()): each attribute that is not empty as Prefix + name, with its
//     value percent-encoded where the binding says so, but datacontenttype under ContentType (or
//     left out with NoContentType);
//   - own, the broker's own headers (a JetStream Nats-Msg-Id, the Kafka id header, the Standard
//     Webhooks headers), which replace any header above of the same name in any case.
//
// An event whose ContentType is "" (one not handed over by a relay) is sent as
// [outbox.DefaultContentType], as [ContentType] says.
func (b Binding) Headers(ev *outbox.Event, own ...Header) []Header {
	// The attributes of ev.CloudEvent(), in the order of Names, read from ev without building that
	// map: this runs once per event sent (TestHeadersCarryTheCloudEvent checks that they agree).
	var traceParent, traceState string
	if traceParent = ev.Headers[txinbox.HeaderTraceParent]; traceParent != "" {
		traceState = ev.Headers[txinbox.HeaderTraceState]
	}
	values := [...]string{"1.0", ev.ID, ev.Source, ev.Kind, ev.CreatedAt.UTC().Format(time.RFC3339Nano),
		ContentType(ev), ev.Key, traceParent, traceState}
	names := b.names()
	var buf [len(values) + 2]Header // the envelope and own, on the stack for up to two own headers
	env := buf[:0]
	for i, v := range values {
		if v == "" {
			continue
		}
		name := names[i]
		switch {
		case Names[i] == AttrDataContentType && b.NoContentType:
			continue
		case Names[i] == AttrDataContentType && b.ContentType != "":
			name = b.ContentType
		case b.Percent:
			v = PercentEncode(v)
		}
		if !named(own, name) {
			env = append(env, Header{name, v})
		}
	}
	env = append(env, own...)
	out := make([]Header, 0, len(ev.Headers)+len(env))
	for name, v := range ev.Headers {
		if !named(env, name) {
			out = append(out, Header{name, v})
		}
	}
	slices.SortFunc(out, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return append(out, env...)
}

// prefixed holds, by prefix, the prefixed name of each attribute of Names, for the bindings of this
// package: no name is built per event.
var prefixed = func() map[string][]string {
	m := map[string][]string{}
	for _, b := range bindings {
		m[b.Prefix] = b.prefix()
	}
	return m
}()

// names returns Prefix + each name of Names.
func (b Binding) names() []string {
	if ns, ok := prefixed[b.Prefix]; ok {
		return ns
	}
	return b.prefix()
}

func (b Binding) prefix() []string {
	ns := make([]string, len(Names))
	for i, n := range Names {
		ns[i] = b.Prefix + n
	}
	return ns
}

// ContentType returns ev.ContentType, or [outbox.DefaultContentType] when it is "" (an event that
// no relay handed over: a relay applies the default).
func ContentType(ev *outbox.Event) string {
	if ev.ContentType == "" {
		return outbox.DefaultContentType
	}
	return ev.ContentType
}

// named reports whether a header of hs is named name, in any case.
func named(hs []Header, name string) bool {
	return slices.ContainsFunc(hs, func(h Header) bool { return strings.EqualFold(h.Name, name) })
}

// Attributes returns the CloudEvents attributes that the headers h of a message carry in binding b,
// by attribute name: every header whose name starts with Prefix or Alt (in any case) gives the
// attribute named by the rest, in lower case, with its value percent-decoded where the binding says
// so; a value that does not decode (see [PercentDecode]) is left out. When there is such an
// attribute, the ContentType header (in any case) gives datacontenttype. It returns nil when the
// headers carry no attribute.
func (b Binding) Attributes(h map[string]string) map[string]string {
	var attrs map[string]string
	for name, v := range h {
		attr, ok := b.attribute(name)
		if !ok {
			continue
		}
		if b.Percent {
			d, err := PercentDecode(v)
			if err != nil {
				continue
			}
			v = d
		}
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[attr] = v
	}
	if attrs != nil && b.ContentType != "" {
		for name, v := range h {
			if strings.EqualFold(name, b.ContentType) {
				attrs[AttrDataContentType] = v
			}
		}
	}
	return attrs
}

// attribute returns the attribute a header named name carries in b, if it carries one.
func (b Binding) attribute(name string) (string, bool) {
	for _, p := range []string{b.Prefix, b.Alt} {
		if p != "" && len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
			return strings.ToLower(name[len(p):]), true
		}
	}
	return "", false
}

// IsCopy reports whether a header named name is the prefixed copy, in one of the bindings, of an
// attribute of attrs: "ce-id", "ce_id", "cloudEvents_id" or "cloudEvents:id" (in any case) when attrs
// has an id.
func IsCopy(name string, attrs map[string]string) bool {
	for _, b := range bindings {
		if attr, ok := b.attribute(name); ok {
			if _, ok := attrs[attr]; ok {
				return true
			}
		}
	}
	return false
}

// PercentEncode encodes an attribute value for an HTTP or NATS header as their bindings say: every
// byte of its UTF-8 that is a space, a double quote, a percent sign or outside printable ASCII
// (U+0021 to U+007E) becomes %XY, in upper-case hexadecimal; the other bytes stay.
func PercentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	i := 0
	for i < len(s) && s[i] > ' ' && s[i] < 0x7f && s[i] != '"' && s[i] != '%' {
		i++
	}
	if i == len(s) {
		return s // nothing to encode: the common case, without a copy
	}
	var b strings.Builder
	b.Grow(len(s) + 2*(len(s)-i))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c > ' ' && c < 0x7f && c != '"' && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// ErrEncoding is returned (wrapped) by [PercentDecode] for a value it cannot decode.
var ErrEncoding = errors.New("txinbox/adapters: bad attribute encoding")

// PercentDecode decodes an attribute value of an HTTP or NATS header as their bindings say: a value
// in double quotes is first unquoted (RFC 7230 section 3.2.6: a backslash escapes the next
// character), then each %XY (hexadecimal in either case) becomes the byte XY. The result must be
// valid UTF-8 (an overlong encoding such as %C0%A0 is not): otherwise, or for a malformed %
// sequence or quoted string, it returns an error wrapping [ErrEncoding].
func PercentDecode(s string) (string, error) {
	if strings.HasPrefix(s, `"`) {
		u, err := unquote(s)
		if err != nil {
			return "", err
		}
		s = u
	}
	if !strings.Contains(s, "%") {
		if !utf8.ValidString(s) {
			return "", fmt.Errorf("%w: not UTF-8", ErrEncoding)
		}
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: %q ends in an incomplete %% sequence", ErrEncoding, s)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: %q has a %% not followed by two hexadecimal digits", ErrEncoding, s)
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: %q decodes to bytes that are not UTF-8", ErrEncoding, s)
	}
	return string(b), nil
}

// unquote returns the content of the quoted string s (RFC 7230 section 3.2.6).
func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", fmt.Errorf("%w: unterminated quoted string", ErrEncoding)
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) {
				return "", fmt.Errorf("%w: quoted string ends in a backslash", ErrEncoding)
			}
			i++
			b.WriteByte(s[i])
		case '"':
			return "", fmt.Errorf("%w: unescaped double quote in a quoted string", ErrEncoding)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
