package txinbox_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/seen"
	"github.com/txinbox/txinbox/worker"
)

// nilImpl implements, with pointer methods, the interfaces of the configurations' fields that have
// no nil-able implementation at hand: (*nilImpl)(nil) is the typed nil given for them.
type nilImpl struct{}

func (*nilImpl) Delay(int) time.Duration                       { return 0 }
func (*nilImpl) Publish(context.Context, []outbox.Event) error { return nil }
func (*nilImpl) Inject(context.Context, map[string]string)     {}
func (*nilImpl) CheckTopic(string) error                       { return nil }
func (*nilImpl) Begin(context.Context) (pgx.Tx, error)         { return nil, nil }
func (*nilImpl) TraceStart(ctx context.Context, _ txinbox.TraceStart) context.Context {
	return ctx
}
func (*nilImpl) TraceEnd(context.Context, txinbox.TraceEnd) {}

// typedNil returns a nil pointer (or func) held in an interface of type t, or fails the test: a new
// interface field needs an implementation here.
func typedNil(t *testing.T, it reflect.Type) reflect.Value {
	t.Helper()
	for _, v := range []any{(*nilImpl)(nil), (*pgxpool.Pool)(nil), (*seen.LRU)(nil)} {
		if reflect.TypeOf(v).Implements(it) {
			return reflect.ValueOf(v)
		}
	}
	t.Fatalf("no typed nil implements %v: give nilImpl its methods", it)
	return reflect.Value{}
}

// Every constructor refuses a configuration whose interface field holds a typed nil (a nil pointer
// or func in a non-nil interface: (*natsjs.Publisher)(nil) as the relay's Publisher, say), with a
// *txinbox.ConfigError naming the field, instead of accepting it and failing when a method is called
// on it (a panic in a runner, or a Publisher that never publishes). The fields are enumerated from
// the configuration types: every interface-typed field of each, present and future.
func TestConstructorsRefuseTypedNilFields(t *testing.T) {
	t.Parallel()
	db, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable") // never connects
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	store := txinbox.Store{DB: db, Schema: "typed_nil"}
	handlers := func() *worker.Handlers {
		hs := worker.NewHandlers()
		worker.Handle(hs, "k", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
		return hs
	}
	total := 0 // interface fields enumerated
	publisher := outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })
	for _, tc := range []struct {
		name   string
		cfg    any    // a valid configuration
		prefix string // of the ConfigError's Field
		make   func(cfg any) error
	}{
		{"txinbox.Store (inbox.New)", store, "Store.", func(c any) error {
			_, err := inbox.New(c.(txinbox.Store), inbox.Config{})
			return err
		}},
		{"worker.Config", worker.Config{Consumer: "c", Handlers: handlers()}, "", func(c any) error {
			c2 := c.(worker.Config)
			c2.Handlers = handlers() // a registry is given to one pool
			_, err := worker.New(store, c2)
			return err
		}},
		{"outbox.RelayConfig", outbox.RelayConfig{Publisher: publisher}, "", func(c any) error {
			_, err := outbox.NewRelay(store, c.(outbox.RelayConfig))
			return err
		}},
		{"outbox.Config", outbox.Config{}, "", func(c any) error {
			_, err := outbox.New(store, c.(outbox.Config))
			return err
		}},
		{"inbox.Config", inbox.Config{}, "", func(c any) error {
			_, err := inbox.New(store, c.(inbox.Config))
			return err
		}},
		{"maintain.Config", maintain.Config{}, "", func(c any) error {
			_, err := maintain.New(store, c.(maintain.Config))
			return err
		}},
		{"runner: Relays", outbox.RelayConfig{Publisher: publisher}, "Relays[0].", func(c any) error {
			_, err := runner.New(store, runner.Config{Relays: []outbox.RelayConfig{c.(outbox.RelayConfig)}})
			return err
		}},
		{"runner: Pools", worker.Config{Consumer: "c"}, "Pools[0].", func(c any) error {
			c2 := c.(worker.Config)
			c2.Handlers = handlers()
			_, err := runner.New(store, runner.Config{Pools: []worker.Config{c2}})
			return err
		}},
	} {
		if err := tc.make(tc.cfg); err != nil {
			t.Fatalf("%s: the valid configuration is refused: %v", tc.name, err)
		}
		typ := reflect.TypeOf(tc.cfg)
		fields := 0
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || f.Type.Kind() != reflect.Interface {
				continue
			}
			fields++
			cfg := reflect.New(typ).Elem()
			cfg.Set(reflect.ValueOf(tc.cfg))
			tn := typedNil(t, f.Type)
			cfg.Field(i).Set(tn)
			err := tc.make(cfg.Interface())
			var ce *txinbox.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.prefix+f.Name || !errors.Is(err, txinbox.ErrInvalidConfig) ||
				!strings.Contains(ce.Reason, fmt.Sprintf("nil %v", tn.Type())) {
				t.Errorf("%s: %s = (%v)(nil): err = %v; want a *txinbox.ConfigError on %s%s naming the nil %v",
					tc.name, f.Name, tn.Type(), err, tc.prefix, f.Name, tn.Type())
			}
		}
		total += fields
	}
	if total == 0 {
		t.Error("no configuration has an interface field: the enumeration is broken")
	}
}

// Handler registration refuses a HandlerConfig whose interface field holds a typed nil (a nil
// txinbox.BackoffFunc as Backoff, say): it panics, naming the field, as it does for every
// programming error. A nil handler func is refused alike (a func parameter cannot hold a typed nil).
func TestHandlerRegistrationRefusesTypedNil(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[worker.HandlerConfig]()
	fields := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() || f.Type.Kind() != reflect.Interface {
			continue
		}
		fields++
		cfg := reflect.New(typ).Elem()
		cfg.Field(i).Set(typedNil(t, f.Type))
		hc := cfg.Interface().(worker.HandlerConfig)
		for name, register := range map[string]func(){
			"Handle": func() {
				worker.Handle(worker.NewHandlers(), "k", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil }, hc)
			},
			"HandleBatch": func() {
				worker.HandleBatch(worker.NewHandlers(), "k", func(context.Context, pgx.Tx, []*worker.Message[struct{}]) error { return nil }, hc)
			},
			"Handle, nil func": func() { worker.Handle[struct{}](worker.NewHandlers(), "k", nil) },
		} {
			got := func() (v any) {
				defer func() { v = recover() }()
				register()
				return nil
			}()
			want := "HandlerConfig." + f.Name
			if name == "Handle, nil func" {
				want = "nil handler func"
			}
			if s, _ := got.(string); !strings.Contains(s, want) {
				t.Errorf("%s with HandlerConfig.%s a typed nil: panic %v, want one naming %s", name, f.Name, got, want)
			}
		}
	}
	if fields == 0 {
		t.Error("HandlerConfig has no interface field: the enumeration is broken")
	}
}
