package console

import (
	"encoding/hex"
	"net/http"
	"sort"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
)

// maxAdminIDs is the most ids one administration call accepts.
const maxAdminIDs = limits.AdminIDs

// New returns the console for the txinbox tables of store (its DB, usually a *pgxpool.Pool, needs a
// few connections at most; its Schema says where the tables are). It checks store and cfg (a
// *[txinbox.ConfigError] says which field is wrong) and does not touch the database: a page whose
// tables are missing reports it when it is opened. store.Logger receives the actions taken (Info:
// what, how many, from which address) and the errors of pages (Error).
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
	return newHandler(store, cfg, a)
}

// newMessageView is m ready to display.
func newMessageView(m inbox.StoredMessage) messageView {
	v := messageView{
		ID: m.ID, Consumer: m.Consumer, Key: m.Key, Kind: m.Kind, State: string(m.State),
		OrderingKey: m.OrderingKey, AttemptsStarted: m.AttemptsStarted, AttemptsFailed: m.AttemptsFailed,
		Owner: m.Owner, Token: m.Token, LastError: m.LastError, Fingerprint: m.Fingerprint.String(),
		NextRunAt: m.NextRunAt, LeaseUntil: m.LeaseUntil, ReceivedAt: m.ReceivedAt, StartedAt: m.StartedAt,
		CompletedAt: m.CompletedAt, ExpiresAt: m.ExpiresAt,
		Payload: prettyJSON(m.Payload), Result: prettyJSON(m.Result), Undecodable: m.Raw != nil, History: m.History,
	}
	v.UpstreamEventID, v.UpstreamSource = admin.Upstream(m)
	if m.Raw != nil {
		v.Raw = hex.Dump(m.Raw)
	}
	for k, val := range m.Headers {
		v.Headers = append(v.Headers, header{Name: k, Value: val})
	}
	sort.Slice(v.Headers, func(i, j int) bool { return v.Headers[i].Name < v.Headers[j].Name })
	return v
}
