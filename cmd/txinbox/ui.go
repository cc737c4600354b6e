package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/console"
)

// uiPasswordEnv names the environment variable holding the console's basic-auth password.
const uiPasswordEnv = "TXINBOX_UI_PASSWORD"

var uiFlags struct {
	addr        string
	readOnly    bool
	user        string
	allowRemote bool
}

var uiCmd = &command{
	name:    "ui",
	summary: "serve the operator console (web pages) until interrupted",
	details: `
Serves the console of package console: the overview per consumer, message lookup, and dead letters
with replay and discard (each confirmed, with its count). It listens on --addr, loopback by default.

Authentication: set ` + uiPasswordEnv + ` to require HTTP basic authentication (user --user,
default txinbox); without it there is none. A non-loopback --addr without a password is refused
unless --allow-remote-without-password is given. Use --read-only for a console that changes nothing.
Behind TLS, terminate it in front of the console: basic authentication sends the password in clear.`,
	flags: func(fs *flag.FlagSet) {
		uiFlags.addr, uiFlags.readOnly, uiFlags.user, uiFlags.allowRemote = "127.0.0.1:8080", false, "txinbox", false
		fs.StringVar(&uiFlags.addr, "addr", uiFlags.addr, "address to listen on (host:port)")
		fs.BoolVar(&uiFlags.readOnly, "read-only", false, "offer no action and refuse every change")
		fs.StringVar(&uiFlags.user, "user", uiFlags.user, "basic-auth user name (with "+uiPasswordEnv+")")
		fs.BoolVar(&uiFlags.allowRemote, "allow-remote-without-password", false, "listen on a non-loopback address without "+uiPasswordEnv)
	},
	run: func(a *app, fs *flag.FlagSet, args []string) error {
		if len(args) > 0 {
			return usagef("ui", "unexpected arguments: %s", strings.Join(args, " "))
		}
		password := a.getenv(uiPasswordEnv)
		host, _, err := net.SplitHostPort(uiFlags.addr)
		if err != nil {
			return usagef("ui", "--addr %q: %v", uiFlags.addr, err)
		}
		if password == "" && !loopback(host) && !uiFlags.allowRemote {
			return usagef("ui", "--addr %s is not a loopback address: set %s (basic authentication), or pass --allow-remote-without-password", uiFlags.addr, uiPasswordEnv)
		}
		url, err := a.url("ui")
		if err != nil {
			return err
		}
		pcfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return usagef("ui", "invalid database URL: %v", err)
		}
		if pcfg.ConnConfig.ConnectTimeout == 0 {
			pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
		}
		pcfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(a.ctx, pcfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := pool.Ping(a.ctx); err != nil {
			return fmt.Errorf("cannot connect to the database: %w", err)
		}
		logger := slog.New(slog.NewTextHandler(a.stderr, nil))
		h, err := console.New(txinbox.Store{DB: pool, Schema: a.schema, Logger: logger}, console.Config{ReadOnly: uiFlags.readOnly})
		if err != nil {
			return err
		}
		if password != "" {
			h = basicAuth(h, uiFlags.user, password)
		}
		ln, err := net.Listen("tcp", uiFlags.addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		mode := ""
		if uiFlags.readOnly {
			mode = ", read-only"
		}
		auth := "no authentication"
		if password != "" {
			auth = "basic authentication as " + uiFlags.user
		}
		fmt.Fprintf(a.stdout, "txinbox console on http://%s/ (schema %s, %s%s); Ctrl-C to stop\n", ln.Addr(), a.schema, auth, mode)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		select {
		case err := <-done:
			return err
		case <-a.ctx.Done():
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	},
}

// loopback reports whether host (of --addr) only accepts local connections.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// basicAuth requires user and password (compared in constant time) on every request.
func basicAuth(next http.Handler, user, password string) http.Handler {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotU[:], wantU[:])&subtle.ConstantTimeCompare(gotP[:], wantP[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="txinbox console", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
