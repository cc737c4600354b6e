-- k: dedup by an unpartitioned narrow keys table (today's semantics, in every isolation level).
CREATE TABLE inbox_keys (
    consumer text   NOT NULL,
    key      text   NOT NULL,
    id       bigint NOT NULL,
    PRIMARY KEY (consumer, key)
) WITH (fillfactor = 90);

CREATE FUNCTION rotate() RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    g bigint; new_slot int; old_slot int; n bigint;
BEGIN
    SELECT gen + 2 INTO g FROM inbox_gen LIMIT 1;  -- the slot of gen-1 is (gen+2) % 3
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', 'inbox_s' || (g % 3));
    UPDATE inbox_gen SET gen = gen + 1 RETURNING gen INTO g;  -- no receive locks it: it only routes new rows
    new_slot := g % 3; old_slot := (g + 1) % 3;
    -- the keys of the expired rows: row DELETEs, on the narrow table only (id = : a key renewed since
    -- points to another row and stays)
    EXECUTE format($q$DELETE FROM inbox_keys k USING %I m
        WHERE k.consumer = m.consumer AND k.key = m.key AND k.id = m.id
          AND m.state = 'completed' AND m.expires_at < now()$q$, 'inbox_s' || old_slot);
    EXECUTE format($q$INSERT INTO inbox SELECT %s, id, consumer, key, kind, payload, raw, headers, fingerprint,
        ordering_key, state, attempts_started, attempts_failed, next_run_at, owner, lease_until, token, last_error,
        received_at, started_at, completed_at, expires_at, result FROM %I
        WHERE NOT (state = 'completed' AND expires_at < now())$q$, new_slot, 'inbox_s' || old_slot);
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('TRUNCATE %I', 'inbox_s' || old_slot);
    RETURN n;
END
$$;
