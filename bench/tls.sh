#!/usr/bin/env bash
# Haboob's HTTPS beside nginx's (Debian nginx-light, ssl) on the same
# ECDSA P-256 certificate and SPECweb99-like file set:
#   1. a real client's handshake latency while STALLED connections that
#      never complete a ClientHello are open (half sent 4 bytes of a record
#      header, half nothing): bench/tlsstall, N_STALL sequential full
#      handshakes and one request each, with server CPU µs and context
#      switches per handshake;
#   2. full handshakes/s: every request on a new connection (wrk,
#      Connection: close; wrk does not resume sessions), one small file;
#   3. keep-alive HTTPS requests/s with the SPECweb99-like mix
#      (bench/specweb.lua),
# 2 and 3 with server CPU µs and context switches per request from /proc;
#   4. what crypto/tls itself allows: a CPU profile of Haboob (pprof top)
#      under the full-handshake load, and the handshake rate with only the
#      crypto left (BenchmarkCryptoTLSHandshake: crypto/tls server and
#      client over net.Pipe), beside BenchmarkHandshakeStage (the server
#      side in steps on the handshake stage).
#
#   bench/tls.sh                       # 64 connections, 10 s per row
#   CLIENTS="64 256" DURATION=20s STALLED=300 bench/tls.sh
#
# Load generator and servers share the machine: compare within one run.
set -euo pipefail
CLIENTS=${CLIENTS:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
DIRS=${DIRS:-20}
HABOOB_PORT=${HABOOB_PORT:-18090}
HABOOB_TLS_PORT=${HABOOB_TLS_PORT:-18453}
NGINX_TLS_PORT=${NGINX_TLS_PORT:-18454}
PROFILER_PORT=${PROFILER_PORT:-18455}
STALLED=${STALLED:-300}
N_STALL=${N_STALL:-100}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || true
for p in nginx:nginx-light wrk:wrk openssl:openssl; do
	command -v "${p%%:*}" >/dev/null 2>&1 && continue
	[ "$(id -u)" = 0 ] || { echo "need ${p#*:}" >&2; exit 1; }
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${p#*:}" >&2
done

. bench/lib.sh # bench_workdir, wait_port, proc_sample, wrk_row
bench_workdir haboob-tls

go build -o "$WORK/haboob" ./cmd/haboob
go build -o "$WORK/loadgen" ./cmd/loadgen
go build -o "$WORK/tlsstall" ./bench/tlsstall
go test -c -o "$WORK/aio.test" ./aio
"$WORK/loadgen" gen -dir "$WORK/files" -dirs "$DIRS" >&2
echo "<h1>small</h1>" >"$WORK/files/small.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
	-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
	-keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null


start_haboob() { # profiler address ("" for none)
	"$WORK/haboob" -root "$WORK/files" -addr 127.0.0.1:$HABOOB_PORT -tls-addr 127.0.0.1:$HABOOB_TLS_PORT \
		-tls-cert "$WORK/cert.pem" -tls-key "$WORK/key.pem" -profiler "$1" 2>>"$WORK/haboob.log" &
	HABOOB_PID=$!
	PIDS+=($HABOOB_PID)
}
start_haboob ""
nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$(cat <<EOF
    access_log off;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl backlog=4096;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        root $WORK/files;
    }
EOF
)"
nginx -c "$WORK/nginx.conf" -g 'daemon off;' 2>"$WORK/nginx.err" &
NGINX_PID=$!
PIDS+=($NGINX_PID)
wait_port $HABOOB_TLS_PORT
wait_port $NGINX_TLS_PORT

declare -A URL=([haboob]="https://127.0.0.1:$HABOOB_TLS_PORT" [nginx]="https://127.0.0.1:$NGINX_TLS_PORT")
declare -A ADDR=([haboob]="127.0.0.1:$HABOOB_TLS_PORT" [nginx]="127.0.0.1:$NGINX_TLS_PORT")
declare -A PID=([haboob]=$HABOOB_PID [nginx]=$NGINX_PID)
server_pids() { echo "${PID[$1]} $(pgrep -P "${PID[$1]}" 2>/dev/null | tr '\n' ' ')"; }
row() { # name server connections wrk-args...
	local name=$1 s=$2 c=$3
	shift 3
	wrk -t2 -c"$c" -d"$WARMUP" "$@" >/dev/null 2>&1 || true
	local pids
	pids=$(server_pids "$s")
	read -r t0 cs0 < <(proc_sample $pids)
	out=$(wrk -t2 -c"$c" -d"$DURATION" --latency "$@" 2>&1)
	read -r t1 cs1 < <(proc_sample $pids)
	echo "$out" | wrk_row "$name | $s | $c" $((t1 - t0)) $((cs1 - cs0))
}
stall_row() { # server
	local s=$1 pids out
	pids=$(server_pids "$s")
	read -r t0 cs0 < <(proc_sample $pids)
	out=$("$WORK/tlsstall" -addr "${ADDR[$s]}" -stalled "$STALLED" -n "$N_STALL" 2>&1) || true
	read -r t1 cs1 < <(proc_sample $pids)
	# CPU and switches per measured handshake (the stalled connections' own
	# accepts included).
	echo "| $s | $out | $(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$N_STALL" 'BEGIN { printf "%.0f", d / hz * 1e6 / n }') | $(awk -v d=$((cs1 - cs0)) -v n="$N_STALL" 'BEGIN { printf "%.2f", d / n }') |"
}
echo "HTTPS, ECDSA P-256, $(date -u +%F), $(nproc) CPUs, $(go version | cut -d' ' -f3), $(nginx -V 2>&1 | grep -o 'OpenSSL [0-9.]*' | head -1)"
echo
echo "1. A real client's handshakes ($N_STALL, one after the other, each a new connection and one request) while $STALLED connections that never complete a ClientHello are open (bench/tlsstall)"
echo
echo "| server | tlsstall | CPU µs/handshake | context switches/handshake |"
echo "|---|---|---|---|"
for s in haboob nginx; do
	stall_row "$s"
done
echo
echo "2, 3. wrk -t2, $DURATION per row after $WARMUP; server CPU and context switches from /proc (all threads, nginx workers included)"
echo
echo "| test | server | connections | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in $CLIENTS; do
	for s in haboob nginx; do
		row "full handshake per request" "$s" "$c" -H "Connection: close" "${URL[$s]}/small.html"
	done
	for s in haboob nginx; do
		row "keep-alive, SPECweb99-like mix" "$s" "$c" -s bench/specweb.lua "${URL[$s]}" -- "$DIRS"
	done
done

echo
echo "4. Haboob's CPU profile under full handshakes (wrk -c$(echo $CLIENTS | cut -d' ' -f1) Connection: close, 8 s), pprof -top"
echo
kill "$HABOOB_PID"
wait "$HABOOB_PID" 2>/dev/null || true
start_haboob 127.0.0.1:$PROFILER_PORT
wait_port $HABOOB_TLS_PORT
wait_port $PROFILER_PORT
wrk -t2 -c"$(echo $CLIENTS | cut -d' ' -f1)" -d12s -H "Connection: close" "${URL[haboob]}/small.html" >/dev/null 2>&1 &
WRK_PID=$!
sleep 2
curl -sf -o "$WORK/cpu.pprof" "http://127.0.0.1:$PROFILER_PORT/debug/pprof/profile?seconds=8" || echo "no profile" >&2
wait "$WRK_PID" || true
echo '```'
go tool pprof -top -nodecount=25 "$WORK/haboob" "$WORK/cpu.pprof" 2>/dev/null | sed -n '1,35p'
echo '```'
echo
echo "Only the crypto left: crypto/tls handshakes over net.Pipe (server and client in one process, GOMAXPROCS=$(nproc)), and the server side on the handshake stage"
echo
echo '```'
"$WORK/aio.test" -test.run XXX -test.bench 'CryptoTLSHandshake|HandshakeStage' -test.benchtime 3s 2>&1 | grep -E '^Benchmark'
echo '```'
