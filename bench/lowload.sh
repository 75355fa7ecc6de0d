#!/usr/bin/env bash
# Low load: CPU and context switches per request at a few clients with think
# time (the first rows of bench/figs37-40.sh), with the share taken by the
# server's busiest thread (for a Go server, the runtime's sysmon thread), and
# bench/sysmonwake: what one wake-up costs a goroutine blocked in a raw
# epoll_wait (gnet's event loops), in Go's netpoller, and in an epoll
# descriptor parked in the netpoller.
#
#   bench/lowload.sh                       # about 1 minute
#   CLIENTS="1 4 16" SERVERS="haboob nginx fileserver" DURATION=6s WARMUP=1s DIRS=2 THINK=20ms PER_CONN=5 bench/lowload.sh
#
# GNET_PATCH=bench/gnet-netpoll-wait.patch adds the server haboob-patched:
# cmd/haboob built against a copy of gnet with the patch applied (through
# go build -modfile; go.mod is not touched), measured in the same run.
#
# Ports: HABOOB_PORT [18710], NGINX_PORT [18711], FILESERVER_PORT [18712],
# FASTHTTP_PORT [18713], HABOOB_PATCHED_PORT [18714].
set -euo pipefail

CLIENTS=${CLIENTS:-"1 4 16"}
SERVERS=${SERVERS:-"haboob nginx fileserver"}
DURATION=${DURATION:-6s}
WARMUP=${WARMUP:-1s}
DIRS=${DIRS:-2}
THINK=${THINK:-20ms}
PER_CONN=${PER_CONN:-5}
GIVEN_SERVERS=$SERVERS
export HABOOB_PORT=${HABOOB_PORT:-18710} NGINX_PORT=${NGINX_PORT:-18711}
export FILESERVER_PORT=${FILESERVER_PORT:-18712} FASTHTTP_PORT=${FASTHTTP_PORT:-18713}
export HABOOB_PATCHED_PORT=${HABOOB_PATCHED_PORT:-18714}
if [ -n "${GNET_PATCH:-}" ]; then
	SERVERS="$SERVERS haboob-patched" # built by build_servers with GNET_PATCH applied
fi

cd "$(dirname "$0")/.."
. bench/lib.sh     # bench_workdir, wait_port
. bench/servers.sh # build_servers, start_server, server_pids
bench_workdir lowload
build_servers $SERVERS
go build -o "$WORK/bin/sysmonwake" ./bench/sysmonwake
"$WORK/bin/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
chmod -R a+rX "$WORK/files"
for s in $SERVERS; do start_server "$s" "$WORK/files"; done

# thread_switches PIDS...: "TID switches" of every thread, sorted by TID.
thread_switches() {
	local pid t
	for pid in "$@"; do
		for t in /proc/"$pid"/task/*; do
			echo "${t##*/} $(awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s + 0}' "$t/status" 2>/dev/null)"
		done
	done | sort
}

echo "# Low load: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), haboob $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo "\`$(printf '%s ' ${GNET_PATCH:+GNET_PATCH=$GNET_PATCH} CLIENTS=\""$CLIENTS"\" SERVERS=\""$GIVEN_SERVERS"\" DURATION=$DURATION WARMUP=$WARMUP DIRS=$DIRS THINK=$THINK PER_CONN=$PER_CONN)bench/lowload.sh\`"
echo
echo "| server | clients | requests/s | MB/s | p50 ms | p90 ms | p99 ms | max ms | errors | Jain fairness | CPU µs/request | context switches/request | busiest thread's share of switches |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for c in $CLIENTS; do
	for s in $SERVERS; do
		pids=$(server_pids "$s")
		thread_switches $pids >"$WORK/before"
		row=$("$WORK/bin/loadgen" run -url "${URL[$s]}" -dirs "$DIRS" -clients "$c" -duration "$DURATION" -warmup "$WARMUP" \
			-think "$THINK" -per-conn "$PER_CONN" -name "$s" -row -server-pids "$pids")
		thread_switches $pids >"$WORK/after"
		share=$(join "$WORK/before" "$WORK/after" | awk '{d = $3 - $2; s += d; if (d > m) m = d} END {printf "%.0f %%", s ? 100 * m / s : 0}')
		echo "$row $share |"
	done
done
echo
echo "bench/sysmonwake (100 wake-ups 20 ms apart, context switches of the whole process per wake-up):"
echo
for mode in epoll netpoll nested-epoll; do echo "- $("$WORK/bin/sysmonwake" -mode "$mode")"; done
