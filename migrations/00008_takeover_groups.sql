-- txinbox schema, version 8: messages whose claim never finished are taken over in groups.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- A claim whose lease ended without a finish (its worker died, hung or lost its connection) leaves
-- its messages claimed: they are suspects, and one of them may be what killed the worker. Until this
-- version the rescuer ran suspects one at a time, each alone. From this version on it takes them over
-- in groups, and halves the group of any message whose group did not finish again, down to one
-- message alone (package worker, Pool):
--
--   inbox_queue.group_size     how many messages the message's current claim runs together (a
--                              claim's batch, or a takeover's group); a takeover runs it in a group
--                              of at most half of that. 0: claimed before this version (taken over
--                              in a group of the pool's claim size).
--   inbox_queue.group_crashes  claims of more than one message that never finished while holding
--                              the message; only the first of them counts towards MaxAttempts.
--   inbox_queue.group_lead     the message is the lowest id of its claim: takeovers count the
--                              claims they find unfinished by these (one per claim).
--
-- The columns are not indexed, so that claims and finishes stay HOT updates (00007). Adding them
-- rewrites nothing (constant defaults). Messages in flight keep running either way: going down,
-- their groups are forgotten and the rescuer of version 7 runs them alone.

-- +goose Up
ALTER TABLE inbox_queue
    ADD COLUMN group_size    integer NOT NULL DEFAULT 0,
    ADD COLUMN group_crashes integer NOT NULL DEFAULT 0,
    ADD COLUMN group_lead    boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN inbox_queue.group_size IS 'messages the current claim runs together; a takeover halves it (0: unknown)';
COMMENT ON COLUMN inbox_queue.group_crashes IS 'unfinished claims of more than one message that held this one; only the first counts as an attempt';
COMMENT ON COLUMN inbox_queue.group_lead IS 'lowest id of its claim: one per claim, for counting unfinished claims';

-- +goose Down
ALTER TABLE inbox_queue
    DROP COLUMN group_lead,
    DROP COLUMN group_crashes,
    DROP COLUMN group_size;
