#!/usr/bin/env bash
# Haboob's HTTPS beside nginx's (Debian nginx-light, ssl) on the same
# ECDSA P-256 certificate and SPECweb99-like file set:
#   1. a real client's handshake latency while STALLED connections that
#      never complete a ClientHello are open (half sent 4 bytes of a record
#      header, half nothing): bench/tlsstall, N_STALL sequential full
#      handshakes and one request each, with server CPU µs and context
#      switches per handshake;
#   2. handshakes/s: every request on a new connection, one small file:
#      wrk with Connection: close (wrk resumes its TLS sessions: TLS 1.3
#      PSK with an X25519 key exchange, no certificate, no signature), and
#      FULL_PAR `openssl s_time -new` clients (full handshakes, no
#      resumption; the same row counts are the client's), FULL_ROUNDS
#      times each, alternating the servers;
#   3. keep-alive HTTPS requests/s with the SPECweb99-like mix
#      (bench/specweb.lua),
# 2 and 3 with server CPU µs and context switches per request from /proc;
#   4. what crypto/tls itself allows: under the full-handshake load, a CPU
#      profile of Haboob (the share of crypto against ours, pprof top) and
#      the hand-offs per handshake (a runtime trace); then the rate with
#      only the crypto left (BenchmarkCryptoTLSServerCPU: crypto/tls's
#      server alone, CPU per handshake and handshakes/s on one core),
#      BenchmarkCryptoTLSHandshake (both ends over net.Pipe),
#      BenchmarkHandshakeStage (the server's side in steps on the handshake
#      stage), and the public-key operations in Go and in OpenSSL
#      (BenchmarkHandshakePrimitives, openssl speed).
#
#   bench/tls.sh                       # 64 connections, 10 s per row
#   CLIENTS="64 256" DURATION=20s STALLED=300 bench/tls.sh
#   BASE_REV=main bench/tls.sh         # adds haboob-base: cmd/haboob of that
#                                      # git revision, alternated with the others
#   ROWS=full FULL_ROUNDS=8 DURATION=4s BASE_REV=main bench/tls.sh
#                                      # only the full-handshake rows, many short
#                                      # rounds alternating the servers (ROWS: any of
#                                      # "stall resumed full keepalive profile";
#                                      # default all)
#   GNET_PATCH=bench/gnet-netpoll-wait.patch bench/tls.sh
#                                      # adds haboob-patched: cmd/haboob against
#                                      # gnet with the patch (go.mod untouched)
#
# The switch columns also give, for Haboob, the share taken by the Go
# runtime's sysmon thread (the process's second thread: the runtime starts
# it before any other), in parentheses. Rows 2 and 3 end with the load
# generator's CPU per request (wrk's, or the openssl clients') and how the
# machine's two cores were spent meanwhile: server, load generator, other
# processes (other sessions' builds and tests) and idle, in cores. A row
# whose "other" is high got less of the machine: its requests/s are low
# for that reason, not for the server's (docs/tls.md, "2026-11-27 22:55").
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
FULL_PAR=${FULL_PAR:-16}
FULL_ROUNDS=${FULL_ROUNDS:-2}
ROWS=${ROWS:-stall resumed full keepalive profile}
has_row() { [[ " $ROWS " == *" $1 "* ]]; }
BASE_REV=${BASE_REV:-}
HABOOB_BASE_TLS_PORT=${HABOOB_BASE_TLS_PORT:-18457}
GNET_PATCH=${GNET_PATCH:+$(realpath "$GNET_PATCH")}
HABOOB_PATCHED_TLS_PORT=${HABOOB_PATCHED_TLS_PORT:-18458}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || true
for p in nginx:nginx-light wrk:wrk openssl:openssl /usr/bin/time:time; do
	command -v "${p%%:*}" >/dev/null 2>&1 && continue
	[ "$(id -u)" = 0 ] || { echo "need ${p#*:}" >&2; exit 1; }
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${p#*:}" >&2
done

. bench/lib.sh     # bench_workdir, wait_port, proc_sample, wrk_row
. bench/servers.sh # build_haboob_patched
bench_workdir haboob-tls

go build -o "$WORK/haboob" ./cmd/haboob
SERVERS="haboob nginx"
if [ -n "$BASE_REV" ]; then
	mkdir -p "$WORK/base"
	git archive "$BASE_REV" | tar -x -C "$WORK/base"
	(cd "$WORK/base" && go build -o "$WORK/haboob-base" ./cmd/haboob)
	SERVERS="haboob haboob-base nginx"
fi
if [ -n "$GNET_PATCH" ]; then
	mkdir -p "$WORK/bin"
	build_haboob_patched "$GNET_PATCH"
	mv "$WORK/bin/haboob-patched" "$WORK/haboob-patched"
	SERVERS="${SERVERS% nginx} haboob-patched nginx"
fi
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
start_variant() { # NAME PORT: $WORK/NAME on the HTTPS port PORT; sets VARIANT_PID
	"$WORK/$1" -root "$WORK/files" -addr 127.0.0.1:0 -tls-addr 127.0.0.1:$2 \
		-tls-cert "$WORK/cert.pem" -tls-key "$WORK/key.pem" -profiler "" 2>>"$WORK/$1.log" &
	VARIANT_PID=$!
	PIDS+=($VARIANT_PID)
	wait_port "$2"
}
if [ -n "$BASE_REV" ]; then
	start_variant haboob-base $HABOOB_BASE_TLS_PORT
	HABOOB_BASE_PID=$VARIANT_PID
fi
if [ -n "$GNET_PATCH" ]; then
	start_variant haboob-patched $HABOOB_PATCHED_TLS_PORT
	HABOOB_PATCHED_PID=$VARIANT_PID
fi
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

declare -A ADDR=([haboob]="127.0.0.1:$HABOOB_TLS_PORT" [haboob-base]="127.0.0.1:$HABOOB_BASE_TLS_PORT"
	[haboob-patched]="127.0.0.1:$HABOOB_PATCHED_TLS_PORT" [nginx]="127.0.0.1:$NGINX_TLS_PORT")
declare -A URL
for s in "${!ADDR[@]}"; do URL[$s]="https://${ADDR[$s]}"; done
declare -A PID=([haboob]=$HABOOB_PID [haboob-base]=${HABOOB_BASE_PID:-} [haboob-patched]=${HABOOB_PATCHED_PID:-} [nginx]=$NGINX_PID)
# sysmon_sample PID: the context switches of the process's second thread
# (Go's sysmon), "" for a process that is not Go.
sysmon_sample() {
	[ "$1" = "$NGINX_PID" ] && return
	local t
	t=$(ls /proc/"$1"/task | sort -n | sed -n 2p)
	awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s + 0}' "/proc/$1/task/$t/status"
}
# sysmon_share S0 S1 CS0 CS1: " (sysmon N %)" or "".
sysmon_share() {
	[ -n "$1" ] || return 0
	awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" 'BEGIN { if (d > c) printf " (sysmon %.0f %%)", 100 * (b - a) / (d - c) }'
}
# machine_sample: "idle-ticks busy-ticks" of the whole machine (/proc/stat).
machine_sample() { awk '/^cpu / { print $5 + $6, $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# split_cols N SECS SERVER_TICKS CLIENT_SECONDS IDLE_TICKS BUSY_TICKS: the
# extra columns "| load generator CPU µs/request | cores: server, load
# generator, other, idle |".
split_cols() {
	awk -v n="$1" -v secs="$2" -v st="$3" -v cl="$4" -v it="$5" -v bt="$6" -v hz="$(getconf CLK_TCK)" 'BEGIN {
		if (n <= 0 || secs <= 0) { printf " | |"; exit }
		printf " %.1f | %.2f, %.2f, %.2f, %.2f |", cl * 1e6 / n, st / hz / secs, cl / secs, (bt - st) / hz / secs - cl / secs, it / hz / secs }'
}
now_s() { date +%s.%N; }
server_pids() { echo "${PID[$1]} $(pgrep -P "${PID[$1]}" 2>/dev/null | tr '\n' ' ')"; }
row() { # name server connections wrk-args...
	local name=$1 s=$2 c=$3
	shift 3
	wrk -t2 -c"$c" -d"$WARMUP" "$@" >/dev/null 2>&1 || true
	local pids sm0 sm1
	pids=$(server_pids "$s")
	sm0=$(sysmon_sample "${PID[$s]}")
	local i0 b0 i1 b1 w0 w1 n
	read -r i0 b0 < <(machine_sample)
	read -r t0 cs0 < <(proc_sample $pids)
	w0=$(now_s)
	out=$(/usr/bin/time -f "%U %S" -o "$WORK/time.out" wrk -t2 -c"$c" -d"$DURATION" --latency "$@" 2>&1)
	w1=$(now_s)
	read -r t1 cs1 < <(proc_sample $pids)
	read -r i1 b1 < <(machine_sample)
	sm1=$(sysmon_sample "${PID[$s]}")
	n=$(echo "$out" | awk '/requests in/ { print $1 }')
	local split
	split=$(split_cols "${n:-0}" "$(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }')" $((t1 - t0)) \
		"$(awk '{ print $1 + $2 }' "$WORK/time.out")" $((i1 - i0)) $((b1 - b0)))
	echo "$out" | wrk_row "$name | $s | $c" $((t1 - t0)) $((cs1 - cs0)) |
		awk -v add="$(sysmon_share "$sm0" "$sm1" "$cs0" "$cs1")" -v cols="$split" -F' [|] ' -v OFS=' | ' '{ if (NF >= 8) $8 = $8 add; print $0 cols }'
}
full_row() { # server: FULL_PAR openssl s_time -new clients for DURATION, no resumption
	local s=$1 pids secs=${DURATION%s} dir i
	pids=$(server_pids "$s")
	dir=$(mktemp -d "$WORK/stime.XXXX")
	local sm0 sm1 i0 b0 i1 b1 w0 w1
	sm0=$(sysmon_sample "${PID[$s]}")
	read -r i0 b0 < <(machine_sample)
	read -r t0 cs0 < <(proc_sample $pids)
	w0=$(now_s)
	local clients=()
	for i in $(seq "$FULL_PAR"); do
		/usr/bin/time -f "%U %S" -o "$dir/$i.time" openssl s_time -connect "${ADDR[$s]}" -new -time "$secs" -www /small.html >"$dir/$i.out" 2>&1 &
		clients+=($!)
	done
	wait "${clients[@]}" || true
	w1=$(now_s)
	read -r t1 cs1 < <(proc_sample $pids)
	read -r i1 b1 < <(machine_sample)
	sm1=$(sysmon_sample "${PID[$s]}")
	local n
	n=$(cat "$dir"/*.out | awk '/connections in [0-9.]+ real seconds/ { n += $1 } END { print n + 0 }')
	cat "$dir"/*.out | awk -v s="$s" -v secs="$secs" -v dt=$((t1 - t0)) -v dcs=$((cs1 - cs0)) -v hz="$(getconf CLK_TCK)" -v c="$FULL_PAR" \
		-v add="$(sysmon_share "$sm0" "$sm1" "$cs0" "$cs1")" -v cols="$(split_cols "$n" "$(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }')" $((t1 - t0)) \
			"$(cat "$dir"/*.time | awk '{ s += $1 + $2 } END { print s }')" $((i1 - i0)) $((b1 - b0)))" '
		/connections in [0-9.]+ real seconds/ { n += $1 }
		END { if (!n) { printf "| full handshake, no resumption | %s | %d | failed | | | | | | | |\n", s, c; exit }
			printf "| full handshake, no resumption (openssl s_time -new) | %s | %d | %.0f | | | %.1f | %.3f%s | 0 |%s\n", s, c, n / secs, dt / hz * 1e6 / n, dcs / n, add, cols }'
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
for s in $SERVERS; do
	has_row stall && stall_row "$s"
done
echo
echo "2, 3. wrk -t2, $DURATION per row after $WARMUP; server CPU and context switches from /proc (all threads, nginx workers included)"
echo
echo "| test | server | connections | requests/s | p50 ms | p99 ms | CPU µs/request | context switches/request | errors | load generator CPU µs/request | cores: server, load generator, other, idle |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for c in $CLIENTS; do
	for s in $SERVERS; do
		has_row resumed && row "new connection per request (wrk: TLS 1.3 resumption)" "$s" "$c" -H "Connection: close" "${URL[$s]}/small.html"
	done
	for r in $(seq "$FULL_ROUNDS"); do # alternated: a burst of load elsewhere hits both
		for s in $SERVERS; do
			has_row full && full_row "$s"
		done
	done
	for s in $SERVERS; do
		has_row keepalive && row "keep-alive, SPECweb99-like mix" "$s" "$c" -s bench/specweb.lua "${URL[$s]}" -- "$DIRS"
	done
done
has_row profile || exit 0

echo
C1=$(echo $CLIENTS | cut -d' ' -f1)
echo "4. Where a handshake's CPU goes: Haboob's CPU profile (8 s) under full handshakes ($FULL_PAR openssl s_time -new) and under wrk's resumptions (wrk -c$C1 Connection: close), then a 2 s runtime trace under the latter"
echo
kill "$HABOOB_PID" ${HABOOB_BASE_PID:-} ${HABOOB_PATCHED_PID:-}
wait "$HABOOB_PID" ${HABOOB_BASE_PID:-} ${HABOOB_PATCHED_PID:-} 2>/dev/null || true
start_haboob 127.0.0.1:$PROFILER_PORT
wait_port $HABOOB_TLS_PORT
wait_port $PROFILER_PORT
LOADERS=()
for i in $(seq "$FULL_PAR"); do
	openssl s_time -connect "${ADDR[haboob]}" -new -time 11 -www /small.html >/dev/null 2>&1 &
	LOADERS+=($!)
done
sleep 2
curl -sf -o "$WORK/cpu-full.pprof" "http://127.0.0.1:$PROFILER_PORT/debug/pprof/profile?seconds=8" || echo "no profile" >&2
wait "${LOADERS[@]}" || true
wrk -t2 -c"$C1" -d15s -H "Connection: close" "${URL[haboob]}/small.html" >/dev/null 2>&1 &
WRK_PID=$!
sleep 2
curl -sf -o "$WORK/cpu.pprof" "http://127.0.0.1:$PROFILER_PORT/debug/pprof/profile?seconds=8" || echo "no profile" >&2
curl -sf -o "$WORK/trace.out" "http://127.0.0.1:$PROFILER_PORT/debug/pprof/trace?seconds=2" || echo "no trace" >&2
wait "$WRK_PID" || true
# share PROFILE REGEXP [IGNORE]: "CPU (share)" of the profile's samples
# whose stack has a function matching REGEXP (and none matching IGNORE).
share() {
	go tool pprof -top -nodecount=100000 -focus "$2" ${3:+-ignore "$3"} "$WORK/haboob" "$1" 2>/dev/null |
		awk '/Showing nodes accounting for/ { sub(/,$/, "", $5); printf "%s (%s)", $5, $6; found = 1 }
			END { if (!found) printf "0 (0%%)" }'
}
row4() { # NAME REGEXP [IGNORE]
	echo "| $1 | $(share "$WORK/cpu-full.pprof" "$2" "${3:-}") | $(share "$WORK/cpu.pprof" "$2" "${3:-}") |"
}
echo "| samples whose stack holds | full handshakes: CPU (share) | wrk's resumptions: CPU (share) |"
echo "|---|---|---|"
row4 "crypto (all of crypto/tls's handshakes and records)" '^crypto/'
row4 "… X25519 key exchange (key pair and shared secret)" '^crypto/ecdh\.'
row4 "… ECDSA P-256 signature" 'ecdsa'
row4 "… SHA-256, HMAC, HKDF (transcript, key schedule)" 'sha256|hmac|hkdf'
row4 "… AES-GCM (records)" 'aes|gcm'
row4 "the socket engine (gnet event loops, accept, enroll; crypto excluded)" 'gnet/v2|aio\.\(\*Server\)\.acceptLoop' '^crypto/'
row4 "system calls (all)" '^syscall\.|Syscall6$'
row4 "allocation and garbage collection" 'runtime\.mallocgc$|runtime\.gcBgMarkWorker|runtime\.bgsweep|runtime\.gcAssistAlloc'
row4 "the Go scheduler (schedule, findRunnable)" '^runtime\.schedule$|^runtime\.findRunnable$'
row4 "the handshake stage and its steps (ours; crypto excluded)" 'aio\.\(\*tlsSession\)\.|aio\.\(\*handshakeHandler\)|aio\.\(\*handshakeRunner\)|aio\.newHandshakeRunner|aio\.\(\*runnerPool\)|aio\.\(\*Connection\)\.(handshakeInput|startTLS|announceOnLoop)$' '^crypto/'
row4 "HTTP and Haboob (ours; crypto excluded)" 'sandstorm/http\.|sandstorm/apps/' '^crypto/'
echo
echo "pprof -top, full handshakes:"
echo
echo '```'
go tool pprof -top -nodecount=20 "$WORK/haboob" "$WORK/cpu-full.pprof" 2>/dev/null | sed -n '4,30p'
echo '```'
echo
# Hand-offs per handshake from the trace: handshakes are the connections
# accepted (the goroutine aio.Server.admit starts for each; wrk makes one
# handshake per connection); a wake-up is a goroutine made runnable by
# another (the scheduler's hand-off, by the waker's first frame of ours or
# gnet's; a coroutine switch has no stack and is counted apart); a P
# start is an idle P put to work, i.e. a thread woken.
echo "Hand-offs per handshake (runtime trace, 2 s):"
echo
echo '```'
go tool trace -d=parsed "$WORK/trace.out" 2>/dev/null | awk '
function flush() {
	if (ev == "") return
	if (ev ~ /NotExist->Runnable/ && stk ~ /aio\.\(\*Server\)\.admit/) hs++
	if (ev ~ /GoID=[0-9]+ NotExist->Runnable/) { created++; c[cls]++ }
	if (ev ~ /GoID=[0-9]+ Waiting->Runnable/) { if (stk == "") direct++; else { wake++; w[cls]++ } }
	if (ev ~ /ProcID=[0-9]+ Idle->Running/) pstart++
	ev = ""; stk = ""; cls = ""; instack = 0
}
/^M=/ { flush(); ev = $0; next }
/^Stack=/ { instack = 1; next }
/^TransitionStack=/ { instack = 0; next }
/^\t[^\t]/ { if (!instack) next; stk = stk " " $1; if (cls == "" && $1 ~ /sandstorm|gnet|crypto\/tls/) cls = $1; next }
END {
	flush()
	if (!hs) { print "no handshakes in the trace"; exit }
	printf "%d connections (one handshake each); per handshake: %.2f goroutine wake-ups through the scheduler, %.2f without a stack (coroutine switches, the runtime), %.2f goroutines created, %.2f P starts (threads woken)\n", hs, wake / hs, direct / hs, created / hs, pstart / hs
	for (k in w) if (w[k] / hs >= 0.01) printf "  woken by %-70s %.2f\n", (k == "" ? "(runtime)" : k), w[k] / hs
	for (k in c) if (c[k] / hs >= 0.01) printf "  created by %-68s %.2f\n", (k == "" ? "(runtime)" : k), c[k] / hs
}'
echo '```'
echo
echo "Only the crypto left. crypto/tls's server alone (BenchmarkCryptoTLSServerCPU: handshakes back to back over net.Pipe, the server's thread CPU time per handshake and its inverse on one core), both ends over net.Pipe (BenchmarkCryptoTLSHandshake), the server's side in steps on the handshake stage (BenchmarkHandshakeStage), and the public-key operations one by one, thread CPU time (BenchmarkHandshakePrimitives):"
echo
echo '```'
(cd aio && "$WORK/aio.test" -test.run XXX -test.bench 'CryptoTLSServerCPU|CryptoTLSHandshake|HandshakeStage|HandshakePrimitives' -test.benchtime 2s 2>&1 | grep -E '^Benchmark')
echo '```'
echo
echo "OpenSSL's (nginx's) public-key operations, openssl speed (CPU time):"
echo
echo '```'
openssl speed -seconds 2 ecdhx25519 ecdsap256 2>/dev/null | grep -E 'ecdh|ecdsa|op/s|sign/s'
echo '```'
