package testdb

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Bad-input tests check that a rejected schema name created or removed nothing. They compare the
// schemas a bad name could have touched before and after, never the server's schema count: other
// tests create and drop schemas meanwhile.

// SchemaCandidates returns every schema name that the bad names could have created, or removed, had
// one reached SQL: each name as it is (quoted), folded to lower case, and cut to PostgreSQL's 63 bytes;
// each run of identifier characters in it (interpolated unquoted, `x; DROP TABLE inbox; --` creates
// x); and "public", which an injected DROP SCHEMA would remove. A name PostgreSQL cannot hold (NUL,
// invalid UTF-8) is left out; its parts are kept. Counting only these names, rather than every
// schema of the server, keeps the other tests' schemas, which come and go meanwhile, out of the
// check.
func SchemaCandidates(bad []string) []string {
	seen := map[string]bool{"public": true}
	add := func(s string) {
		if s == "" || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
			return
		}
		for len(s) > 63 { // NAMEDATALEN - 1, cut on a character boundary as PostgreSQL does
			_, n := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-n]
		}
		seen[s] = true
	}
	for _, b := range bad {
		add(b)
		add(strings.ToLower(b))
		for _, part := range identRun.FindAllString(b, -1) {
			add(strings.ToLower(part))
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// identRun matches the characters PostgreSQL accepts in an unquoted identifier.
var identRun = regexp.MustCompile(`[A-Za-z0-9_$\x{80}-\x{10FFFF}]+`)

// ExistingSchemas returns those of names that exist on the server, sorted and comma-separated.
func ExistingSchemas(t testing.TB, db *pgxpool.Pool, names []string) string {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), `SELECT coalesce(string_agg(nspname, ',' ORDER BY nspname), '')
		FROM pg_namespace WHERE nspname = ANY($1)`, names).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
