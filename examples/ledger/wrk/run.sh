#!/usr/bin/env bash
# Load test of the ledger's POST /v1/events with wrk (Debian package wrk): coalescing off
# (--coalesce-max 1) and on (the default), alternating, ROUNDS times each, in one run.
#
#   examples/ledger/wrk/run.sh              # or: make wrk-ledger
#   DURATION=30s ROUNDS=3 CONNS=32 examples/ledger/wrk/run.sh
#
# Each phase: `ledger serve --workers 0` in a fresh schema (ingest only: no worker competes for the
# CPU), wrk with events.lua (every event sent 1 to 3 times with the same event_id) for DURATION;
# then `ledger work` credits everything, and the check below requires every balance to be exact:
# for every account, balance_cents and entries equal what the stored event ids imply (events.lua's
# account and amount functions), every stored event is completed and credited once, no answer other
# than 202/200, and the stored events number at least the 202 answers (at most CONNS more: requests
# in flight when wrk stopped). The schema is dropped afterwards. Not part of `make test`.
set -euo pipefail

DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
DURATION=${DURATION:-20s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-18471}
export DATABASE_URL

dir=$(cd "$(dirname "$0")" && pwd)
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$dir/.." && go build -o "$tmp/ledger" .)

psqlq() { psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -Atqc "$1"; }

phase() { # round mode
  local round=$1 mode=$2 max=1
  [ "$mode" = on ] && max=0
  local schema="ledger_wrk_${mode}_${round}_$$" prefix="w${round}${mode}"
  # Requests in flight when wrk stops are cancelled: their "store event" warnings go to the log file.
  "$tmp/ledger" serve --addr "127.0.0.1:$PORT" --schema "$schema" --workers 0 --coalesce-max "$max" --log-level warn 2>>"$tmp/serve.log" &
  local pid=$!
  for _ in $(seq 1 200); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  local out
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -s "$dir/events.lua" "http://127.0.0.1:$PORT" -- "$prefix")
  kill -TERM "$pid"
  wait "$pid" || true
  local result
  result=$(grep '^result ' <<<"$out" | sed 's/^result //')

  # Credit every stored event, then check.
  "$tmp/ledger" work --schema "$schema" --workers 4 --poll 50ms --log-level warn &
  local wpid=$!
  until [ "$(psqlq "SELECT count(*) FROM \"$schema\".inbox_queue")" = 0 ]; do sleep 0.5; done
  kill -TERM "$wpid"
  wait "$wpid" || true
  local check
  check=$(psqlq "
    WITH ev AS (
      SELECT m.key, m.state, (m.payload->>'amount_cents')::bigint AS paid, m.payload->>'account_id' AS acct,
             split_part(m.key, '-', 2)::bigint AS tid, split_part(m.key, '-', 3)::bigint AS n
      FROM \"$schema\".inbox m WHERE m.consumer = 'ledger'
    ), want AS (
      SELECT 'acct-' || (tid * 7919 + n) % 100 AS account_id, sum((tid * 31 + n) % 997 + 1) AS cents, count(*) AS entries
      FROM ev GROUP BY 1
    ), got AS (
      SELECT account_id, balance_cents, entries FROM \"$schema\".accounts
    ), sums AS (
      SELECT account_id, sum(amount_cents) AS s, count(*) AS c FROM \"$schema\".ledger_entries GROUP BY 1
    )
    SELECT (SELECT count(*) FROM ev) || ' ' ||
           (SELECT count(*) FROM ev WHERE state <> 'completed'
              OR paid <> (tid * 31 + n) % 997 + 1 OR acct <> 'acct-' || (tid * 7919 + n) % 100) || ' ' ||
           (SELECT count(*) FROM want w FULL JOIN got g USING (account_id)
              WHERE w.account_id IS NULL OR g.account_id IS NULL OR g.balance_cents <> w.cents OR g.entries <> w.entries) || ' ' ||
           (SELECT count(*) FROM got g FULL JOIN sums s USING (account_id)
              WHERE g.account_id IS NULL OR s.account_id IS NULL OR g.balance_cents <> s.s OR g.entries <> s.c) || ' ' ||
           (SELECT count(*) FROM \"$schema\".ledger_entries) || ' ' ||
           (SELECT count(*) FROM got)")
  psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -qc "SET client_min_messages = warning; DROP SCHEMA \"$schema\" CASCADE"
  local stored bad_events bad_balances bad_sums entries accounts
  read -r stored bad_events bad_balances bad_sums entries accounts <<<"$check"
  local accepted other
  accepted=$(grep -o 'accepted_202=[0-9]*' <<<"$result" | cut -d= -f2)
  other=$(grep -o 'other=[0-9]*' <<<"$result" | cut -d= -f2)
  local verdict=exact
  if [ "$bad_events" != 0 ] || [ "$bad_balances" != 0 ] || [ "$bad_sums" != 0 ] || [ "$entries" != "$stored" ] ||
     [ "$other" != 0 ] || [ "$stored" -lt "$accepted" ] || [ "$stored" -gt $((accepted + CONNS)) ]; then
    verdict=WRONG
  fi
  echo "round=$round coalescing=$mode $result stored_events=$stored ledger_entries=$entries accounts=$accounts accounts_wrong=$bad_balances balances_vs_entries_wrong=$bad_sums events_wrong=$bad_events check=$verdict"
  [ "$verdict" = exact ]
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION, $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  for mode in off on; do
    phase "$round" "$mode"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
