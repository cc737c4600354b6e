package outbox

import "time"

// SetSnooze sets how long r's claims snooze events blocked behind their key (0: the default). Call it
// before r.Start. Tests set it to hours: an event left snoozed (OutboxReadyNext missed) then never
// goes and the test fails.
func SetSnooze(r *Relay, d time.Duration) { r.snooze = d }

// ListenerPID returns the backend pid of r's listening connection while it listens, else 0.
func ListenerPID(r *Relay) uint32 { return r.eng.ListenPID() }

// Notifications returns the number of notifications r received.
func Notifications(r *Relay) int64 { return r.eng.Notifications() }

// ClaimLockKey returns the key of r's claim lock (OutboxClaimLock).
func ClaimLockKey(r *Relay) int64 { return r.lockKey }

// Stopping reports whether r's Stop has been called (its runners claim no more).
func Stopping(r *Relay) bool { return r.eng.Stopped() }

// CheckTopicOf returns the relay's error of an event of topic for a Publisher that is tc (nil if
// tc accepts it).
func CheckTopicOf(tc TopicChecker, topic string) error { return checkTopic(tc, topic) }
