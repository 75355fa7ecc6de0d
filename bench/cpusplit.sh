#!/usr/bin/env bash
# Where each server's CPU per request goes, kernel and user side: Haboob
# binaries and nginx, one after the other on one file set, each under a
# wrk run of bench/specweb.lua with `perf record -g` attached; perf's
# samples (cpu-clock, 4 kHz) are turned into µs per request by kernel
# entry point (read, writev, sendfile, setsockopt, epoll, stat, sleeps,
# the loopback delivery in softirq) and by user-space package (Go runtime,
# aio, http, gnet, haboob; nginx). Perf itself costs both servers a
# little: compare the servers of one run, not across runs.
#
#   flock /tmp/bench.lock env CONNS=1024 ROUNDS="1 2" bench/cpusplit.sh \
#       base=/tmp/haboob-main new=/tmp/haboob-branch
#
# Arguments: NAME=BINARY for each Haboob (at least one). Environment:
# CONNS (wrk connections, default 1024), DURATION (seconds, default 8),
# WARMUP (seconds, default 2), DIRS (file set, default 220 = 1.1 GB),
# ROUNDS (labels of the rounds, default "1"), OUT (where the perf data
# and the tables go, default a directory under /tmp that is kept),
# STAT_EVENTS (perf events counted per request beside the recording,
# comma-separated, e.g. syscalls:sys_enter_newfstatat; default none).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 NAME=HABOOB_BINARY..." >&2; exit 2; }
command -v perf >/dev/null || { echo "perf is needed (apt-get install linux-perf)" >&2; exit 2; }
CONNS=${CONNS:-1024}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
DIRS=${DIRS:-220}
OUT=${OUT:-$(mktemp -d /tmp/cpusplit.XXXXXX)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
. bench/lib.sh
. bench/servers.sh
bench_workdir cpusplit
build_servers nginx
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"

declare -A PID
names=()
port=${HABOOB_PORT}
for arg in "$@"; do
	name=${arg%%=*}
	"$(realpath "${arg#*=}")" -root "$WORK/files" -addr "127.0.0.1:$port" -profiler "" 2>"$WORK/$name.log" &
	PID[$name]=$!
	PIDS+=($!)
	wait_port "$port"
	URL[$name]="http://127.0.0.1:$port"
	names+=("$name")
	port=$((port + 10))
done
start_server nginx "$WORK/files"
PID[nginx]=${SERVER_PID[nginx]}

# split DATA REQUESTS: the table of one perf recording.
split() {
	local total
	total=$(perf report -i "$1" --stdio --sort dso 2>/dev/null | awk '/^# Event count/ {print $NF}')
	perf report -i "$1" --children --sort sym --stdio -g none 2>/dev/null | grep '%' | awk -v total="$total" -v n="$2" '
		function pct(s) { sub(/%/, "", s); return s + 0 }
		$3 == "[k]" { inc[$4] = pct($1); kself += pct($2) }
		$3 == "[.]" {
			s = $4; p = pct($2); c = "other"
			if (s ~ /^(runtime\.|internal\/|indexbyte|memeq|aeshash|cmpbody)/) c = "Go runtime"
			if (s ~ /sandstorm\/aio/) c = "aio"
			if (s ~ /sandstorm\/http/) c = "http"
			if (s ~ /apps\/haboob/) c = "haboob"
			if (s ~ /gnet/) c = "gnet"
			if (s ~ /^(syscall|golang.org\/x\/sys)/) c = "syscall wrappers"
			if (s ~ /^ngx_/) c = "nginx"
			user[c] += p; uself += p
		}
		END {
			us = total / 1e3 / n / 100 # µs per request per percent
			printf "%.2f µs of CPU per request (%d requests): kernel %.2f, user %.2f\n", 100 * us, n, kself * us, uself * us
			split("ksys_read __sys_recvfrom do_writev ksys_write __sys_sendmsg do_sendfile __sys_setsockopt do_epoll_wait do_epoll_ctl vfs_statx do_nanosleep do_futex handle_softirqs schedule", k, " ")
			for (i = 1; i in k; i++) if (inc[k[i]] > 0) printf "  kernel %-18s %5.2f\n", k[i], inc[k[i]] * us
			for (c in user) printf "  user   %-18s %5.2f\n", c, user[c] * us
		}'
}

for round in ${ROUNDS:-1}; do
	for s in "${names[@]}" nginx; do
		pids=${PID[$s]}
		[ "$s" = nginx ] && pids=$(server_pids nginx)
		wrk -t2 -c"$CONNS" -d"${WARMUP}s" -s bench/specweb.lua "${URL[$s]}" -- "$DIRS" >/dev/null 2>&1 || true
		perf record -q -g -o "$OUT/$s-$round.data" -p "$(echo $pids | tr ' ' ,)" >/dev/null 2>&1 &
		rec=$!
		stat=
		if [ -n "${STAT_EVENTS:-}" ]; then
			perf stat -x, -e "$STAT_EVENTS" -o "$OUT/$s-$round.stat" -p "$(echo $pids | tr ' ' ,)" >/dev/null 2>&1 &
			stat=$!
		fi
		out=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -s bench/specweb.lua "${URL[$s]}" -- "$DIRS" 2>&1)
		kill -INT "$rec" $stat
		wait "$rec" $stat || true
		n=$(echo "$out" | awk '/requests in/ {print $1}')
		echo "## $s, round $round, $CONNS connections: $(echo "$out" | awk '/Requests\/sec/ {print $2}') requests/s"
		split "$OUT/$s-$round.data" "$n" | tee "$OUT/$s-$round.txt"
		if [ -n "$stat" ]; then
			awk -F, -v n="$n" '$3 != "" && $1 ~ /^[0-9]+$/ {printf "  per request %-32s %.4f\n", $3, $1 / n}' "$OUT/$s-$round.stat" | tee -a "$OUT/$s-$round.txt"
		fi
	done
done
echo "# perf data and tables in $OUT" >&2
