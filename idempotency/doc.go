// Package idempotency is an HTTP middleware implementing the Idempotency-Key header (IETF httpapi
// draft "The Idempotency-Key HTTP Header Field") on PostgreSQL, with the handler's database writes
// and the stored response committed in one transaction.
//
// # Use
//
//	store := txinbox.Store{DB: pool} // the same Store as the other components
//	mw, err := idempotency.New(store, idempotency.Config{
//		Principal: idempotency.HeaderPrincipal("Authorization"), // or your own user/tenant id
//	})
//	mux.Handle("POST /transfers", mw.Handler(http.HandlerFunc(createTransfer)))
//
//	func createTransfer(w http.ResponseWriter, r *http.Request) {
//		tx, ok := idempotency.Tx(r.Context()) // do every write of the request in tx
//		if !ok {
//			// not under the middleware: no transaction to write in
//			http.Error(w, "no idempotency transaction", http.StatusInternalServerError)
//			return
//		}
//		...
//	}
//
// The table is created by migration 00002 (migrate.Up, or goose with the files of package
// migrations). Expired keys are deleted by the schema's maintainer (package maintain), which every
// runner.Runner runs; where no runner runs, run maintain.New yourself (or call
// retention.DeleteExpiredKeys).
//
// # The key
//
// The client sends a unique key per logical request and the same key on every retry of it:
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// The value is a Structured Field String (RFC 9651), as the draft specifies; a bare unquoted key
// (Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324) is also accepted and means the same key
// (see ParseKey). Keys are 1 to 255 printable ASCII characters; UUIDs are recommended. A key is
// scoped by the caller (Config.Principal), the method and the route (Config.Route): two callers, or
// two endpoints, never see each other's keys. The middleware applies to POST and PATCH by default
// (Config.Methods); other methods pass through.
//
// Each key is stored with a fingerprint of its request (by default the SHA-256 of the method, the
// path and query, and the body; Config.Fingerprint). A retry must send the same request.
//
// # What happens to a request
//
//  1. The key is looked up. If it is new (or expired, or left in flight by a process that died and
//     whose lease has ended), it is inserted as in_flight in a short transaction of its own, which
//     commits at once: from then on every concurrent retry sees it.
//  2. A transaction is opened and locks the key row; the handler runs with that transaction
//     (Tx(r.Context())) and a ResponseWriter that buffers the response.
//  3. If the response is to be stored (Config.StoreStatus: by default every status below 500), it
//     is written into the key row in the same transaction, which then commits: the business writes
//     and the stored response become durable together, or not at all. Only then is the response
//     sent.
//  4. Otherwise (a 5xx by default, a panic, a response too large to store, a failed commit) the
//     transaction is rolled back and the key row deleted: nothing was applied, and a retry runs the
//     handler again.
//
// # Guarantees
//
// For writes made in the transaction of Tx, a key's request is applied at most once, and a stored
// response always describes exactly what was committed. This is stronger than middlewares that
// cache the response after the handler has committed on its own: there, a crash between the two
// commits leaves writes applied without a stored response, and the retry applies them again. Here
// there is no window: a process that dies at any point leaves either both or neither.
//
// The handler runs at most once at a time per key: the in_flight row is committed before the
// handler starts, and the running request holds it locked until its transaction ends, so a retry
// can neither run concurrently nor take the key over, however long the handler takes. Effects
// outside the database (calls to other services, e-mails) are not covered by the transaction: a
// failed attempt (5xx, crash) is run again in full by the retry, so make them idempotent too
// (forward the key), or enqueue them in the same transaction (a transactional outbox, or
// inbox.Client.ReceiveTx).
//
// The in_flight row has a lease (Config.Lease, default 1 minute). It only matters when a request
// could not delete its row: the process died, or the database was unreachable when it tried. Until
// the lease ends, retries get 409; after it, the first retry takes the key over, with a new fencing
// token, so the dead request could not complete it even if it came back. A running handler keeps
// its row locked, and a locked row is never taken over. A request that dies abruptly releases its
// lock when PostgreSQL notices the closed connection; to bound the case of a client machine that
// vanishes without closing it, set idle_in_transaction_session_timeout and TCP keepalives on the
// server.
//
// # Status codes
//
//	Status  Problem type              When
//	(any)   -                         first request: the handler's own response
//	(same)  -                         retry after completion: the stored status, stored headers
//	                                  (Config.StoredHeaders) and body, plus Idempotent-Replayed: true
//	400     ProblemKeyMissing         no Idempotency-Key header (unless Config.KeyOptional)
//	400     ProblemKeyInvalid         malformed key, several keys, empty or longer than 255
//	400     ProblemRequestInvalid     request body unreadable, Config.Fingerprint failed, or a route
//	                                  that cannot be stored (%00 or invalid UTF-8 in the path)
//	401     ProblemUnauthenticated    Config.Principal returned an error or an empty principal
//	409     ProblemKeyInFlight        the key's first request is still running (Retry-After)
//	413     ProblemRequestTooLarge    request body over Config.MaxRequestBytes (default 1 MiB)
//	422     ProblemKeyReused          the key was used for a different request (fingerprint)
//	500     ProblemResponseTooLarge   response body over Config.MaxResponseBytes (default 1 MiB):
//	                                  rolled back, key released, nothing applied
//	500     ProblemStoreFailed        the database rejected the transaction (left aborted by the
//	                                  handler): rolled back, key released, nothing applied
//	500     ProblemNotMigrated        the schema has no idempotency_keys table (run migrate.Up or
//	                                  "txinbox migrate up"); the handler does not run, FailOpen or not
//	503     ProblemStoreUnavailable   the store could not be reached (Retry-After); with
//	                                  Config.FailOpen the request runs unprotected instead
//
// Every error is an RFC 9457 problem document (Content-Type: application/problem+json) with type,
// title, status and detail. Replays carry Idempotent-Replayed: true; first responses and problems
// never do.
//
// # Expiry
//
// A key expires Config.Expiry (default 24 hours) after its request was accepted. Expiry is checked
// on every read against the database clock: an expired key is treated as absent, so a new request
// with it runs (whatever its fingerprint), and a retry after expiry is not deduplicated. The
// maintainer's deletion of expired keys only reclaims space; when it runs never changes behaviour.
//
// # Limits
//
// The response is buffered in memory (up to Config.MaxResponseBytes) and sent after the commit, so
// streaming (http.Flusher), Hijack, 1xx informational responses and trailers are not supported
// through the middleware. Each running request holds one connection of the pool, in a transaction,
// for the whole handler: size the pool for the concurrent protected requests, and keep handlers
// short.
//
// # Example session
//
// With the handler of the example (a transfer created in the middleware's transaction):
//
//	$ curl -i -X POST localhost:8080/transfers -H 'Authorization: Bearer alice' \
//	       -H 'Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"' -d '{"amount":42}'
//	HTTP/1.1 201 Created
//	Content-Length: 21
//	Content-Type: application/json
//	Location: /transfers/1
//
//	{"id":1,"amount":42}
//
//	$ # the same request again (a retry): the stored response, not a second transfer
//	$ curl -i -X POST localhost:8080/transfers -H 'Authorization: Bearer alice' \
//	       -H 'Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"' -d '{"amount":42}'
//	HTTP/1.1 201 Created
//	Content-Length: 21
//	Content-Type: application/json
//	Idempotent-Replayed: true
//	Location: /transfers/1
//
//	{"id":1,"amount":42}
//
//	$ # the same key with another body
//	$ curl -i -X POST localhost:8080/transfers -H 'Authorization: Bearer alice' \
//	       -H 'Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"' -d '{"amount":43}'
//	HTTP/1.1 422 Unprocessable Entity
//	Cache-Control: no-store
//	Content-Type: application/problem+json
//
//	{"type":"https://pkg.go.dev/github.com/txinbox/txinbox/idempotency#ProblemKeyReused",
//	 "title":"Idempotency-Key reused with a different request","status":422,
//	 "detail":"This Idempotency-Key was already used for a different request (method, target or body). Use a new key for a new request."}
//
//	$ # no key
//	$ curl -i -X POST localhost:8080/transfers -H 'Authorization: Bearer alice' -d '{"amount":42}'
//	HTTP/1.1 400 Bad Request
//	Cache-Control: no-store
//	Content-Type: application/problem+json
//
//	{"type":"https://pkg.go.dev/github.com/txinbox/txinbox/idempotency#ProblemKeyMissing",
//	 "title":"Idempotency-Key header required","status":400,
//	 "detail":"This endpoint requires an Idempotency-Key header, for example: Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\"."}
//
// A retry sent while the first request is still running gets 409 with Retry-After: 1 and type
// ProblemKeyInFlight. (Date headers and line breaks in the problem documents are edited out above.)
package idempotency
