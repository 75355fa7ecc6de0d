#!/usr/bin/env bash
# Haboob beside nginx and a plain net/http.FileServer, on the same
# SPECweb99-like file set (thesis §6.1.3), driven by cmd/loadgen.
#
#   bench/run.sh                      # 64 and 1024 clients, 20 s each
#   CLIENTS="64" DURATION=5s bench/run.sh
#
# Environment: CLIENTS (list), DURATION, WARMUP, DIRS (file-set size, about
# 5.1 MB per directory), PER_CONN (requests per connection, 0 = keep-alive),
# THINK (client think time), SERVERS (subset of "haboob nginx fileserver"),
# HABOOB_CONFIG (a stage configuration; default: the embedded one),
# HABOOB_BIN (a prebuilt haboob to measure instead of building one),
# WRK=1 (also install wrk and print, per server, a wrk run of the same URL
# mix (bench/specweb.lua): requests/s, p50/p99, and the server's CPU time
# and context switches per request read from /proc), LOADGEN=0 (skip the
# cmd/loadgen table), WRK_THREADS (default 2), JSON (append every loadgen
# run to this file, one JSON line each, with the response-time distribution:
# input of cmd/sandstorm-plot -bench), HABOOB_STATS (append Haboob's /stats
# page, cache hits and misses and per-stage events, after each of its rows).
# It installs Debian's nginx-light (and wrk) if missing, raises the file
# descriptor limit, builds the binaries, runs everything on 127.0.0.1 and
# prints one Markdown table. Load generator and servers share the machine:
# the figures are system figures, comparable only within one run.
set -euo pipefail

CLIENTS=${CLIENTS:-"64 1024"}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-3s}
DIRS=${DIRS:-20}
PER_CONN=${PER_CONN:-0}
THINK=${THINK:-0}
SERVERS=${SERVERS:-"haboob nginx fileserver"}
HABOOB_PORT=${HABOOB_PORT:-18080}
NGINX_PORT=${NGINX_PORT:-18081}
FILESERVER_PORT=${FILESERVER_PORT:-18082}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
echo "# open files limit: $(ulimit -n)" >&2

install_pkg() { # command package
	command -v "$1" >/dev/null 2>&1 && return 0
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "# installing $2" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >&2
}
case " $SERVERS " in *" nginx "*) install_pkg nginx nginx-light ;; esac
[ "${WRK:-0}" = 1 ] && install_pkg wrk wrk

. bench/lib.sh # bench_workdir, wait_port, proc_sample, wrk_row
bench_workdir haboob-bench

echo "# building" >&2
mkdir -p "$WORK/bin"
if [ -n "${HABOOB_BIN:-}" ]; then cp "$HABOOB_BIN" "$WORK/bin/haboob"; else go build -o "$WORK/bin/haboob" ./cmd/haboob; fi
go build -o "$WORK/bin/loadgen" ./cmd/loadgen
go build -o "$WORK/bin/fileserver" ./bench/fileserver
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"


declare -A URL
for s in $SERVERS; do
	case $s in
	haboob)
		args=(-root "$WORK/files" -addr "127.0.0.1:$HABOOB_PORT" -profiler "")
		[ -n "${HABOOB_CONFIG:-}" ] && args+=(-config "$HABOOB_CONFIG")
		"$WORK/bin/haboob" "${args[@]}" 2>"$WORK/haboob.log" &
		HABOOB_PID=$!
		PIDS+=("$HABOOB_PID")
		wait_port "$HABOOB_PORT"
		URL[haboob]="http://127.0.0.1:$HABOOB_PORT"
		;;
	nginx)
		mkdir -p "$WORK/nginx/logs" "$WORK/nginx/tmp"
		cat >"$WORK/nginx.conf" <<EOF
worker_processes 2;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    open_file_cache max=10000 inactive=60s;
    client_body_temp_path $WORK/nginx/tmp;
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096;
        root $WORK/files;
    }
}
EOF
		nginx -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' 2>"$WORK/nginx/stderr.log" &
		PIDS+=($!)
		NGINX_PID=$!
		wait_port "$NGINX_PORT"
		URL[nginx]="http://127.0.0.1:$NGINX_PORT"
		;;
	fileserver)
		"$WORK/bin/fileserver" -addr "127.0.0.1:$FILESERVER_PORT" -root "$WORK/files" 2>"$WORK/fileserver.log" &
		PIDS+=($!)
		FILESERVER_PID=$!
		wait_port "$FILESERVER_PORT"
		URL[fileserver]="http://127.0.0.1:$FILESERVER_PORT"
		;;
	*)
		echo "unknown server $s" >&2
		exit 2
		;;
	esac
done

if [ "${LOADGEN:-1}" = 1 ]; then
echo
echo "SPECweb99-like file set: $DIRS directories ($(du -sh "$WORK/files" | cut -f1)), $DURATION per run after $WARMUP warm-up, per-connection requests: ${PER_CONN/#0/unlimited}, think time $THINK; $(nproc) CPUs, $(uname -r)"
echo
echo "| server | clients | requests/s | MB/s | p50 ms | p90 ms | p99 ms | max ms | errors | Jain fairness |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for c in $CLIENTS; do
	for s in $SERVERS; do
		"$WORK/bin/loadgen" run -url "${URL[$s]}" -dirs "$DIRS" -clients "$c" -duration "$DURATION" \
			-warmup "$WARMUP" -per-conn "$PER_CONN" -think "$THINK" -name "$s" -row ${JSON:+-json "$JSON"}
		if [ "$s" = haboob ] && [ -n "${HABOOB_STATS:-}" ]; then
			{ echo "# after $c clients"; curl -s "${URL[haboob]}/stats"; } >>"$HABOOB_STATS"
		fi
	done
done
fi

# server_pids SERVER: the processes whose CPU and context switches count.
server_pids() {
	local main
	case $1 in
	haboob) main=$HABOOB_PID ;;
	nginx) main=$NGINX_PID ;;
	fileserver) main=$FILESERVER_PID ;;
	esac
	echo "$main" $(pgrep -P "$main" 2>/dev/null || true)
}


if [ "${WRK:-0}" = 1 ]; then
	echo
	echo "wrk (bench/specweb.lua: the same SPECweb99-like mix over $DIRS directories), ${WRK_THREADS:-2} threads, $DURATION per row after a $WARMUP warm-up; server CPU and context switches from /proc; $(nproc) CPUs, $(uname -r)"
	echo
	echo "| server | connections | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
	echo "|---|---|---|---|---|---|---|---|"
	for c in $CLIENTS; do
		for s in $SERVERS; do
			wrk -t"${WRK_THREADS:-2}" -c"$c" -d"$WARMUP" -s bench/specweb.lua "${URL[$s]}" -- "$DIRS" >/dev/null 2>&1 || true
			pids=$(server_pids "$s")
			read -r t0 cs0 < <(proc_sample $pids)
			out=$(wrk -t"${WRK_THREADS:-2}" -c"$c" -d"$DURATION" --latency -s bench/specweb.lua "${URL[$s]}" -- "$DIRS" 2>&1)
			read -r t1 cs1 < <(proc_sample $pids)
			echo "$out" | wrk_row "$s | $c" $((t1 - t0)) $((cs1 - cs0))
		done
	done
fi

if [ -n "${HABOOB_PID:-}" ]; then
	kill -INT "$HABOOB_PID"
	if wait "$HABOOB_PID"; then
		echo >&2 "# haboob exited cleanly"
	else
		echo >&2 "# haboob exit status $?; log:"
		tail -20 "$WORK/haboob.log" >&2
	fi
fi
