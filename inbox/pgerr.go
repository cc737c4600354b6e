package inbox

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// translateError turns database errors of receiving into txinbox errors where they mean bad input
// (the Go-side validation should catch these first), and wraps the rest (schemasql.Err: a missing table
// matches txinbox.ErrNotMigrated).
func translateError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "22P02", "22P05", "22021", "22025", "2200N":
			// invalid_text_representation, untranslatable_character, character_not_in_repertoire,
			// invalid_escape_sequence, invalid_xml_content: a value the column type cannot hold.
			return &txinbox.ValidationError{Field: "payload", Reason: "rejected by PostgreSQL: " + pgErr.Message}
		}
	}
	return schemasql.Err(err)
}
