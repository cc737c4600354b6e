package adaptertest

import (
	"context"
	"testing"
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
func RefuseCommits(t testing.TB, db *DB) (allow func()) {
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
