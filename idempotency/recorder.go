package idempotency

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// ErrResponseTooLarge is returned by the ResponseWriter the handler gets when its response body
// exceeds Config.MaxResponseBytes. The middleware then answers 500 (ProblemResponseTooLarge), rolls
// the transaction back and releases the key.
var ErrResponseTooLarge = errors.New("idempotency: response body larger than Config.MaxResponseBytes")

// recorder is the ResponseWriter handed to the handler: it buffers the whole response (nothing
// reaches the client before the transaction has committed), like net/http would send it.
type recorder struct {
	header   http.Header // what the handler manipulates
	sent     http.Header // snapshot taken by WriteHeader, as net/http does
	status   int
	body     []byte
	max      int
	overflow bool
}

func newRecorder(limit int) *recorder { return &recorder{header: http.Header{}, max: limit} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if r.status != 0 || (code >= 100 && code < 200) {
		return // superfluous call, or an informational response (not recorded)
	}
	r.status = code
	r.sent = r.header.Clone()
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(r.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if r.overflow || len(r.body)+len(p) > r.max {
		r.overflow = true
		return 0, ErrResponseTooLarge
	}
	r.body = append(r.body, p...)
	return len(p), nil
}

// finish completes the response the way net/http would: status 200 when none was written, and a
// sniffed Content-Type when the handler set none.
func (r *recorder) finish() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if _, ok := r.sent["Content-Type"]; !ok && r.sent.Get("Content-Encoding") == "" && len(r.body) > 0 {
		r.sent.Set("Content-Type", http.DetectContentType(r.body))
	}
}

// writeResponse sends a complete response: headers, an exact Content-Length, status and body.
func writeResponse(w http.ResponseWriter, status int, header http.Header, body []byte, replayed bool) {
	h := w.Header()
	for k, v := range header {
		h[k] = v
	}
	if bodyAllowed(status) {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	w.WriteHeader(status)
	if len(body) > 0 && bodyAllowed(status) {
		_, _ = w.Write(body)
	}
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status < 200) && status != http.StatusNoContent && status != http.StatusNotModified
}
