-- g and p: dedup within a slot by a per-partition unique key; across slots by the receive statement.
ALTER TABLE inbox ADD CONSTRAINT inbox_consumer_key UNIQUE (consumer, key, slot);

-- One tick: generation gen -> gen+1 (new slot (gen+1)%3, empty), retire generation gen-1 (slot
-- (gen+2)%3): copy its survivors (pending, dead, completed within the window) into the new slot,
-- then TRUNCATE it. One transaction. Returns the number of survivors copied.
CREATE FUNCTION rotate() RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    g bigint; new_slot int; old_slot int; n bigint;
BEGIN
    -- (1) the retired slot, ACCESS EXCLUSIVE first: it waits for every transaction that touched inbox
    -- (a receive plans over every partition, so every in-flight receive), and blocks new ones before
    -- they lock the generation row. The other order deadlocks: a receive holding the partitions'
    -- locks waits for the generation row while the rotation holding it waits for the partition.
    SELECT gen + 2 INTO g FROM inbox_gen LIMIT 1;  -- the slot of gen-1 is (gen+2) % 3
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', 'inbox_s' || (g % 3));
    -- (2) the switch: a key update of every generation row (all consumers rotate together). It makes
    -- receives whose snapshot predates this commit fail (RR: 40001) or run again (RC: retry).
    UPDATE inbox_gen SET gen = gen + 1 RETURNING gen INTO g;
    new_slot := g % 3; old_slot := (g + 1) % 3;
    -- (3) survivors, with their id, token, state and everything else.
    EXECUTE format($q$INSERT INTO inbox SELECT %s, id, consumer, key, kind, payload, raw, headers, fingerprint,
        ordering_key, state, attempts_started, attempts_failed, next_run_at, owner, lease_until, token, last_error,
        received_at, started_at, completed_at, expires_at, result FROM %I
        WHERE NOT (state = 'completed' AND expires_at < now())$q$, new_slot, 'inbox_s' || old_slot);
    GET DIAGNOSTICS n = ROW_COUNT;
    -- (4) the rest leaves with the file.
    EXECUTE format('TRUNCATE %I', 'inbox_s' || old_slot);
    RETURN n;
END
$$;
