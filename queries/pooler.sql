-- What a connection pooler between txinbox and PostgreSQL keeps of a session (internal/pooler): run
-- in pgx's exec mode, so that they need no named prepared statement of their own.

-- name: BackendPID :one
-- The process id of the server session that runs the statement. A pooler gives its clients a cancel
-- key of its own, so that it differs from the one the connection was given at start.
SELECT pg_backend_pid()::int4 AS pid;

-- name: SessionProbe :one
-- The server session running the statement, whether it holds the named prepared statement @name,
-- and its search_path.
SELECT pg_backend_pid()::int4 AS pid,
       EXISTS (SELECT FROM pg_catalog.pg_prepared_statements s WHERE s.name = @name::text) AS prepared,
       current_setting('search_path')::text AS search_path;
