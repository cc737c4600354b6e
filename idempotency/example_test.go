package idempotency_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// A transfer endpoint: the transfer row and the stored response commit together, and a retry with
// the same key gets the stored response instead of a second transfer.
func Example() {
	ctx := context.Background()
	pool, schema, cleanup := exampleDB(ctx)
	defer cleanup()

	mw, err := idempotency.New(txinbox.Store{DB: pool, Schema: schema}, idempotency.Config{
		Principal: idempotency.HeaderPrincipal("Authorization"), // keys are scoped by caller
	})
	if err != nil {
		panic(err)
	}
	transfers := pgx.Identifier{schema, "transfers"}.Sanitize()
	createTransfer := func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idempotency.Tx(r.Context()) // the middleware's transaction
		if !ok {
			// not under the middleware (a route registered without mw.Handler)
			http.Error(w, "no idempotency transaction", http.StatusInternalServerError)
			return
		}
		var id int64
		err := tx.QueryRow(r.Context(), "INSERT INTO "+transfers+" (amount) VALUES (42) RETURNING id").Scan(&id)
		if err != nil {
			http.Error(w, "could not create the transfer", http.StatusInternalServerError) // 5xx: rolled back, not stored
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/transfers/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /transfers", mw.Handler(http.HandlerFunc(createTransfer)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.Header.Get("Content-Type") == "application/problem+json" {
			b = []byte("(problem document)")
		}
		line := fmt.Sprint(res.StatusCode, " ", string(b))
		if res.Header.Get("Idempotent-Replayed") == "true" {
			line += " (replayed)"
		}
		fmt.Println(line)
	}
	key := idempotency.FormatKey("8e03978e-40d5-43e8-bc93-6894a57f9324")
	send(key, `{"amount":42}`) // applied
	send(key, `{"amount":42}`) // a retry: replayed
	send(key, `{"amount":43}`) // another request with the same key: 422
	send("", `{"amount":42}`)  // no key: 400

	var n int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM "+transfers).Scan(&n)
	fmt.Println("transfers:", n)
	// Output:
	// 201 {"id":1}
	// 201 {"id":1} (replayed)
	// 422 (problem document)
	// 400 (problem document)
	// transfers: 1
}

// exampleDB creates a migrated schema with a transfers table on the test server, and returns a
// function that drops it.
func exampleDB(ctx context.Context) (*pgxpool.Pool, string, func()) {
	url := os.Getenv(testdb.EnvURL)
	if url == "" {
		url = testdb.LocalURL
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "idempotency_example_" + hex.EncodeToString(b)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	if err := migrate.Up(ctx, txinbox.Store{DB: pool, Schema: schema}); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "transfers"}.Sanitize()+
		" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, amount integer NOT NULL)"); err != nil {
		panic(err)
	}
	return pool, schema, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}
