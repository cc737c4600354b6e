package maintain

import "time"

// SetRetentionEvery sets the period of the jobs rotate, expire-keys and outbox-rotate of a
// maintainer of c (0: derived from Generation; negative: none of them runs).
func SetRetentionEvery(c *Config, d time.Duration) { c.tune.retentionEvery = d }

// SetQueueVacuumThreshold sets the dead rows of inbox_queue above which a maintainer of c vacuums it
// (0: 50,000; negative: no vacuum nor statistics safety net).
func SetQueueVacuumThreshold(c *Config, n int) { c.tune.queueVacuumThreshold = n }

// SetHealthCheckInterval sets the period of a maintainer of c's health check (0: a minute;
// negative: no check).
func SetHealthCheckInterval(c *Config, d time.Duration) { c.tune.healthCheckEvery = d }

// RetentionEveryOf returns the period of m's retention jobs.
func RetentionEveryOf(m *Maintainer) time.Duration { return m.cfg.tune.retentionEvery }

// OutboxGenerationOf returns the generation of m's outbox rotation (0: m does not rotate the outbox).
func OutboxGenerationOf(m *Maintainer) time.Duration {
	if m.outbox == nil {
		return 0
	}
	return m.outbox.Generation
}
