package idempotency

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem types (the "type" member of the problem documents the middleware writes). Each URI names
// the constant's own documentation.
const (
	problemBase = "https://pkg.go.dev/github.com/txinbox/txinbox/idempotency#"

	// ProblemKeyMissing (400): the route requires an Idempotency-Key header and the request has none.
	ProblemKeyMissing = problemBase + "ProblemKeyMissing"
	// ProblemKeyInvalid (400): the Idempotency-Key header is not a valid key (see ParseKey).
	ProblemKeyInvalid = problemBase + "ProblemKeyInvalid"
	// ProblemRequestInvalid (400): the request body could not be read, Config.Fingerprint
	// rejected the request, or its route cannot be stored (see Config.Route).
	ProblemRequestInvalid = problemBase + "ProblemRequestInvalid"
	// ProblemUnauthenticated (401): Config.Principal could not identify the caller (an error, or
	// an empty or unstorable principal).
	ProblemUnauthenticated = problemBase + "ProblemUnauthenticated"
	// ProblemKeyInFlight (409): a request with the same key is being processed; retry after the
	// Retry-After delay.
	ProblemKeyInFlight = problemBase + "ProblemKeyInFlight"
	// ProblemRequestTooLarge (413): the request body is larger than Config.MaxRequestBytes.
	ProblemRequestTooLarge = problemBase + "ProblemRequestTooLarge"
	// ProblemKeyReused (422): the key was used for a different request (another fingerprint).
	ProblemKeyReused = problemBase + "ProblemKeyReused"
	// ProblemResponseTooLarge (500): the handler's response body is larger than
	// Config.MaxResponseBytes, so it could not be stored; nothing was committed and the key was
	// released.
	ProblemResponseTooLarge = problemBase + "ProblemResponseTooLarge"
	// ProblemStoreFailed (500): the database rejected the transaction (the handler left it
	// aborted, for example); nothing was committed and the key was released.
	ProblemStoreFailed = problemBase + "ProblemStoreFailed"
	// ProblemNotMigrated (500): the store's schema has no idempotency_keys table: migrations were
	// not run on it (migrate.Up, or the command "txinbox migrate up"). No retry helps until they are,
	// so the answer has no Retry-After; Config.FailOpen does not apply, and the handler does not run.
	ProblemNotMigrated = problemBase + "ProblemNotMigrated"
	// ProblemStoreUnavailable (503): the idempotency store could not be reached, or the commit was
	// interrupted; retry after the Retry-After delay with the same key (a commit that did happen is
	// then replayed).
	ProblemStoreUnavailable = problemBase + "ProblemStoreUnavailable"
)

// contentTypeProblem is the media type of problem documents (RFC 9457).
const contentTypeProblem = "application/problem+json"

// Problem is an RFC 9457 problem document, as written by the middleware.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

var titles = map[string]string{
	ProblemKeyMissing:       "Idempotency-Key header required",
	ProblemKeyInvalid:       "Invalid Idempotency-Key header",
	ProblemRequestInvalid:   "Invalid request",
	ProblemUnauthenticated:  "Caller not identified",
	ProblemKeyInFlight:      "Request with this Idempotency-Key in progress",
	ProblemRequestTooLarge:  "Request body too large",
	ProblemKeyReused:        "Idempotency-Key reused with a different request",
	ProblemResponseTooLarge: "Response too large to store",
	ProblemStoreFailed:      "Response could not be stored",
	ProblemNotMigrated:      "Idempotency store not set up",
	ProblemStoreUnavailable: "Idempotency store unavailable",
}

var statuses = map[string]int{
	ProblemKeyMissing:       http.StatusBadRequest,
	ProblemKeyInvalid:       http.StatusBadRequest,
	ProblemRequestInvalid:   http.StatusBadRequest,
	ProblemUnauthenticated:  http.StatusUnauthorized,
	ProblemKeyInFlight:      http.StatusConflict,
	ProblemRequestTooLarge:  http.StatusRequestEntityTooLarge,
	ProblemKeyReused:        http.StatusUnprocessableEntity,
	ProblemResponseTooLarge: http.StatusInternalServerError,
	ProblemStoreFailed:      http.StatusInternalServerError,
	ProblemNotMigrated:      http.StatusInternalServerError,
	ProblemStoreUnavailable: http.StatusServiceUnavailable,
}

// writeProblem writes the problem document of type typ with detail. retryAfter > 0 adds a
// Retry-After header (whole seconds, rounded up).
func writeProblem(w http.ResponseWriter, typ, detail string, retryAfter time.Duration) {
	p := Problem{Type: typ, Title: titles[typ], Status: statuses[typ], Detail: detail}
	body, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", contentTypeProblem)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
