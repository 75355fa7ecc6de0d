#!/usr/bin/env bash
# Server CPU per request for one text page, with and without gzip:
# Haboob (its compressed copy cached in the page cache) beside nginx with
# `gzip on` (which compresses every response) and nginx `gzip_static on`
# (a .gz file beside the page), all at gzip level 5.
#
#   bench/gzip.sh
#   CONNS=64 DURATION=10s ROUNDS=3 PAGE=README.md bench/gzip.sh
#
# Each row is a wrk run against one server, with or without
# "Accept-Encoding: gzip"; the server's CPU time (all its processes and
# threads, /proc/PID/stat) over the run divided by the requests. Installs
# nginx-light and wrk if missing. Load generator and servers share the
# machine: compare rows of one run only.
set -euo pipefail

CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
PAGE=${PAGE:-README.md}
HABOOB_PORT=${HABOOB_PORT:-18090}
NGINX_PORT=${NGINX_PORT:-18091}    # gzip off
NGINX_GZ_PORT=${NGINX_GZ_PORT:-18092}   # gzip on
NGINX_ST_PORT=${NGINX_ST_PORT:-18093}   # gzip_static on

cd "$(dirname "$0")/.."
. bench/lib.sh # proc_sample, wrk_row
for cmd in nginx wrk; do
	command -v $cmd >/dev/null || { [ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk >&2; }
done

bench_workdir haboob-gzip

mkdir -p "$WORK/files" "$WORK/static" "$WORK/bin" "$WORK/nginx/logs" "$WORK/nginx/tmp"
{ echo "<!doctype html><meta charset=utf-8><title>page</title><pre>"; sed 's/&/\&amp;/g; s/</\&lt;/g' "$PAGE"; echo "</pre>"; } >"$WORK/files/page.html"
cp "$WORK/files/page.html" "$WORK/static/page.html"
gzip -5 -k -n "$WORK/static/page.html"
chmod -R a+rX "$WORK/files" "$WORK/static"
SIZE=$(stat -c %s "$WORK/files/page.html")
GZSIZE=$(stat -c %s "$WORK/static/page.html.gz")

go build -o "$WORK/bin/haboob" ./cmd/haboob
"$WORK/bin/haboob" -root "$WORK/files" -addr "127.0.0.1:$HABOOB_PORT" -profiler "" 2>"$WORK/haboob.log" &
HABOOB_PID=$!
PIDS+=("$HABOOB_PID")

nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$(cat <<CONF
    access_log off;
    types { text/html html; }
    gzip_comp_level 5;
    gzip_min_length 256;
    gzip_vary on;
    server { listen 127.0.0.1:$NGINX_PORT; root $WORK/files; }
    server { listen 127.0.0.1:$NGINX_GZ_PORT; root $WORK/files; gzip on; }
    server { listen 127.0.0.1:$NGINX_ST_PORT; root $WORK/static; gzip_static on; }
CONF
)"
nginx -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' 2>"$WORK/nginx/stderr.log" &
NGINX_PID=$!
PIDS+=("$NGINX_PID")

for port in $HABOOB_PORT $NGINX_PORT $NGINX_GZ_PORT $NGINX_ST_PORT; do
	for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
done

# Check the answers before measuring.
for port in $HABOOB_PORT $NGINX_GZ_PORT $NGINX_ST_PORT; do
	curl -s --compressed "http://127.0.0.1:$port/page.html" | cmp -s - "$WORK/files/page.html" || { echo "port $port: curl --compressed differs" >&2; exit 1; }
	curl -s -H 'Accept-Encoding: gzip' -D - -o /dev/null "http://127.0.0.1:$port/page.html" | grep -qi '^content-encoding: gzip' || { echo "port $port: not compressed" >&2; exit 1; }
done

echo "page.html: $SIZE bytes ($GZSIZE gzipped at level 5); wrk -t2 -c$CONNS, $DURATION per row after $WARMUP; $ROUNDS rounds; $(nproc) CPUs, $(uname -r), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
echo
echo "| server | Accept-Encoding | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
echo "|---|---|---|---|---|---|---|---|"
row() { # label pid-list port accept-encoding
	local label=$1 pids=$2 port=$3 ae=$4 hdr=()
	[ -n "$ae" ] && hdr=(-H "Accept-Encoding: $ae")
	wrk -t2 -c"$CONNS" -d"$WARMUP" "${hdr[@]}" "http://127.0.0.1:$port/page.html" >/dev/null 2>&1 || true
	read -r t0 cs0 < <(proc_sample $pids)
	out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency "${hdr[@]}" "http://127.0.0.1:$port/page.html" 2>&1)
	read -r t1 cs1 < <(proc_sample $pids)
	echo "$out" | wrk_row "$label | ${ae:-none}" $((t1 - t0)) $((cs1 - cs0))
}
for _ in $(seq "$ROUNDS"); do
	hp="$HABOOB_PID"
	np="$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"
	row "haboob" "$hp" "$HABOOB_PORT" ""
	row "haboob" "$hp" "$HABOOB_PORT" "gzip"
	row "nginx, gzip off" "$np" "$NGINX_PORT" ""
	row "nginx, gzip on" "$np" "$NGINX_GZ_PORT" "gzip"
	row "nginx, gzip_static on" "$np" "$NGINX_ST_PORT" "gzip"
done
echo
echo "Haboob /stats after the runs:"
curl -s "http://127.0.0.1:$HABOOB_PORT/stats" | grep -E '^(gzip\.[a-zA-Z]+|cache\.(pages|bytes|hits|misses)|requests\.inline|http\.requests) '
