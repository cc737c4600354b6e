package console

// This is the only file of package console that uses package admin: the mutations go through the
// admin.Admin methods (never a copy of their SQL). When those APIs move, only this file changes.

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
)

// maxAdminIDs is the most ids one administration call accepts.
const maxAdminIDs = admin.MaxAdminIDs

// New returns the console for the txinbox tables of store (its DB, usually a *pgxpool.Pool, needs a
// few connections at most; its Schema says where the tables are). It checks store and cfg (a
// *[txinbox.ConfigError] says which field is wrong) and does not touch the database: a page whose
// tables are missing reports it when it is opened.
//
// The handler serves every page under its root ("/"): mount it with [http.StripPrefix] and set
// [Config.Prefix] to the same prefix. It does no authentication: put it behind the service's own.
func New(store txinbox.Store, cfg Config) (http.Handler, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, &txinbox.ConfigError{Field: err.field, Reason: err.reason}
	}
	a, err := admin.New(store, admin.Config{})
	if err != nil {
		return nil, err
	}
	return newHandler(store.DB, store.Schema, cfg, clientAdmin{a: a})
}

// clientAdmin is the console's actions over an admin.Admin.
type clientAdmin struct{ a *admin.Admin }

func (a clientAdmin) message(ctx context.Context, id int64) (messageView, error) {
	m, err := a.a.GetMessage(ctx, id)
	if errors.Is(err, admin.ErrNotFound) {
		return messageView{}, errNotFound
	}
	if err != nil {
		return messageView{}, err
	}
	v := messageView{
		ID: m.ID, Consumer: m.Consumer, Key: m.Key, Kind: m.Kind, State: string(m.State),
		OrderingKey: m.OrderingKey, AttemptsStarted: m.AttemptsStarted, AttemptsFailed: m.AttemptsFailed,
		Owner: m.Owner, Token: m.Token, LastError: m.LastError, Fingerprint: m.Fingerprint.String(),
		NextRunAt: m.NextRunAt, LeaseUntil: m.LeaseUntil, ReceivedAt: m.ReceivedAt, StartedAt: m.StartedAt,
		CompletedAt: m.CompletedAt, ExpiresAt: m.ExpiresAt,
		Payload: prettyJSON(m.Payload), Result: prettyJSON(m.Result), Undecodable: m.Raw != nil,
	}
	if m.Raw != nil {
		v.Raw = hex.Dump(m.Raw)
	}
	for k, val := range m.Headers {
		v.Headers = append(v.Headers, header{Name: k, Value: val})
	}
	sort.Slice(v.Headers, func(i, j int) bool { return v.Headers[i].Name < v.Headers[j].Name })
	return v, nil
}

func (a clientAdmin) replayDead(ctx context.Context, ids []int64) ([]int64, error) {
	return a.a.ReplayDead(ctx, ids...)
}

func (a clientAdmin) discardDead(ctx context.Context, ids []int64) ([]int64, error) {
	return a.a.DiscardDead(ctx, ids...)
}

func (a clientAdmin) discardPending(ctx context.Context, consumer string, ids []int64) (discarded, claimed []int64, err error) {
	d, err := a.a.DiscardPending(ctx, admin.PendingFilter{Consumer: consumer, IDs: ids}, false)
	return d.Discarded, d.Claimed, err
}

// badArgument reports whether err is an invalid argument of an administration call.
func badArgument(err error) bool { return errors.Is(err, txinbox.ErrInvalidArgument) }
