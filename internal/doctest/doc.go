// Package doctest holds the checks of the project's documentation, run by `make test` (go test of the
// root module); it has no code of its own.
//
//   - TestGoSnippetsCompile compiles every ```go block of the repository's Markdown files (README.md,
//     adapters/README.md, docs/*.md, ...).
//   - TestGooseInstallCarriesTheMakefilesTags checks that every `go install` of the goose CLI in the
//     documents has the Makefile's GOOSE_TAGS and the version of tools/goose/go.mod, and
//     TestInstallGetsEveryDocumentedModule that README.md's Install section gets every module whose
//     packages the documents teach.
//   - TestMigrationsGuide runs the commands of docs/migrations.md (Go, the goose CLI, the txinbox
//     command) from an empty application module against a database of its own (see the test).
//   - TestLinksResolve follows every relative link of the Markdown files at the root and in docs/ to
//     a file or directory of the repository, and a link's fragment into a Markdown file to one of
//     its headings (the anchors GitHub makes of them).
//   - TestDocumentedNamesExist checks each pkg.Name and pkg.Type.Member that a Markdown file (but
//     CHANGELOG.md) or a Go comment writes, for the repository's packages, against the code.
//   - TestScalingGuideDistributesEveryTable checks that docs/scaling.md's SQL distributes exactly
//     migrate.DistributedTables (-update-docs writes it), and TestScalingGuidePlacesEveryTable that
//     every table of a migrated schema is either distributed or named there as the coordinator's.
//   - TestIdempotencyTxOKIsNeverDiscarded fails on each call of idempotency.Tx whose ok result is
//     assigned to the blank identifier, in the repository's Markdown files and Go files (their code
//     and comments): outside the middleware tx is nil, and a handler that ignores ok panics.
//   - TestNoWorkItemReferences fails on each line of the repository's files that names a work item
//     (an issue, task or ticket number, a number after "#", the work item named as "the" one) or a
//     working session (an ordinal before "session", the session as a span of time or as an actor):
//     project files speak of the project only; history lives in git and CHANGELOG.md. words_test.go
//     lists the phrasings.
//
// The tests that build go in a temporary module, example.com/app, which requires the repository's
// modules from this tree (replace directives), through the module proxy configured for go.
//
// # Go blocks in the documents
//
// Each ```go block is compiled in a package of its own. A block that starts with a package clause is
// a complete file, compiled as it is. Any other block is compiled in package snippet, next to
// testdata/prelude.go, which declares what the documents use without showing it (OrderPaid,
// Payment, Customer, creditOrder, mailer, requireOperator): a block that parses as top-level
// declarations (a func, a type) is a file; any other is the body of a function. That function's
// parameters are the names the block uses without declaring them (ctx, tx, store, ...): an HTML
// comment on the line before the fence, invisible once rendered, gives its signature:
//
//	<!-- go: func(ctx context.Context, tx pgx.Tx, m *worker.Message[Payment]) -->
//	```go
//	tag, err := tx.Exec(ctx, `INSERT ...`, m.Payload.PaymentID)
//	```
//
// Without the comment the function is func(). With results (`func(url string) error`) the block may
// return, and need not end with a return. No block writes imports: each package a block names
// (context, http, pgx, pgxpool, txinbox, worker, ...) is imported from the table in
// snippets_test.go, which a block naming a new package extends. A variable that the block declares
// at its top level and does not use is not an error (the block shows a call, not what follows).
// Errors are reported at the lines of the document.
package doctest
