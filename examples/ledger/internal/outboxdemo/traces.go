package outboxdemo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// spansExt ends the names of the files into which the services write their spans (--trace-file).
const spansExt = ".spans"

// The names of the spans the check follows: the ledger API's span of a credit's request, and
// txotel's spans.
const (
	requestSpan = "POST /v1/credits"
	publishSpan = "txinbox.publish"
	relaySpan   = "txinbox.relay"
	receiveSpan = "txinbox.receive"
	handleSpan  = "txinbox.handle"
)

// span is one span, as the OpenTelemetry stdout exporter (stdouttrace) wrote it.
type span struct {
	name                string
	trace, id, parent   string // hex; parent is all zeros for a root
	links               []string
	attrs               map[string]string
	service, proc, file string // service.name; "ledger relay, pid 123"; the file it came from
}

// key identifies a span: trace id and span id.
func key(trace, id string) string { return trace + "/" + id }

// The JSON of a span (tracetest.SpanStub): the fields the check reads.
type (
	jsonSpanContext struct{ TraceID, SpanID string }
	jsonKeyValue    struct {
		Key   string
		Value struct{ Value any }
	}
	jsonSpan struct {
		Name        string
		SpanContext jsonSpanContext
		Parent      jsonSpanContext
		Attributes  []jsonKeyValue
		Links       []struct{ SpanContext jsonSpanContext }
		Resource    []jsonKeyValue
	}
)

func attrMap(kvs []jsonKeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = fmt.Sprint(kv.Value.Value)
	}
	return m
}

// readSpans reads every span file of dir, in the order each file holds them. A line that is not a
// span (the last line of a process killed while writing it) is counted in bad.
func readSpans(dir string) (spans []*span, bad int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+spansExt))
	if err != nil {
		return nil, 0, err
	}
	sort.Strings(files)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		for sc.Scan() {
			var js jsonSpan
			if json.Unmarshal(sc.Bytes(), &js) != nil || js.SpanContext.SpanID == "" {
				bad++
				continue
			}
			res := attrMap(js.Resource)
			s := &span{name: js.Name, trace: js.SpanContext.TraceID, id: js.SpanContext.SpanID, parent: js.Parent.SpanID,
				attrs: attrMap(js.Attributes), service: res["service.name"], file: filepath.Base(name),
				proc: res["process.command"] + ", pid " + res["process.pid"]}
			for _, l := range js.Links {
				s.links = append(s.links, key(l.SpanContext.TraceID, l.SpanContext.SpanID))
			}
			spans = append(spans, s)
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, 0, err
		}
	}
	return spans, bad, nil
}

// checkTrace reads the spans of the run's processes and checks that the notifier handled each credit
// made through the API in the trace of its request: the request's span (ledger serve) → the
// txinbox.publish span of its event → the relay's txinbox.relay span of the event (the context the
// event crossed the broker with) → the notifier's txinbox.handle span, with the notifier's
// txinbox.receive span of the event linked to the relay's. Every handler span of such an event must
// be in its request's trace, and at least one credit's chain must be whole; Report.TraceChain shows
// the first whole one.
func (r *run) checkTrace() {
	rep := r.rep
	spans, bad, err := readSpans(r.dir)
	if err != nil {
		rep.TraceProblem = err.Error()
		return
	}
	byKey := make(map[string]*span, len(spans))
	linkedFrom := map[string]*span{} // a relay span's key → a notifier receive span linked to it
	handles := map[string][]*span{}  // event id → the notifier's handler spans of its message
	for _, s := range spans {
		byKey[key(s.trace, s.id)] = s
		if s.service != "notifier" {
			continue
		}
		switch s.name {
		case receiveSpan:
			for _, l := range s.links {
				if linkedFrom[l] == nil {
					linkedFrom[l] = s
				}
			}
		case handleSpan:
			id := s.attrs["messaging.message.id"]
			handles[id] = append(handles[id], s)
		}
	}
	parentOf := func(s *span) *span { return byKey[key(s.trace, s.parent)] }
	for _, pub := range spans {
		req := parentOf(pub)
		if pub.name != publishSpan || req == nil || req.name != requestSpan {
			continue
		}
		rep.TracedRequests++
		event := pub.attrs["messaging.message.id"]
		hs := handles[event]
		if len(hs) == 0 {
			continue // the handler's span was lost with a killed notifier, or the event is not handled
		}
		inTrace := true
		for _, h := range hs {
			if h.trace != pub.trace {
				inTrace = false
				if rep.OtherTrace == 0 && rep.TraceProblem == "" {
					rep.TraceProblem = fmt.Sprintf("event %s was published in trace %s (%s %s) and handled in trace %s (%s)",
						event, pub.trace, req.name, req.proc, h.trace, h.proc)
				}
			}
		}
		if !inTrace {
			rep.OtherTrace++
			continue
		}
		rep.TracedHandled++
		if rep.TraceChain != "" {
			continue
		}
		h := hs[len(hs)-1] // the attempt that completed it
		relay := parentOf(h)
		if relay == nil || relay.name != relaySpan || parentOf(relay) != pub {
			continue // the relay's span was lost with a killed relay: look for a whole chain
		}
		recv := linkedFrom[key(relay.trace, relay.id)]
		if recv == nil {
			continue
		}
		rep.TraceChain = chain(h, []step{{req, ""}, {pub, ""}, {relay, ""}, {recv, "linked"}, {h, ""}})
	}
	switch {
	case rep.TraceProblem != "":
	case rep.TracedRequests == 0:
		rep.TraceProblem = fmt.Sprintf("no %s span with its %s span among the %d spans written (%d unreadable lines)", requestSpan, publishSpan, len(spans), bad)
	case rep.TracedHandled == 0:
		rep.TraceProblem = fmt.Sprintf("no handler span of the %d traced requests' events", rep.TracedRequests)
	case rep.TraceChain == "":
		rep.TraceProblem = "no credit's chain of spans is whole (request, publish, relay, linked receive, handle)"
	}
}

// step is a span of a chain, with a note ("linked": joined by a link, not as a child).
type step struct {
	s    *span
	note string
}

// chain describes a credit's spans, e.g. "trace 4bf92f35… (ordering key a-1): POST /v1/credits
// (ledger serve, pid 10) → txinbox.publish → txinbox.relay (ledger relay, pid 12) → ...": each
// span's process is named where it changes.
func chain(h *span, steps []step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s…", shortID(h.trace))
	if k := h.attrs["txinbox.ordering_key"]; k != "" {
		fmt.Fprintf(&b, " (ordering key %s)", k)
	}
	b.WriteString(": ")
	proc := ""
	for i, st := range steps {
		if i > 0 {
			b.WriteString(" → ")
		}
		b.WriteString(st.s.name)
		var notes []string
		if st.s.proc != proc {
			notes = append(notes, st.s.proc)
			proc = st.s.proc
		}
		if st.note != "" {
			notes = append(notes, st.note)
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
	}
	return b.String()
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
