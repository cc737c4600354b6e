package console

// This is the only file of package console that uses package inbox: the mutations go through the
// inbox.Client administration methods (never a copy of their SQL), and New takes an inbox.DB. When
// those APIs move, only this file changes.

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"

	"github.com/txinbox/txinbox/inbox"
)

// maxAdminIDs is the most ids one administration call accepts.
const maxAdminIDs = inbox.MaxAdminIDs

// New returns the console for the txinbox tables in cfg.Schema, read through db (usually a
// *pgxpool.Pool; the console needs a few connections of it at most). It checks cfg (an
// *inbox.ConfigError says which field is wrong) and does not touch the database: a page whose tables
// are missing reports it when it is opened.
//
// The handler serves every page under its root ("/"): mount it with [http.StripPrefix] and set
// [Config.Prefix] to the same prefix. It does no authentication: put it behind the service's own.
func New(db inbox.DB, cfg Config) (http.Handler, error) {
	if db == nil {
		return nil, &inbox.ConfigError{Field: "db", Reason: "must not be nil"}
	}
	if cfg.Schema == "" {
		cfg.Schema = inbox.DefaultSchema
	}
	if err := inbox.ValidateSchema(cfg.Schema); err != nil {
		return nil, &inbox.ConfigError{Field: "Schema", Reason: err.Error()}
	}
	if err := cfg.check(); err != nil {
		return nil, &inbox.ConfigError{Field: err.field, Reason: err.reason}
	}
	c, err := inbox.NewClient(db, inbox.Config{Schema: cfg.Schema})
	if err != nil {
		return nil, err
	}
	return newHandler(db, cfg, clientAdmin{c: c})
}

// clientAdmin is the admin backend over an inbox.Client.
type clientAdmin struct{ c *inbox.Client }

func (a clientAdmin) message(ctx context.Context, id int64) (messageView, error) {
	m, err := a.c.GetMessage(ctx, id)
	if errors.Is(err, inbox.ErrNotFound) {
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
	return a.c.ReplayDead(ctx, ids...)
}

func (a clientAdmin) discardDead(ctx context.Context, ids []int64) ([]int64, error) {
	return a.c.DiscardDead(ctx, ids...)
}

func (a clientAdmin) discardPending(ctx context.Context, consumer string, ids []int64) (discarded, claimed []int64, err error) {
	d, err := a.c.DiscardPending(ctx, inbox.PendingFilter{Consumer: consumer, IDs: ids}, false)
	return d.Discarded, d.Claimed, err
}

// badArgument reports whether err is an invalid argument of an administration call.
func badArgument(err error) bool { return errors.Is(err, inbox.ErrInvalidArgument) }
