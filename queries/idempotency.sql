-- name: IdemClaim :one
-- Inserts a new HTTP Idempotency-Key as in_flight (package idempotency), committed on its own before
-- the handler runs, so that concurrent retries see it. No row is returned when the key is already
-- stored (ErrNoRows): look it up.
INSERT INTO /* TEMPLATE: schema */idempotency_keys
    (principal, method, route, key, fingerprint, locked_until, expires_at)
VALUES (@principal, @method, @route, @key, @fingerprint,
        now() + make_interval(secs => @lease_seconds::float8),
        now() + make_interval(secs => @expiry_seconds::float8))
ON CONFLICT (principal, method, route, key) DO NOTHING
RETURNING id, token;

-- name: IdemLookup :one
-- Reads a stored key with its expiry and lease evaluated on the server clock.
SELECT id, token, state, fingerprint, status, headers, body,
       (expires_at <= now())::boolean AS expired,
       (locked_until <= now())::boolean AS lease_over
FROM /* TEMPLATE: schema */idempotency_keys
WHERE principal = @principal AND method = @method AND route = @route AND key = @key;

-- name: IdemTakeOver :one
-- Claims a stored key again for a new request when its record has expired, or when it is in_flight
-- with its lease over and no transaction holds it locked (its request died before or after locking
-- it). The fencing token is incremented, so the previous owner can no longer lock or complete it. No
-- row is returned when the row changed since it was read, or is locked by a running handler.
UPDATE /* TEMPLATE: schema */idempotency_keys k
SET fingerprint = @fingerprint, state = 'in_flight', token = k.token + 1,
    locked_until = now() + make_interval(secs => @lease_seconds::float8),
    expires_at = now() + make_interval(secs => @expiry_seconds::float8),
    created_at = now(), completed_at = NULL, status = NULL, headers = NULL, body = NULL
FROM (
    SELECT c.id
    FROM /* TEMPLATE: schema */idempotency_keys c
    WHERE c.id = @id AND c.token = @token
      AND (c.expires_at <= now() OR (c.state = 'in_flight' AND c.locked_until <= now()))
    FOR UPDATE SKIP LOCKED
) picked
WHERE k.id = picked.id
RETURNING k.id, k.token;

-- name: IdemLock :one
-- Locks a claimed key inside the handler transaction, if the claim is still ours (same fencing token,
-- still in_flight). The lock is held until that transaction ends, so nobody can take the key over
-- while the handler runs, however long it takes.
SELECT id
FROM /* TEMPLATE: schema */idempotency_keys
WHERE id = @id AND token = @token AND state = 'in_flight'
FOR UPDATE;

-- name: IdemComplete :execrows
-- Stores the response of a claimed key, in the handler transaction (so it commits with the business
-- writes or not at all).
UPDATE /* TEMPLATE: schema */idempotency_keys
SET state = 'completed', status = @status, headers = (@headers::text)::jsonb, body = @body, completed_at = now()
WHERE id = @id AND token = @token AND state = 'in_flight';

-- name: IdemRelease :execrows
-- Deletes a claimed key whose request failed (nothing committed), so that a retry runs at once. A key
-- completed or taken over in the meantime is left alone.
DELETE FROM /* TEMPLATE: schema */idempotency_keys
WHERE id = @id AND token = @token AND state = 'in_flight';

-- name: IdemCleanExpired :execrows
-- Deletes up to @max_rows expired keys, oldest expiry first. Rows locked by a running request are
-- skipped; a row renewed in the meantime is re-checked by FOR UPDATE and left alone.
DELETE FROM /* TEMPLATE: schema */idempotency_keys k
USING (
    SELECT c.id
    FROM /* TEMPLATE: schema */idempotency_keys c
    WHERE c.expires_at <= now()
    ORDER BY c.expires_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) picked
WHERE k.id = picked.id AND k.expires_at <= now();
