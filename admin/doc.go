// Package admin answers operators' questions about stored messages and runs their actions; the
// operator console (package console) and the txinbox command present what it returns, so both give
// the same answer to the same question. An [Admin] (made by [New] from the same [txinbox.Store] as
// the other components):
//
//   - reads a message by id or by consumer and key ([Admin.GetMessage], [Admin.FindMessage]), and
//     names the event it was delivered as, from its CloudEvents headers ([Upstream]);
//   - lists dead letters newest first, the inbox's dead messages or the outbox's dead events ([View]),
//     with one rule for every filter (the error text matches as a substring in any case) and a cursor
//     for the next page ([Admin.ListDead], [DeadFilter], [txinbox.DeadLetter]), counts them
//     ([Admin.CountDead]) and lists their ids ([Admin.DeadIDs], [Admin.DeadAmong]), replays and
//     discards them ([Admin.ReplayDead], [Admin.DiscardDead]);
//   - lists the work still queued, the inbox's messages by consumer or the outbox's events by topic
//     ([View]), pending, retrying or processing, newest first with a cursor ([Admin.ListInFlight],
//     [InFlightFilter], [InFlight]); a message's or event's lookup returns its last 10 failed attempts
//     ([txinbox.Attempt]: recorded by the failures only, so the success path writes nothing more);
//   - discards pending messages ([Admin.DiscardPending], [Admin.CountUnclaimed],
//     [Admin.UnclaimedIDs]) and finished ones by age ([Admin.DiscardOlder], with
//     [Config.Progress]);
//   - counts messages per consumer: every state from one scan of the inbox table ([Admin.Stats]), or
//     the queue, the dead letters and the last minutes' attempts without it ([Admin.Overview]);
//   - reads the dead row versions of the txinbox tables and what holds back PostgreSQL's xmin horizon
//     ([Admin.Health]);
//   - answers the same questions about the transactional outbox (package outbox): its events per
//     topic and state with the lag ([Admin.OutboxStats]), one event by id or by event id, the UUID
//     a consumer sees ([Admin.GetOutboxEvent], [Admin.FindOutboxEvent], [Admin.OutboxIDs]); its
//     dead events are the dead letters of the View [Outbox].
//
// Discard is an operator deleting chosen messages; the automatic deletion of expired records is
// the schema's maintainer's job (package maintain, with package retention's code).
//
// The replay and discard actions have one shape: the context, then what to act on, then the result
// and an error. By ids: (ctx, view, ids ...int64) ([]int64, error), the ids acted on, in order
// ([Admin.ReplayDead], [Admin.DiscardDead]).
// By filter: (ctx, a filter struct holding every option, dry run included) (a result struct whose
// Discarded field says what was deleted, error) ([Admin.DiscardPending] with [PendingFilter] and
// [PendingDiscard], [Admin.DiscardOlder] with [OlderFilter] and [OlderDiscard]); on an error the
// result still says what was done before it.
package admin
