// Package admin runs operator actions on stored messages: an [Admin] (made by [New] from the same
// [txinbox.Store] as the other components) reads a message ([Admin.GetMessage]), lists, replays and
// discards dead letters ([Admin.ListDead], [Admin.ReplayDead], [Admin.DiscardDead]), discards pending
// messages ([Admin.DiscardPending]) and finished ones by age ([Admin.DiscardOlder]), counts them
// per consumer ([Admin.Stats]), and reads the dead row versions of the txinbox tables and what holds
// back PostgreSQL's xmin horizon ([Admin.Health]).
//
// Discard is an operator deleting chosen messages; the automatic deletion of expired records is
// package retention's job (Clean). The txinbox command runs these actions from a shell.
package admin
