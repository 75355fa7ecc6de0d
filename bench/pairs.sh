#!/usr/bin/env bash
# Two Haboob binaries against each other and against nginx, alternating in
# one run on one file set: A, nginx, B, nginx, A, nginx, B, nginx, ...
# Each row is a wrk run of bench/specweb.lua with the server's CPU split
# into user and system time per request (from /proc), so that a change's
# effect is read against the nginx run beside it rather than across runs.
#
#   flock /tmp/bench.lock env A=/tmp/haboob-main B=/tmp/haboob-branch \
#       PAIRS=3 CONNS="64 1024" DIRS=220 bench/pairs.sh
#
# Environment: A, B (haboob binaries; both required; the same binary twice
# compares A_CONFIG with B_CONFIG, stage configurations, default the
# embedded one), PAIRS (default 3),
# CONNS (wrk connection counts, default 64), DIRS (file-set size, default
# 220 = 1.1 GB), DURATION (default 8s), WARMUP (default 2s), WRK_THREADS
# (default 2). The haboobs listen on HABOOB_PORT and HABOOB_PATCHED_PORT
# (bench/servers.sh), both started before the first row and kept running.
# PROFILE=DIR: each Haboob row also writes a CPU profile of the run but its
# last two seconds to DIR/NAME-CONNS-PAIR.pprof (A's admin endpoints on
# 127.0.0.1:19090, B's on 19091).
set -euo pipefail

: "${A:?A=haboob binary}" "${B:?B=haboob binary}"
PAIRS=${PAIRS:-3}
CONNS=${CONNS:-64}
DIRS=${DIRS:-220}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
A=$(realpath "$A")
B=$(realpath "$B")

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
. bench/lib.sh
. bench/servers.sh
bench_workdir haboob-pairs
build_servers nginx
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"

# start_haboob NAME BINARY PORT ADMIN-PORT CONFIG
start_haboob() {
	local admin=""
	[ -n "${PROFILE:-}" ] && admin=127.0.0.1:$4
	ADMIN[$1]=$admin
	local config=()
	[ -n "$5" ] && config=(-config "$5")
	"$2" -root "$WORK/files" -addr "127.0.0.1:$3" -profiler "$admin" "${config[@]}" 2>"$WORK/$1.log" &
	SERVER_PID[$1]=$!
	PIDS+=($!)
	wait_port "$3"
	URL[$1]="http://127.0.0.1:$3"
}
declare -A ADMIN
start_haboob A "$A" "$HABOOB_PORT" 19090 "${A_CONFIG:-}"
start_haboob B "$B" "${HABOOB_PATCHED_PORT:-18084}" 19091 "${B_CONFIG:-}"
start_server nginx "$WORK/files"

# cpu_sample PIDS...: "user-ticks system-ticks context-switches".
cpu_sample() {
	local u=0 s=0 cs=0 pid t
	for pid in "$@"; do
		read -r t < <(awk '{sub(/^.*\) /, ""); print $12, $13}' "/proc/$pid/stat")
		u=$((u + ${t% *}))
		s=$((s + ${t#* }))
		t=$(cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s + 0}')
		cs=$((cs + t))
	done
	echo "$u $s $cs"
}

# row NAME CONNS PAIR: one wrk run; prints "| NAME | CONNS | req/s | CPU | user | system | switches |".
row() {
	local pids u0 s0 c0 u1 s1 c1 out
	wrk -t"${WRK_THREADS:-2}" -c"$2" -d"$WARMUP" -s bench/specweb.lua "${URL[$1]}" -- "$DIRS" >/dev/null 2>&1 || true
	pids=$(server_pids "$1")
	read -r u0 s0 c0 < <(cpu_sample $pids)
	local prof=""
	if [ -n "${ADMIN[$1]:-}" ]; then
		mkdir -p "$PROFILE"
		local secs=$(($(wrk_seconds "$DURATION") - 2))
		curl -s -o "$PROFILE/$1-$2-$3.pprof" "http://${ADMIN[$1]}/debug/pprof/profile?seconds=$((secs > 0 ? secs : 1))" &
		prof=$!
	fi
	out=$(wrk -t"${WRK_THREADS:-2}" -c"$2" -d"$DURATION" -s bench/specweb.lua "${URL[$1]}" -- "$DIRS" 2>&1)
	read -r u1 s1 c1 < <(cpu_sample $pids)
	[ -n "$prof" ] && wait "$prof"
	echo "$out" | awk -v name="$1" -v conns="$2" -v du=$((u1 - u0)) -v ds=$((s1 - s0)) -v dc=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" '
		/requests in/ { n = $1 }
		/Requests\/sec/ { rps = $2 }
		END {
			if (n == 0) { printf "| %s | %s | failed | | | | |\n", name, conns; exit }
			k = 1e6 / hz / n
			printf "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.3f |\n", name, conns, rps, (du + ds) * k, du * k, ds * k, dc / n
		}'
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg); A = $A ${A_CONFIG:-}, B = $B ${B_CONFIG:-}; $DIRS directories, wrk $DURATION after $WARMUP"
echo
echo "| server | connections | requests/s | CPU µs/request | user µs | system µs | context switches/request |"
echo "|---|---|---|---|---|---|---|"
for c in $CONNS; do
	for p in $(seq "$PAIRS"); do
		for s in A nginx B nginx; do row "$s" "$c" "$p"; done
	done
done
for s in A B; do
	kill -INT "${SERVER_PID[$s]}"
	wait "${SERVER_PID[$s]}" || echo "# haboob $s exit status $?" >&2
done
