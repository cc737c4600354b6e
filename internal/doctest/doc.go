// Package doctest holds the checks of the project's documentation, run by `make test` (go test of the
// root module); it has no code of its own.
//
//   - TestGoSnippetsCompile compiles every ```go block of README.md and docs/*.md (conventions below).
//   - TestGooseRecipeFromAnAppModule and TestCLIMigrateFromAnAppModule run the commands of
//     docs/migrations.md from an empty application module against a fresh database.
//   - TestNoWorkItemReferences fails on each line of the repository's files that names a work item
//     (an issue, task or ticket number, or a number after "#") or a working session (an ordinal before
//     "session"): project files speak of the project only; history lives in git and CHANGELOG.md.
//
// # Go snippets
//
// Each block is compiled in a package of its own, inside a temporary module that requires the
// repository's modules (the root one, adapters, seenredis, txinboxtest) through replace directives.
// A block is, in this order:
//
//   - a complete file when it starts with a package clause: compiled as it is;
//
//   - top-level declarations (func, type, var, const) when it parses as such: compiled after the
//     prelude (testdata/prelude.go: the types and helpers the documents use without showing them,
//     such as OrderPaid or creditOrder);
//
//   - otherwise statements: the body of a function, after the prelude. The function's parameters are
//     the names the statements use without declaring them, given by an HTML comment on the line
//     before the block (invisible once rendered):
//
//     <!-- go: func(ctx context.Context, tx pgx.Tx, m *worker.Message[Payment]) -->
//
//     Without that comment the function is func(). A result list (`func(url string) error`) lets the
//     block return; the block may end without a return statement.
//
// Imports are never written: every package the code names (pgx, worker, txinbox, http, ...) is
// imported from the table in snippets_test.go. Variables that a block declares and does not use (it
// shows a call, not what follows) are not an error.
package doctest
