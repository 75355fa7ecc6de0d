#!/usr/bin/env bash
# Memory under hostile clients (DESIGN §7): CLIENTS connections (default
# 200) each request a SIZE_MB file (default 100) and never read. Prints,
# per server, the growth of its resident memory (VmRSS) while they hold
# on, measured by bench/nonreader. Haboob's goal: at most 32 MB.
#
#   bench/nonreader.sh
#   SERVERS=haboob CLIENTS=50 HOLD=3s bench/nonreader.sh
#
# Environment: CLIENTS, SIZE_MB, HOLD (how long they stay), SERVERS
# (subset of "haboob nginx"), HABOOB_BIN (a prebuilt haboob to measure).
set -euo pipefail

CLIENTS=${CLIENTS:-200}
SIZE_MB=${SIZE_MB:-100}
HOLD=${HOLD:-5s}
SERVERS=${SERVERS:-"haboob nginx"}
HABOOB_PORT=${HABOOB_PORT:-18390}
NGINX_PORT=${NGINX_PORT:-18391}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
. bench/lib.sh # bench_workdir, wait_port
bench_workdir haboob-nonreader

mkdir -p "$WORK/bin" "$WORK/files"
if [ -n "${HABOOB_BIN:-}" ]; then cp "$HABOOB_BIN" "$WORK/bin/haboob"; else go build -o "$WORK/bin/haboob" ./cmd/haboob; fi
go build -o "$WORK/bin/nonreader" ./bench/nonreader
head -c "$((SIZE_MB << 20))" /dev/urandom >"$WORK/files/big.bin"
chmod -R a+rX "$WORK/files"

for s in $SERVERS; do
	case $s in
	haboob)
		"$WORK/bin/haboob" -root "$WORK/files" -addr "127.0.0.1:$HABOOB_PORT" -profiler "" 2>"$WORK/haboob.log" &
		pid=$!
		port=$HABOOB_PORT
		;;
	nginx)
		mkdir -p "$WORK/nginx/logs" "$WORK/nginx/tmp"
		cat >"$WORK/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	client_body_temp_path $WORK/nginx/tmp;
	server { listen 127.0.0.1:$NGINX_PORT; root $WORK/files; }
}
CONF
		nginx -c "$WORK/nginx.conf" -p "$WORK/nginx" -g 'daemon off;' 2>"$WORK/nginx.err" &
		wait_port "$NGINX_PORT"
		sleep 0.2
		pid=$(pgrep -P "$(cat "$WORK/nginx/nginx.pid")" | head -1) # the worker
		port=$NGINX_PORT
		;;
	esac
	PIDS+=("$pid")
	wait_port "$port"
	# One request first, so the file's first use is not counted.
	curl -s -o /dev/null "http://127.0.0.1:$port/big.bin"
	printf '%-7s ' "$s"
	"$WORK/bin/nonreader" -addr "127.0.0.1:$port" -path /big.bin -pid "$pid" -clients "$CLIENTS" -hold "$HOLD"
	if [ "$s" = nginx ]; then kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true; else kill "$pid" 2>/dev/null || true; fi
done
