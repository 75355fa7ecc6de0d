#!/usr/bin/env bash
# HTTP/2 over TLS: Haboob beside nginx (Debian nginx-light, `listen ...
# ssl http2`) on the same ECDSA P-256 certificate and SPECweb99-like
# file set, driven by h2load (nghttp2): CLIENTS connections × STREAMS
# concurrent streams each, the URL mix of bench/specweb.lua (the same
# Zipf/class/file distributions, drawn once into a list of URIs that
# every h2load client walks). Each row: requests/s, and the server's CPU
# µs and context switches per request from /proc, measured over the run.
# Rows over TLS (ALPN h2), then over h2c with prior knowledge on plain
# TCP, which shows the HTTP/2 layer's cost without TLS's.
#
#   bench/h2.sh                               # -c64 -m10, 10 s per row
#   CLIENTS=64 STREAMS=10 DURATION=20 ROUNDS=2 TRANSPORTS=tls bench/h2.sh
#
# Load generator and servers share the machine: compare within one run.
set -euo pipefail
CLIENTS=${CLIENTS:-64}
STREAMS=${STREAMS:-10}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-2}
DIRS=${DIRS:-20}
ROUNDS=${ROUNDS:-1}
HABOOB_PORT=${HABOOB_PORT:-18791}
HABOOB_TLS_PORT=${HABOOB_TLS_PORT:-18793}
NGINX_TLS_PORT=${NGINX_TLS_PORT:-18794}
NGINX_PORT=${NGINX_PORT:-18792}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || true
for p in nginx:nginx-light h2load:nghttp2-client openssl:openssl; do
	command -v "${p%%:*}" >/dev/null 2>&1 && continue
	[ "$(id -u)" = 0 ] || { echo "need ${p#*:}" >&2; exit 1; }
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${p#*:}" >&2
done

. bench/lib.sh # bench_workdir, wait_port, proc_sample
bench_workdir haboob-h2

go build -o "$WORK/haboob" ./cmd/haboob
go build -o "$WORK/loadgen" ./cmd/loadgen
"$WORK/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
	-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
	-keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

# uris BASE: 20,000 URIs of the SPECweb99-like mix (bench/specweb.lua's
# distributions: directory by Zipf popularity, class 35/50/14/1 %, file
# by SPECweb99's per-file frequencies).
uris() {
	awk -v base="$1" -v dirs="$DIRS" 'BEGIN {
		srand(1)
		for (i = 1; i <= dirs; i++) dw[i] = 1 / i
		nd = cdf(dw, dirs, dc)
		split("0.35 0.50 0.14 0.01", cw, " "); cdf(cw, 4, cc)
		split("3.9 5.9 8.8 17.7 35.3 11.8 7.1 5.0 4.4", fw, " "); cdf(fw, 9, fc)
		for (i = 0; i < 20000; i++)
			printf "%s/dir%05d/class%d_%d\n", base, pick(dc, dirs) - 1, pick(cc, 4) - 1, pick(fc, 9) - 1
	}
	function cdf(w, n, t,   i, s, acc) { s = 0; for (i = 1; i <= n; i++) s += w[i]; acc = 0
		for (i = 1; i <= n; i++) { acc += w[i] / s; t[i] = acc }; return n }
	function pick(t, n,   r, i) { r = rand(); for (i = 1; i <= n; i++) if (r <= t[i]) return i; return n }'
}

"$WORK/haboob" -root "$WORK/files" -addr 127.0.0.1:$HABOOB_PORT -tls-addr 127.0.0.1:$HABOOB_TLS_PORT \
	-tls-cert "$WORK/cert.pem" -tls-key "$WORK/key.pem" -profiler "" 2>"$WORK/haboob.log" &
HABOOB_PID=$!
PIDS+=($HABOOB_PID)
nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$(cat <<EOF
    access_log off;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    http2_max_concurrent_streams 128;
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl http2 backlog=4096;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        root $WORK/files;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT http2 backlog=4096;
        root $WORK/files;
    }
EOF
)"
nginx -c "$WORK/nginx.conf" -g "daemon off;" 2>"$WORK/nginx.err" &
NGINX_PID=$!
PIDS+=($NGINX_PID)
wait_port $HABOOB_TLS_PORT
wait_port $NGINX_TLS_PORT || { cat "$WORK/nginx.err" >&2; exit 1; }

wait_port $NGINX_PORT

# Each row is a server over a transport: h2 over TLS (ALPN), and h2c with
# prior knowledge (plain TCP), which shows the HTTP/2 layer's own cost.
declare -A URL=([haboob-tls]="https://127.0.0.1:$HABOOB_TLS_PORT" [nginx-tls]="https://127.0.0.1:$NGINX_TLS_PORT"
	[haboob-h2c]="http://127.0.0.1:$HABOOB_PORT" [nginx-h2c]="http://127.0.0.1:$NGINX_PORT")
declare -A PID=([haboob]=$HABOOB_PID [nginx]=$NGINX_PID)
for k in "${!URL[@]}"; do
	uris "${URL[$k]}" >"$WORK/$k.uris"
	# The protocol check: every row must speak HTTP/2.
	curl -sk --http2-prior-knowledge -o /dev/null -w "%{http_version}" "${URL[$k]}/dir00000/class0_0" | grep -qx 2 ||
		{ echo "$k does not speak h2" >&2; exit 1; }
done

# row SERVER TRANSPORT: one h2load run with the server's CPU ticks and
# context switches sampled around it.
row() {
	local s=$1 k=$1-$2
	h2load -t"$THREADS" -c"$CLIENTS" -m"$STREAMS" -D "$WARMUP" -i "$WORK/$k.uris" >/dev/null 2>&1 || true
	local pids="${PID[$s]} $(pgrep -P "${PID[$s]}" 2>/dev/null | tr '\n' ' ')"
	read -r t0 cs0 < <(proc_sample $pids)
	out=$(h2load -t"$THREADS" -c"$CLIENTS" -m"$STREAMS" -D "$DURATION" -i "$WORK/$k.uris" 2>&1)
	read -r t1 cs1 < <(proc_sample $pids)
	echo "$out" | awk -v label="$s | $2" -v dt=$((t1 - t0)) -v dcs=$((cs1 - cs0)) -v hz="$(getconf CLK_TCK)" '
		/^finished in/ { rps = $4 }
		/^requests:/ { done = $6 }
		/^status codes:/ { other = $5 + $7 + $9 }
		/^traffic:/ { mb = $2 }
		END {
			if (done == 0) { printf "| %s | failed | | | | |\n", label; exit }
			printf "| %s | %.0f | %.1f | %.3f | %s | %d |\n", label, rps, dt / hz * 1e6 / done, dcs / done, mb, other
		}'
}
echo "HTTP/2 over TLS (ECDSA P-256) and h2c, $(date -u +%F), $(nproc) CPUs; h2load -t$THREADS -c$CLIENTS -m$STREAMS -D $DURATION after $WARMUP s of warm-up, SPECweb99-like mix over $DIRS directories; server CPU and context switches from /proc (all threads, nginx workers included)"
echo
echo "| server | transport | requests/s | CPU µs/request | context switches/request | traffic | non-2xx |"
echo "|---|---|---|---|---|---|---|"
for _ in $(seq "$ROUNDS"); do
	for t in ${TRANSPORTS:-tls h2c}; do
		for s in haboob nginx; do
			row "$s" "$t"
		done
	done
done
