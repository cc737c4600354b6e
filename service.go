package txinbox

import "context"

// Service is the one start/stop shape of txinbox's background jobs (runner.Runner, worker.Pool,
// outbox.Relay, maintain.Maintainer, the broker adapters' consumers).
//
// Start returns once the job runs (or with the error that kept it from starting); the job then runs
// in goroutines of its own until Stop, or until Start's ctx ends, which stops it as a Stop whose ctx
// has already ended would (so pass a ctx that outlives a SIGTERM to let work in flight finish). Stop
// ends the job and waits until it has ended or its ctx ends, whichever comes first; in the second case
// it returns an error wrapping ctx's. Calling Stop more than once is safe.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}
