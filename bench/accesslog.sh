#!/usr/bin/env bash
# The access log's cost: Haboob without and with -access-log (combined,
# to a file), beside nginx with its access log off and on, in the same run
# on the same machine; wrk drives the SPECweb99-like mix (bench/specweb.lua)
# and the server's CPU time comes from /proc (utime+stime of the process).
#
#   bench/accesslog.sh                       # 64 connections, 10 s, 2 rounds
#   CLIENTS="64 256" DURATION=20s ROUNDS=3 bench/accesslog.sh
set -euo pipefail

CLIENTS=${CLIENTS:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-3s}
ROUNDS=${ROUNDS:-2}
DIRS=${DIRS:-20}
WRK_THREADS=${WRK_THREADS:-2}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
. bench/lib.sh # bench_workdir, wait_port, proc_sample, wrk_row
bench_workdir accesslog-bench

mkdir -p "$WORK/bin"
go build -o "$WORK/bin/haboob" ./cmd/haboob
go build -o "$WORK/bin/loadgen" ./cmd/loadgen
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"


declare -A URL PID
start_haboob() { # name port extra-args...
	local name=$1 port=$2
	shift 2
	"$WORK/bin/haboob" -root "$WORK/files" -addr "127.0.0.1:$port" -profiler "" "$@" 2>"$WORK/$name.log" &
	PID[$name]=$!
	PIDS+=($!)
	wait_port "$port"
	URL[$name]="http://127.0.0.1:$port"
}
start_nginx() { # name port access_log-directive
	local name=$1 port=$2 dir="$WORK/$1"
	nginx_conf "$dir/nginx.conf" "$dir" "$(cat <<EOF
    $3
    server {
        listen 127.0.0.1:$port backlog=4096;
        root $WORK/files;
    }
EOF
	)"
	nginx -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' 2>"$dir/stderr.log" &
	PID[$name]=$!
	PIDS+=($!)
	wait_port "$port"
	URL[$name]="http://127.0.0.1:$port"
}

start_haboob haboob 18090
start_haboob haboob+log 18091 -access-log "$WORK/haboob-access.log"
SERVERS="haboob haboob+log"
if command -v nginx >/dev/null 2>&1; then
	start_nginx nginx 18092 "access_log off;"
	start_nginx nginx+log 18093 "access_log $WORK/nginx-access.log combined;"
	SERVERS="$SERVERS nginx nginx+log"
fi


echo "wrk ($WRK_THREADS threads, bench/specweb.lua over $DIRS directories), $DURATION per row after a $WARMUP warm-up, $ROUNDS rounds interleaved; server CPU (utime+stime) and context switches from /proc; $(nproc) CPUs, $(uname -r)"
echo
echo "| server | connections | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
echo "|---|---|---|---|---|---|---|---|"
for c in $CLIENTS; do
	for r in $(seq "$ROUNDS"); do
		for s in $SERVERS; do
			wrk -t"$WRK_THREADS" -c"$c" -d"$WARMUP" -s bench/specweb.lua "${URL[$s]}" -- "$DIRS" >/dev/null 2>&1 || true
			pids="${PID[$s]} $(pgrep -P "${PID[$s]}" 2>/dev/null || true)"
			read -r t0 cs0 < <(proc_sample $pids)
			out=$(wrk -t"$WRK_THREADS" -c"$c" -d"$DURATION" --latency -s bench/specweb.lua "${URL[$s]}" -- "$DIRS" 2>&1)
			read -r t1 cs1 < <(proc_sample $pids)
			echo "$out" | wrk_row "$s | $c" $((t1 - t0)) $((cs1 - cs0))
		done
	done
done
echo
echo "Haboob's access log counters (/stats):"
curl -s "${URL[haboob+log]}/stats" | grep '^accesslog' || true
kill -INT "${PID[haboob+log]}"
wait "${PID[haboob+log]}" || true
echo "lines in Haboob's access log: $(wc -l <"$WORK/haboob-access.log")"
