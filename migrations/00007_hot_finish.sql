-- txinbox schema, version 7: room on every inbox page for the finish's update of each of its rows.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- Since version 4 a message's wide inbox row is written twice: inserted by its receive, updated once
-- by its finish (the outcome, the claim's token and attempts). A batch finishes up to a thousand
-- messages in one transaction, and they sit side by side in the table (ids in receive order): every
-- row of a page gets its new version in the same transaction, before any old version is dead and can
-- be pruned. At fillfactor 80 only a fifth of them fit on their page; the others moved to another
-- page with a new entry in both indexes (a non-HOT update): 24% of the finishes of a drain were HOT.
-- At fillfactor 45 an insert leaves more than half of the page free, enough for the new version of
-- every row on it: 100% HOT, and the drain ran 10-15% faster (bench/RESULTS.md, "Generic plans and
-- HOT finishes"). The table did not grow: after a drain of 100,000 messages inbox_s0 and its indexes
-- took 53 MB at fillfactor 45 against 63 MB at 80 (the moved versions and their index entries cost
-- more than the free space).
--
-- The setting applies to pages filled from now on; existing pages keep their rows. It is a catalog
-- change only (no rewrite, a brief lock of each partition).

-- +goose Up
ALTER TABLE inbox_s0 SET (fillfactor = 45);
ALTER TABLE inbox_s1 SET (fillfactor = 45);
ALTER TABLE inbox_s2 SET (fillfactor = 45);

-- +goose Down
ALTER TABLE inbox_s0 SET (fillfactor = 80);
ALTER TABLE inbox_s1 SET (fillfactor = 80);
ALTER TABLE inbox_s2 SET (fillfactor = 80);
