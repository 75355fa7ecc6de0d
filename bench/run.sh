#!/usr/bin/env bash
# Haboob beside nginx, fasthttp's FS and a plain net/http.FileServer, on the
# same SPECweb99-like file set (thesis §6.1.3), driven by cmd/loadgen.
#
#   bench/run.sh                      # 64 and 1024 clients, 20 s each
#   CLIENTS="64" DURATION=5s bench/run.sh
#
# Environment: CLIENTS (list), DURATION, WARMUP, DIRS (file-set size, about
# 5.1 MB per directory), PER_CONN (requests per connection, 0 = keep-alive),
# THINK (client think time), SERVERS (subset of "haboob haboob-patched nginx
# fasthttp fileserver"; the servers are described in bench/servers.sh),
# GNET_PATCH (a patch of gnet, e.g. bench/gnet-netpoll-wait.patch: adds the
# server haboob-patched after haboob, cmd/haboob built against gnet with the
# patch applied, without touching go.mod; SERVERS may also name it, then
# the default patch is bench/gnet-netpoll-wait.patch),
# HABOOB_CONFIG (a stage configuration; default: the embedded one),
# HABOOB_BIN (a prebuilt haboob to measure instead of building one),
# WRK=1 (also install wrk and print, per server, a wrk run of the same URL
# mix (bench/specweb.lua): requests/s, p50/p99, and the server's CPU time
# and context switches per request read from /proc), WRK_CLIENTS (the
# connection counts of the wrk table; default: CLIENTS), LOADGEN=0 (skip the
# cmd/loadgen table), WRK_THREADS (default 2), JSON (append every loadgen
# run to this file, one JSON line each, with the response-time distribution:
# input of cmd/sandstorm-plot -bench), HABOOB_STATS (append Haboob's /stats
# page, cache hits and misses and per-stage events, after each of its rows),
# SYSCALLS=DIR (each wrk row counts the server's system calls per request
# with perf stat: DIR/NAME-CONNS.syscalls; see bench/servers.sh).
# bench/pairs.sh compares two Haboob binaries alternately, nginx beside.
# It installs Debian's nginx-light (and wrk) if missing, raises the file
# descriptor limit, builds the binaries, runs everything on 127.0.0.1 and
# prints one Markdown table; its last two columns are the server's CPU time
# and context switches per request over the measurement, from /proc
# (loadgen -server-pids). Load generator and servers share the machine:
# the figures are system figures, comparable only within one run.
set -euo pipefail

CLIENTS=${CLIENTS:-"64 1024"}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-3s}
DIRS=${DIRS:-20}
PER_CONN=${PER_CONN:-0}
THINK=${THINK:-0}
SERVERS=${SERVERS:-"haboob nginx fasthttp fileserver"}
if [ -n "${GNET_PATCH:-}" ] && [[ " $SERVERS " != *" haboob-patched "* ]]; then
	SERVERS=$(echo " $SERVERS " | sed 's/ haboob / haboob haboob-patched /')
	[[ " $SERVERS " == *" haboob-patched "* ]] || SERVERS="haboob-patched $SERVERS"
	SERVERS=$(echo $SERVERS)
fi
WRK_CLIENTS=${WRK_CLIENTS:-$CLIENTS}
[ -n "${GNET_PATCH:-}" ] && GNET_PATCH=$(realpath "$GNET_PATCH")

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
echo "# open files limit: $(ulimit -n)" >&2

[ "${WRK:-0}" = 1 ] && { command -v wrk >/dev/null 2>&1 || NEED_WRK=1; }

. bench/lib.sh     # bench_workdir, wait_port, proc_sample, wrk_row
. bench/servers.sh # install_pkg, build_servers, start_server, server_pids, wrk_row_of, stop_haboob
bench_workdir haboob-bench
[ -n "${NEED_WRK:-}" ] && install_pkg wrk wrk

build_servers $SERVERS
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"
for s in $SERVERS; do start_server "$s" "$WORK/files"; done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), haboob $(git rev-parse --short HEAD 2>/dev/null || echo '?'), servers: $SERVERS"

if [ "${LOADGEN:-1}" = 1 ]; then
echo
echo "SPECweb99-like file set: $DIRS directories ($(du -sh "$WORK/files" | cut -f1)), $DURATION per run after $WARMUP warm-up, per-connection requests: ${PER_CONN/#0/unlimited}, think time $THINK; $(nproc) CPUs, $(uname -r)"
echo
echo "| server | clients | requests/s | MB/s | p50 ms | p90 ms | p99 ms | max ms | errors | Jain fairness | CPU µs/request | context switches/request |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for c in $CLIENTS; do
	for s in $SERVERS; do
		"$WORK/bin/loadgen" run -url "${URL[$s]}" -dirs "$DIRS" -clients "$c" -duration "$DURATION" \
			-warmup "$WARMUP" -per-conn "$PER_CONN" -think "$THINK" -name "$s" -row ${JSON:+-json "$JSON"} \
			-server-pids "$(server_pids "$s")"
		if [ "$s" = haboob ] && [ -n "${HABOOB_STATS:-}" ]; then
			{ echo "# after $c clients"; curl -s "${URL[haboob]}/stats"; } >>"$HABOOB_STATS"
		fi
	done
done
fi

if [ "${WRK:-0}" = 1 ]; then
	echo
	echo "wrk (bench/specweb.lua: the same SPECweb99-like mix over $DIRS directories), ${WRK_THREADS:-2} threads, $DURATION per row after a $WARMUP warm-up; server CPU and context switches from /proc; $(nproc) CPUs, $(uname -r)"
	echo
	echo "| server | connections | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
	echo "|---|---|---|---|---|---|---|---|"
	for c in $WRK_CLIENTS; do
		for s in $SERVERS; do
			WRK_DURATION=$DURATION wrk_row_of "$s" "$c"
		done
	done
fi

stop_haboob
