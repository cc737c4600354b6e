package api

import (
	"encoding/json"
	"net/http"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
)

// ContentTypeProblem is the media type of error responses (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// Problem types of the ledger API (the "type" member of its problem documents).
const (
	problemBase = "urn:txinbox:ledger:problem:"
	// ProblemInvalidBody (400): the body is not a valid request; Errors lists every problem found.
	ProblemInvalidBody = problemBase + "invalid-body"
	// ProblemInvalidAccount (400): the account id in the path is not valid.
	ProblemInvalidAccount = problemBase + "invalid-account"
	// ProblemUnsupportedMediaType (415): the body is not application/json.
	ProblemUnsupportedMediaType = problemBase + "unsupported-media-type"
	// ProblemBodyTooLarge (413): the body is larger than MaxBodyBytes.
	ProblemBodyTooLarge = problemBase + "body-too-large"
	// ProblemEventConflict (422): the event_id is stored with a different event.
	ProblemEventConflict = problemBase + "event-id-reused"
	// ProblemAccountNotFound (404): the account has no entry.
	ProblemAccountNotFound = problemBase + "account-not-found"
	// ProblemUnavailable (503): the database could not be reached; nothing was stored. Retry.
	ProblemUnavailable = problemBase + "unavailable"
	// ProblemInternal (500): an unexpected error; nothing was stored.
	ProblemInternal = problemBase + "internal"
)

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors lists the invalid fields of a ProblemInvalidBody.
	Errors []*ledger.FieldError `json:"errors,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, errs ...*ledger.FieldError) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", ContentTypeProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: typ, Title: title, Status: status, Detail: detail, Errors: errs})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
