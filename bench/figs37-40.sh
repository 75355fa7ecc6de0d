#!/usr/bin/env bash
# The thesis's Figs. 37–40 with four servers (Haboob, nginx, fasthttp's FS,
# net/http.FileServer; bench/servers.sh), and issue 24's serving goals, in
# one run on one file set larger than Haboob's page cache.
#
#   bench/figs37-40.sh                 # about 7 minutes on 2 CPUs
#   DURATION=2s WARMUP=1s DIRS=20 CLIENTS="1 64" GOAL_CLIENTS=64 OUT=/tmp/f bench/figs37-40.sh   # smoke run
#
# 1. The sweep (thesis §6.1.3): cmd/loadgen at each of CLIENTS with THINK
#    think time and a new connection every PER_CONN requests, every server
#    at each count; rows with the server's CPU µs and context switches per
#    request from /proc; every run appended to $OUT/$NAME.jsonl with its
#    response-time distribution; Haboob's /stats after each of its rows in
#    $OUT/$NAME-stats.txt.
# 2. The goals: at each of GOAL_CLIENTS, closed-loop keep-alive clients
#    (no think time), with cmd/loadgen and with wrk (bench/specweb.lua, the
#    same mix), each with the server's CPU and switches per request; then
#    Haboob's ratios to nginx and fasthttp and whether each goal is met
#    (requests/s ≥ nginx's and fasthttp's, CPU µs/request ≤ nginx's,
#    ≤ 0.15 context switches per request).
# 3. The plots: cmd/sandstorm-plot -bench writes $OUT/$NAME-throughput.svg
#    (Fig. 37), -requests.svg, -fairness.svg (Fig. 37's Jain index),
#    -rt-cdf-1024.svg (Fig. 38), -rt-cdf-64.svg (Fig. 40) and -cpu.svg (the
#    server's CPU µs per request against clients).
#
# The Markdown report goes to stdout and to $OUT/$NAME.md.
#
# Environment (defaults in brackets): CLIENTS ["1 4 16 64 256 1024"],
# DURATION [8s] and WARMUP [2s] per row, DIRS [220: 1.1 GB, 7,920 files;
# Haboob's page cache is 256 MiB], THINK [20ms], PER_CONN [5],
# SERVERS ["haboob nginx fasthttp fileserver"], GOAL_CLIENTS ["64 1024"],
# GOAL_DURATION [$DURATION], WRK [1: also the wrk goal rows; 0 skips them],
# WRK_THREADS [2], OUT [docs/figures], NAME [haboob-fig37-40-c], CDF
# [64,1024: client counts of the response-time plots], HABOOB_BIN (a
# prebuilt haboob), HABOOB_CONFIG (a stage configuration), HABOOB_PORT
# [18480], NGINX_PORT [18481], FILESERVER_PORT [18482], FASTHTTP_PORT [18483]. Load generator and servers share the machine: the
# figures are comparable only within one run.
set -euo pipefail

CLIENTS=${CLIENTS:-"1 4 16 64 256 1024"}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
DIRS=${DIRS:-220}
THINK=${THINK:-20ms}
PER_CONN=${PER_CONN:-5}
SERVERS=${SERVERS:-"haboob nginx fasthttp fileserver"}
GOAL_CLIENTS=${GOAL_CLIENTS:-"64 1024"}
GOAL_DURATION=${GOAL_DURATION:-$DURATION}
WRK=${WRK:-1}
WRK_THREADS=${WRK_THREADS:-2}
OUT=${OUT:-docs/figures}
NAME=${NAME:-haboob-fig37-40-c}
CDF=${CDF:-64,1024}
# Ports apart from bench/run.sh's 18080-18083, which others may be running.
export HABOOB_PORT=${HABOOB_PORT:-18480} NGINX_PORT=${NGINX_PORT:-18481}
export FILESERVER_PORT=${FILESERVER_PORT:-18482} FASTHTTP_PORT=${FASTHTTP_PORT:-18483}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
mkdir -p "$OUT"
REPORT="$OUT/$NAME.md"
SWEEP_JSON="$OUT/$NAME.jsonl"
GOAL_JSON="$OUT/$NAME-closed.jsonl"
STATS="$OUT/$NAME-stats.txt"
if [ -z "${FIGS_REPORT_TEE:-}" ]; then # run again with stdout copied to the report
	FIGS_REPORT_TEE=1 "$0" "$@" | tee "$REPORT"
	exit "${PIPESTATUS[0]}"
fi
: >"$SWEEP_JSON"
: >"$GOAL_JSON"
: >"$STATS"

. bench/lib.sh     # bench_workdir, wait_port, proc_sample, wrk_row
. bench/servers.sh # install_pkg, build_servers, start_server, server_pids, wrk_row_of, stop_haboob
bench_workdir haboob-figs
[ "$WRK" = 1 ] && install_pkg wrk wrk
install_pkg jq jq
started=$(date -u +%s)

build_servers $SERVERS
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"
for s in $SERVERS; do start_server "$s" "$WORK/files"; done

header="| server | clients | requests/s | MB/s | p50 ms | p90 ms | p99 ms | max ms | errors | Jain fairness | CPU µs/request | context switches/request |
|---|---|---|---|---|---|---|---|---|---|---|---|"

# loadgen_row CLIENTS THINK PER_CONN JSON SERVER: one row, the server's cost
# from /proc over the measured part.
loadgen_row() {
	"$WORK/bin/loadgen" run -url "${URL[$5]}" -dirs "$DIRS" -clients "$1" -duration "$DURATION" -warmup "$WARMUP" \
		-think "$2" -per-conn "$3" -name "$5" -row -json "$4" -server-pids "$(server_pids "$5")"
}

echo "# Figs. 37–40 with four servers: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "\`$(printf '%s ' CLIENTS=\""$CLIENTS"\" DURATION=$DURATION WARMUP=$WARMUP DIRS=$DIRS THINK=$THINK PER_CONN=$PER_CONN GOAL_CLIENTS=\""$GOAL_CLIENTS"\" GOAL_DURATION=$GOAL_DURATION WRK=$WRK)bench/figs37-40.sh\`"
echo
echo "File set: $DIRS SPECweb99-like directories ($(du -sh "$WORK/files" | cut -f1)); servers: $SERVERS; $(nproc) CPUs, $(uname -r), load average at start $(cut -d' ' -f1-3 /proc/loadavg); haboob $(git rev-parse --short HEAD 2>/dev/null || echo '?')${HABOOB_BIN:+ (prebuilt $HABOOB_BIN)}."
echo
echo "## Sweep: think time $THINK, a new connection every $PER_CONN requests, $DURATION per row after $WARMUP"
echo
echo "$header"
for c in $CLIENTS; do
	for s in $SERVERS; do
		loadgen_row "$c" "$THINK" "$PER_CONN" "$SWEEP_JSON" "$s"
		if [ "$s" = haboob ]; then
			{ echo "# after $c clients"; curl -s "${URL[haboob]}/stats"; } >>"$STATS"
		fi
	done
done

# The thesis's Fig. 39 (§6.1.4: 3.31 GB file set, 20 ms think time, 5
# requests per connection; Mbit/s, mean and max response time, Jain).
thesis_fig39() { # clients
	case $1 in
	64) printf '%s\n' "Apache 177.56 16.61 2285 0.99" "Flash 172.65 18.58 12470 0.99" "Haboob 187.52 15.08 1872 0.99" ;;
	1024) printf '%s\n' "Apache 173.09 475.47 93691 0.80" "Flash 172.65 665.32 37388 0.99" "Haboob 201.42 547.23 3886 0.98" ;;
	esac
}
echo
echo "### Beside the thesis's Fig. 39"
echo
echo "| clients | server | Mbit/s | RT mean ms | RT max ms | Jain fairness |"
echo "|---|---|---|---|---|---|"
for c in 64 1024; do
	jq -r --argjson c "$c" 'select(.clients == $c) | [.server, .mbps * 8, .meanMs, .maxMs, .fairness] | @tsv' "$SWEEP_JSON" |
		awk -F'\t' -v c="$c" '{ printf "| %d | %s | %.1f | %.1f | %.0f | %.4f |\n", c, $1, $2, $3, $4, $5 }'
	thesis_fig39 "$c" | awk -v c="$c" '{ printf "| %d | thesis (2002): %s | %.1f | %.1f | %.0f | %.2f |\n", c, $1, $2, $3, $4, $5 }'
done

echo
echo "## Goals: keep-alive clients, no think time, $GOAL_DURATION per row after $WARMUP"
echo
echo "cmd/loadgen:"
echo
echo "$header"
declare -A RPS CPU CS
for c in $GOAL_CLIENTS; do
	for s in $SERVERS; do
		row=$(DURATION=$GOAL_DURATION loadgen_row "$c" 0 0 "$GOAL_JSON" "$s")
		echo "$row"
		IFS='|' read -r _ _ _ rps _ _ _ _ _ _ _ cpu cs _ <<<"$row"
		RPS[loadgen,$s,$c]=$rps CPU[loadgen,$s,$c]=$cpu CS[loadgen,$s,$c]=$cs
	done
done
tools=loadgen
if [ "$WRK" = 1 ]; then
	tools="loadgen wrk"
	echo
	echo "wrk ($WRK_THREADS threads, bench/specweb.lua):"
	echo
	echo "| server | connections | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
	echo "|---|---|---|---|---|---|---|---|"
	for c in $GOAL_CLIENTS; do
		for s in $SERVERS; do
			row=$(WRK_DURATION=$GOAL_DURATION wrk_row_of "$s" "$c")
			echo "$row"
			IFS='|' read -r _ _ _ rps _ _ cpu cs _ <<<"$row"
			RPS[wrk,$s,$c]=$rps CPU[wrk,$s,$c]=$cpu CS[wrk,$s,$c]=$cs
		done
	done
fi

# verdict A B OP: "A/B×", with " ✓" or " ✗" for A OP B.
ratio() {
	awk -v a="$1" -v b="$2" -v op="$3" 'BEGIN {
		if (a == "" || b == "" || b + 0 == 0) { print "–"; exit }
		ok = (op == ">=") ? (a + 0 >= b + 0) : (a + 0 <= b + 0)
		printf "%.2f× %s\n", a / b, ok ? "met" : "not met" }'
}
if [[ " $SERVERS " == *" haboob "* && " $SERVERS " == *" nginx "* ]]; then
	echo
	echo "## Haboob against the goals (DESIGN §7, issue 24)"
	echo
	echo "| tool | clients | requests/s vs nginx (≥ 1) | requests/s vs fasthttp (≥ 1) | CPU µs/request vs nginx (≤ 1) | context switches/request (≤ 0.15) |"
	echo "|---|---|---|---|---|---|"
	for t in $tools; do
		for c in $GOAL_CLIENTS; do
			h_cs=${CS[$t,haboob,$c]// /}
			echo "| $t | $c | $(ratio "${RPS[$t,haboob,$c]}" "${RPS[$t,nginx,$c]}" ">=") | $(ratio "${RPS[$t,haboob,$c]}" "${RPS[$t,fasthttp,$c]:-}" ">=") | $(ratio "${CPU[$t,haboob,$c]}" "${CPU[$t,nginx,$c]}" "<=") | $h_cs $(awk -v x="$h_cs" 'BEGIN { print (x + 0 <= 0.15) ? "met" : "not met" }') |"
		done
	done
fi

stop_haboob
plots=$(go run ./cmd/sandstorm-plot -bench -cdf "$CDF" -prefix "$NAME-" -o "$OUT" "$SWEEP_JSON")
echo
echo "Plots ($(printf '`%s`' "go run ./cmd/sandstorm-plot -bench -cdf $CDF -prefix $NAME- -o $OUT $SWEEP_JSON")): $(echo $plots); raw runs: $SWEEP_JSON, $GOAL_JSON; Haboob's /stats after each sweep row: $STATS."
echo
echo "Took $(($(date -u +%s) - started)) s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
