package adaptertest

import (
	"context"
	"testing"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
)

// RefusedCommit is the text of the error that a transaction refused by [RefuseCommits] fails with at
// COMMIT.
const RefusedCommit = "txinbox test: commit refused"

// RefuseCommits makes every transaction that inserts a message into db's inbox fail at its COMMIT,
// until the returned function is called. A DEFERRABLE INITIALLY DEFERRED constraint trigger on the
// inbox table raises [RefusedCommit] when the transaction commits: every statement of the transaction
// succeeded, and only COMMIT itself fails (the transaction then rolls back, as when PostgreSQL finds
// a deferred constraint violated or a serialization failure at commit). The returned function lifts the
// refusal: commits that begin after it returned succeed.
func RefuseCommits(t testing.TB, db *testdb.DB) (allow func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, db.SQL(`
		CREATE TABLE {schema}.refuse_commit (refuse boolean NOT NULL);
		INSERT INTO {schema}.refuse_commit VALUES (true);
		CREATE FUNCTION {schema}.refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT FROM {schema}.refuse_commit WHERE refuse) THEN
				RAISE EXCEPTION '`+RefusedCommit+` (message %)', NEW.key;
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON {schema}.inbox
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_commit();`)); err != nil {
		t.Fatalf("adaptertest: refuse commits: %v", err)
	}
	return func() {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, db.SQL(`UPDATE {schema}.refuse_commit SET refuse = false`)); err != nil {
			t.Fatalf("adaptertest: allow commits: %v", err)
		}
	}
}

// Consumer is what [CommitFailure] uses of a broker adapter's consumer (rabbitmq.Consumer,
// natsjs.Consumer, kafka.Consumer).
type Consumer interface {
	Stats() adapters.Stats
	Stop(ctx context.Context) error
}

// Harness is what an adapter's test gives [CommitFailure]: a source of its own on a real broker (a
// queue, a stream with a durable consumer, a topic with a consumer group) and consumers of it.
type Harness struct {
	// Publish sends msgs to the source and returns once the broker stored them, each with kind
	// "credit", its Payload as body and its Key where the adapter's default key strategy reads it
	// (the message id, or the x-idempotency-key header), in the order of msgs, which the broker keeps
	// (one queue, one stream, one partition).
	Publish func(msgs []Msg)
	// Start starts a new consumer of the source that stores into sink (its Key left to the adapter's
	// default) with short retry delays and batches of batchSize (0: the adapter's default, its
	// prefetch left to its default), and returns it; the test stops it.
	Start func(sink adapters.SinkConfig, batchSize int) Consumer
	// Unacked returns how many of the published messages the broker holds unacknowledged, to be
	// delivered again, while no consumer runs. CommitFailure polls it until it is what it must be (a
	// broker may settle after Stop returned: RabbitMQ requeues when the channel closes, JetStream
	// acknowledgements are asynchronous).
	Unacked func() int
}

// CommitFailure is the check every broker adapter's tests run (a test of the adapters module fails
// for an adapter package that has none): an adapter acknowledges only what is stored. While every
// commit of its store transaction fails ([RefuseCommits]), a consumer must acknowledge nothing and
// store nothing, and the broker must still hold every message once the consumer stopped; once commits
// succeed again, a new consumer gets the messages again (they were not acknowledged) and stores each
// exactly once.
func CommitFailure(t *testing.T, db *testdb.DB, h Harness) {
	t.Helper()
	ctx := context.Background()
	unique, _ := Plan("commit", 20, 0)
	h.Publish(unique)
	allow := RefuseCommits(t, db)
	sink := adapters.SinkConfig{Store: db.Store(), Consumer: "ledger"}

	c := h.Start(sink, 0)
	WaitFor(t, "failed stores or an acknowledgement", func() bool {
		st := c.Stats()
		return st.Failures >= 3 || st.Acked > 0
	})
	st := c.Stats()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop while commits fail: %v", err)
	}
	if st.Acked != 0 || st.Batches != 0 {
		t.Fatalf("every commit failed, yet %d messages were acknowledged in %d batches (stats %+v)", st.Acked, st.Batches, st)
	}
	if n := InboxCount(t, db, "ledger"); n != 0 {
		t.Fatalf("every commit failed, yet the inbox holds %d messages", n)
	}
	WaitFor(t, "the broker to hold every message unacknowledged after the failed commits", func() bool {
		return h.Unacked() == len(unique)
	})

	allow()
	c2 := h.Start(sink, 0)
	WaitFor(t, "every message acknowledged once commits succeed", func() bool { return c2.Stats().Acked >= int64(len(unique)) })
	if err := c2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) || st.Failures != 0 {
		t.Errorf("stats %+v after commits succeed again: want %d inserted and acknowledged, no failure", st, len(unique))
	}
	WaitFor(t, "the broker to count every message acknowledged", func() bool { return h.Unacked() == 0 })
	CheckUnique(t, db, "ledger", unique)
}
