#!/usr/bin/env bash
# Where sendfile starts to pay: Haboob serving one file of each SIZE
# (default 4K 16K 64K 256K 1M), once copied from its page cache
# (sendfileMin above the size) and once sent with sendfile from the
# open-file cache (sendfileMin 0), under wrk with CONNS connections
# (default 64) for DURATION (default 3s), REPS times (default 3) in
# alternation. Prints requests/s and the
# server's CPU µs and context switches per request (from /proc); the
# smallest size where sendfile costs less CPU per request is CacheMiss's
# default sendfileMin.
#
#   bench/sendfile_threshold.sh
#   SIZES="32K 64K 128K" DURATION=5s bench/sendfile_threshold.sh
set -euo pipefail

SIZES=${SIZES:-"4K 16K 64K 256K 1M"}
CONNS=${CONNS:-64}
DURATION=${DURATION:-3s}
REPS=${REPS:-3}
PORT=${PORT:-18392}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
. bench/lib.sh # bench_workdir, wait_port, proc_sample, wrk_row
bench_workdir haboob-threshold
mkdir -p "$WORK/bin" "$WORK/files"
if [ -n "${HABOOB_BIN:-}" ]; then cp "$HABOOB_BIN" "$WORK/bin/haboob"; else go build -o "$WORK/bin/haboob" ./cmd/haboob; fi

for mode in copy sendfile; do
	case $mode in
	copy) min=16MiB ;;
	sendfile) min=0 ;;
	esac
	sed -e "s/maxObject: [^ ]*/maxObject: 8MiB/; s/sendfileMin: [^ ]*/sendfileMin: $min/" configs/haboob.yaml >"$WORK/$mode.yaml"
done

echo "| size | mode | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
echo "|---|---|---|---|---|---|---|---|"
for size in $SIZES; do
	head -c "$(numfmt --from=iec "$size")" /dev/urandom >"$WORK/files/f.bin"
	for rep in $(seq "$REPS"); do for mode in copy sendfile; do
		"$WORK/bin/haboob" -config "$WORK/$mode.yaml" -root "$WORK/files" -addr "127.0.0.1:$PORT" -profiler "" 2>"$WORK/haboob.log" &
		pid=$!
		wait_port "$PORT"
		wrk -t2 -c"$CONNS" -d1s "http://127.0.0.1:$PORT/f.bin" >/dev/null # warm-up: cache filled
		read -r t0 c0 < <(proc_sample "$pid")
		out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency "http://127.0.0.1:$PORT/f.bin")
		read -r t1 c1 < <(proc_sample "$pid")
		wrk_row "$size | $mode ($rep)" $((t1 - t0)) $((c1 - c0)) <<<"$out"
		kill "$pid"
		wait "$pid" 2>/dev/null || true
	done; done
done
