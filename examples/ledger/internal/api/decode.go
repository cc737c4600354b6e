package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 64 << 10

// errBody is a body that was answered with a problem already.
var errBody = errors.New("api: body rejected")

// readBody reads a JSON request body, answering 415 or 413 itself (and returning errBody).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			writeProblem(w, http.StatusUnsupportedMediaType, ProblemUnsupportedMediaType, "Unsupported media type",
				fmt.Sprintf("The body must be application/json, not %q.", ct))
			return nil, errBody
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "Body too large",
			fmt.Sprintf("The body must be at most %d bytes.", MaxBodyBytes))
		return nil, errBody
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidBody, "Invalid body", "The body could not be read.")
		return nil, errBody
	}
	return body, nil
}

// object is a decoded JSON object: its members, in order, as raw JSON.
type object struct {
	fields   map[string]json.RawMessage
	problems []*ledger.FieldError
}

// decodeObject parses body as one JSON object whose members are all in known, each at most once. A
// body that is not such an object returns a single problem for the field "body"; unknown and repeated
// members are reported as problems of those fields.
func decodeObject(body []byte, known ...string) *object {
	o := &object{fields: map[string]json.RawMessage{}}
	bad := func(detail string) *object {
		o.problems = []*ledger.FieldError{{Field: "body", Detail: detail}}
		return o
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		if err == io.EOF {
			return bad("is empty; send a JSON object")
		}
		return bad("is not valid JSON: " + err.Error())
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return bad("must be a JSON object")
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return bad("is not valid JSON: " + err.Error())
		}
		name := tok.(string) // object keys are always strings
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return bad("is not valid JSON: " + err.Error())
		}
		switch {
		case !slices.Contains(known, name):
			o.problems = append(o.problems, &ledger.FieldError{Field: name, Detail: "is not a known field (known: " + strings.Join(known, ", ") + ")"})
		case o.fields[name] != nil:
			o.problems = append(o.problems, &ledger.FieldError{Field: name, Detail: "appears more than once"})
		default:
			o.fields[name] = raw
		}
	}
	if _, err := d.Token(); err != nil { // the closing brace
		return bad("is not valid JSON: " + err.Error())
	}
	if _, err := d.Token(); err != io.EOF {
		return bad("must hold a single JSON object and nothing after it")
	}
	return o
}

func (o *object) fail(field, detail string) {
	o.problems = append(o.problems, &ledger.FieldError{Field: field, Detail: detail})
}

// raw returns the member's value, or records a problem if it is missing or null.
func (o *object) raw(field string) (json.RawMessage, bool) {
	v, ok := o.fields[field]
	if !ok || string(v) == "null" {
		// A member reported as unknown or repeated is not reported missing too.
		for _, p := range o.problems {
			if p.Field == field {
				return nil, false
			}
		}
		o.fail(field, "is required")
		return nil, false
	}
	return v, true
}

// string returns a required string member.
func (o *object) string(field string) string {
	v, ok := o.raw(field)
	if !ok {
		return ""
	}
	var s string
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		o.fail(field, "must be a string")
		return ""
	}
	return s
}

// int64 returns a required integer member (a JSON number without fraction or exponent).
func (o *object) int64(field string) int64 {
	v, ok := o.raw(field)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		o.fail(field, "must be an integer (a JSON number without fraction or exponent)")
		return 0
	}
	return n
}

// time returns a required RFC 3339 time member.
func (o *object) time(field string) time.Time {
	s := o.string(field)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		o.fail(field, "must be an RFC 3339 time, like 2026-11-22T10:00:00Z")
		return time.Time{}
	}
	return t
}

// check adds the problems of err (a *ledger.FieldError) unless field already has one.
func (o *object) check(err error) {
	var fe *ledger.FieldError
	if !errors.As(err, &fe) {
		return
	}
	for _, p := range o.problems {
		if p.Field == fe.Field {
			return
		}
	}
	o.problems = append(o.problems, fe)
}

// decodeEvent decodes and validates an OrderPaid event.
func decodeEvent(body []byte) (ledger.OrderPaid, []*ledger.FieldError) {
	o := decodeObject(body, "event_id", "order_id", "account_id", "amount_cents", "occurred_at")
	if len(o.problems) == 1 && o.problems[0].Field == "body" {
		return ledger.OrderPaid{}, o.problems
	}
	ev := ledger.OrderPaid{
		EventID:     o.string("event_id"),
		OrderID:     o.string("order_id"),
		AccountID:   o.string("account_id"),
		AmountCents: o.int64("amount_cents"),
		OccurredAt:  o.time("occurred_at"),
	}
	// Validate the fields that decoded, so that one answer lists every problem.
	for _, p := range ev.Validate() {
		if _, present := o.fields[p.Field]; present {
			o.check(p)
		}
	}
	if len(o.problems) > 0 {
		return ledger.OrderPaid{}, o.problems
	}
	ev.OccurredAt = ev.OccurredAt.UTC()
	return ev, nil
}

// creditRequest is the body of POST /v1/credits.
type creditRequest struct {
	AccountID   string
	AmountCents int64
}

func decodeCredit(body []byte) (creditRequest, []*ledger.FieldError) {
	o := decodeObject(body, "account_id", "amount_cents")
	if len(o.problems) == 1 && o.problems[0].Field == "body" {
		return creditRequest{}, o.problems
	}
	c := creditRequest{AccountID: o.string("account_id"), AmountCents: o.int64("amount_cents")}
	if _, ok := o.fields["account_id"]; ok {
		o.check(ledger.ValidateAccountID(c.AccountID))
	}
	if _, ok := o.fields["amount_cents"]; ok {
		o.check(ledger.ValidateAmount(c.AmountCents))
	}
	if len(o.problems) > 0 {
		return creditRequest{}, o.problems
	}
	return c, nil
}
