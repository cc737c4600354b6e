package txinbox

import "context"

// Service is the one start/stop shape of txinbox's background jobs (worker.Pool, retention.Cleaner,
// the broker adapters' consumers).
//
// Start returns once the job runs (or with the error that kept it from starting); the job then runs
// in goroutines of its own, independent of Start's ctx, until Stop. Stop ends the job and waits until
// it has ended or ctx ends, whichever comes first; it returns ctx's error (possibly wrapped) in the
// second case. Calling Stop more than once is safe: each call returns the first call's result.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}
