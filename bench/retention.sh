#!/usr/bin/env bash
# Retention, old layout (one inbox table, rows deleted by the Cleaner; commit b2d7f61, before
# migration 00006) against the new one (a ring of generation partitions rotated by retention.Rotate; this
# tree), side by side in the same run:
#   (a) RATE msg/s received and drained for DURATION with a 1-minute dedup window;
#   (b) the same, while another connection holds a REPEATABLE READ transaction open (a held xmin) for
#       HOLD_FOR starting at HOLD_AT.
# Each layout gets a throwaway PostgreSQL 15 cluster of its own (initdb under /tmp, ports PORT_OLD and
# PORT_NEW, 127.0.0.1 only), made fresh for each run and removed at the end, so that WAL is measured per
# layout. The old layout runs the old library: a temporary detached worktree of OLD_COMMIT with
# bench/cmd/txretain copied in and built with -tags oldlayout. Prints and keeps (in OUT) one line per
# minute per layout (bench/cmd/txretain) and a summary per layout. Then, with RECORD=1 (the default),
# it copies each run's outputs into bench/retention/runs and draws the runs kept there
# (`txretain chart`): bench/charts/retention-RUN.svg and the section "Retention by generations" of
# bench/RESULTS.md; with RECORD=0 the charts and the section go to OUT only.
#
# Needs root (the clusters run as the postgres OS user) and /usr/lib/postgresql/15/bin.
# Usage: bench/retention.sh            (both runs, about 25 minutes)
#        RUNS=a DURATION=3m bench/retention.sh
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
OLD_COMMIT=${OLD_COMMIT:-b2d7f61}
PORT_OLD=${PORT_OLD:-5441}
PORT_NEW=${PORT_NEW:-5442}
RATE=${RATE:-400}
DURATION=${DURATION:-10m}
RETENTION=${RETENTION:-1m}
INTERVAL=${INTERVAL:-10s}
# Old layout only: FullSweepInterval. Its quick passes leave behind the rows of a span of ids that were
# still in their window when the cursor moved past it; only a full pass deletes them (library default
# 1h). 1m matches the 1-minute window; 0 means the library default.
FULL_SWEEP=${FULL_SWEEP:-1m}
HOLD_AT=${HOLD_AT:-2m}
HOLD_FOR=${HOLD_FOR:-5m}
RUNS=${RUNS:-a b}
NICE=${NICE:-5}
SHARED_BUFFERS=${SHARED_BUFFERS:-128MB}
PLAN_CACHE_MODE=${PLAN_CACHE_MODE:-} # empty: the server's default (auto)
PG_OPTS=${PG_OPTS:-}                 # more server options for both clusters, e.g. "-c auto_explain.log_min_duration=1s ..."
RECORD=${RECORD:-1}                  # 1: record the runs in bench/ (runs, charts, RESULTS.md); 0: in OUT only
BASE=$(mktemp -d /tmp/txretain.XXXXXX)
OUT=${OUT:-$BASE/out}
mkdir -p "$OUT"
chmod 755 "$BASE"

started=()
cleanup() {
	for d in "${started[@]}"; do
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$d" -m fast -w stop >/dev/null 2>&1 || true
	done
	git -C "$ROOT" worktree remove --force "$BASE/old-tree" >/dev/null 2>&1 || true
	find "$BASE" -mindepth 1 -maxdepth 1 ! -name out -exec rm -rf {} +
	echo "outputs kept in $OUT"
}
trap cleanup EXIT

for port in "$PORT_OLD" "$PORT_NEW"; do
	if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port"; then
		echo "port $port is taken by a running server: set PORT_OLD / PORT_NEW" >&2
		exit 1
	fi
done

echo "building the new layout's driver ($(git -C "$ROOT" rev-parse --short HEAD)) and the old one's ($OLD_COMMIT)"
(cd "$ROOT/bench" && nice -n "$NICE" go build -o "$BASE/txretain-new" ./cmd/txretain)
git -C "$ROOT" worktree add --detach "$BASE/old-tree" "$OLD_COMMIT" >/dev/null
mkdir -p "$BASE/old-tree/bench/cmd/txretain"
cp "$ROOT"/bench/cmd/txretain/*.go "$BASE/old-tree/bench/cmd/txretain/"
(cd "$BASE/old-tree/bench" && nice -n "$NICE" go build -tags oldlayout -o "$BASE/txretain-old" ./cmd/txretain)

# cluster NAME PORT: initdb and start a throwaway cluster (default settings but the address, port,
# socket directory and shared_buffers; autovacuum on as by default).
cluster() {
	local dir="$BASE/pg-$1" port=$2
	rm -rf "$dir"
	install -d -o postgres -g postgres "$dir"
	runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir.initdb.log" 2>&1
	started+=("$dir/data")
	runuser -u postgres -- nice -n "$NICE" "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start \
		-o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c shared_buffers=$SHARED_BUFFERS $PG_OPTS" >/dev/null
}

stop_cluster() {
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$BASE/pg-$1/data" -m fast -w stop >/dev/null
	cp "$BASE/pg-$1/server.log" "$OUT/$2-$1.server.log" 2>/dev/null || true
	rm -rf "$BASE/pg-$1"
}

# side_by_side RUN: the per-minute lines of both layouts as one table.
side_by_side() {
	awk '
	function kv(line, key,   i, n, f, p) {
		n = split(line, f, " ")
		for (i = 1; i <= n; i++) { p = index(f[i], "="); if (substr(f[i], 1, p - 1) == key) return substr(f[i], p + 1) }
		return "-"
	}
	FNR == 1 { file++ }
	/^minute=/ { row[file, kv($0, "minute")] = $0; if (kv($0, "minute") + 0 > last) last = kv($0, "minute") + 0 }
	END {
		printf "%-3s | %-18s %-18s | %-9s %-9s | %-9s %-9s | %-9s %-9s | %-10s %-10s | %-8s %-8s | %-4s\n", "min", "inbox MB old (lo-hi)", "inbox MB new (lo-hi)", "WAL/msg o", "WAL/msg n", "recv/s o", "recv/s n", "done/s o", "done/s n", "dead o", "dead n", "qdead o", "qdead n", "held"
		for (m = 1; m <= last; m++) {
			o = row[1, m]; n = row[2, m]
			printf "%-3d | %-18s %-18s | %-9s %-9s | %-9s %-9s | %-9s %-9s | %-10s %-10s | %-8s %-8s | %-4s\n", m,
				kv(o, "inbox_mb") " (" kv(o, "inbox_min_mb") "-" kv(o, "inbox_max_mb") ")",
				kv(n, "inbox_mb") " (" kv(n, "inbox_min_mb") "-" kv(n, "inbox_max_mb") ")",
				kv(o, "wal_b_per_msg"), kv(n, "wal_b_per_msg"), kv(o, "recv_per_s"), kv(n, "recv_per_s"),
				kv(o, "done_per_s"), kv(n, "done_per_s"), kv(o, "inbox_dead"), kv(n, "inbox_dead"),
				kv(o, "queue_dead"), kv(n, "queue_dead"), kv(n, "held")
		}
	}' "$OUT/$1-old.out" "$OUT/$1-new.out"
}

for run in $RUNS; do
	hold=()
	case $run in
	a) ;;
	b) hold=(--hold-at "$HOLD_AT" --hold-for "$HOLD_FOR") ;;
	*) echo "unknown run $run (a or b)" >&2; exit 1 ;;
	esac
	cluster old "$PORT_OLD"
	cluster new "$PORT_NEW"
	echo "run $run: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), rate $RATE/s each, $DURATION, retention $RETENTION, cleaner interval $INTERVAL, old full sweep $FULL_SWEEP ${hold[*]} ${PLAN_CACHE_MODE:+plan_cache_mode=$PLAN_CACHE_MODE}" | tee "$OUT/$run-load.txt"
	echo "trees: generations $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . || echo ' with changes'), old layout $OLD_COMMIT" >>"$OUT/$run-load.txt"
	args=(--rate "$RATE" --duration "$DURATION" --retention "$RETENTION" --interval "$INTERVAL" --full-sweep "$FULL_SWEEP" --plan-cache-mode "$PLAN_CACHE_MODE" "${hold[@]}")
	nice -n "$NICE" "$BASE/txretain-old" --database-url "postgres://postgres@127.0.0.1:$PORT_OLD/postgres?sslmode=disable" "${args[@]}" \
		>"$OUT/$run-old.out" 2>"$OUT/$run-old.err" &
	pid_old=$!
	nice -n "$NICE" "$BASE/txretain-new" --database-url "postgres://postgres@127.0.0.1:$PORT_NEW/postgres?sslmode=disable" "${args[@]}" \
		>"$OUT/$run-new.out" 2>"$OUT/$run-new.err" &
	pid_new=$!
	status=0
	wait "$pid_old" || status=$?
	wait "$pid_new" || status=$?
	echo "load average after run $run: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/$run-load.txt"
	cat "$OUT/$run-old.out" "$OUT/$run-new.out"
	side_by_side "$run" | tee "$OUT/$run-table.txt"
	for f in "$OUT/$run-old.err" "$OUT/$run-new.err"; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
	stop_cluster old "$run"
	stop_cluster new "$run"
	[ "$status" = 0 ] || { echo "run $run failed" >&2; exit "$status"; }
done

if [ "$RECORD" = 1 ]; then
	for run in $RUNS; do # kept as .txt: *.out files are not tracked
		cp "$OUT/$run-old.out" "$HERE/retention/runs/$run-old.txt"
		cp "$OUT/$run-new.out" "$HERE/retention/runs/$run-new.txt"
		cp "$OUT/$run-load.txt" "$HERE/retention/runs/"
	done
	"$BASE/txretain-new" chart -charts "$HERE/charts" -results "$HERE/RESULTS.md" "$HERE/retention/runs"
else
	"$BASE/txretain-new" chart -charts "$OUT/charts" -results "$OUT/RESULTS.md" "$OUT"
fi
