#!/usr/bin/env bash
# Hostile readers and memory: CONNS clients each request a SIZE_MB file and
# never read the response. For each server, one after the other in one run,
# the server's resident memory (VmRSS from /proc/PID/status, summed over its
# processes) before, at its peak while the clients hold their connections,
# and after they close; meanwhile a well-behaved client fetches a small file
# every PROBE_EVERY and its slowest fetch is reported (the server must keep
# serving). Issue 24's goal for Haboob: growth ≤ 32 MB at 200 clients of a
# 100 MB file (nginx, with sendfile, grows by about nothing).
#
#   bench/hostile-rss.sh               # haboob, nginx, fasthttp; 200 clients, 100 MB, 10 s
#   SERVERS="haboob nginx" CONNS=400 HOLD=20s bench/hostile-rss.sh
#
# Environment (defaults in brackets): SERVERS ["haboob nginx fasthttp";
# also fileserver], CONNS [200], SIZE_MB [100: 100,000,000 bytes],
# HOLD [10s: how long the clients keep their connections], PROBE_EVERY
# [0.5s], HABOOB_BIN, HABOOB_CONFIG, HABOOB_PORT [18490], NGINX_PORT
# [18491], FILESERVER_PORT [18492], FASTHTTP_PORT [18493]. Prints a Markdown
# table.
set -euo pipefail

SERVERS=${SERVERS:-"haboob nginx fasthttp"}
CONNS=${CONNS:-200}
SIZE_MB=${SIZE_MB:-100}
HOLD=${HOLD:-10s}
PROBE_EVERY=${PROBE_EVERY:-0.5}
export HABOOB_PORT=${HABOOB_PORT:-18490} NGINX_PORT=${NGINX_PORT:-18491}
export FILESERVER_PORT=${FILESERVER_PORT:-18492} FASTHTTP_PORT=${FASTHTTP_PORT:-18493}

cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
if [ "$(ulimit -n)" -lt $((CONNS + 64)) ]; then
	echo "open files limit $(ulimit -n) is below CONNS=$CONNS + 64" >&2
	exit 2
fi

. bench/lib.sh     # bench_workdir, wait_port
. bench/servers.sh # build_servers, start_server, server_pids, stop_haboob
bench_workdir hostile-rss
build_servers $SERVERS
mkdir -p "$WORK/files"
head -c $((SIZE_MB * 1000000)) /dev/urandom >"$WORK/files/big.bin"
head -c 4096 /dev/urandom >"$WORK/files/small.bin"
chmod -R a+rX "$WORK/files"
hold_s=$(awk -v d="$HOLD" 'BEGIN { print d + 0 }') # "10s" -> 10

# rss_kb PIDS...: VmRSS summed over the processes, in kB.
rss_kb() {
	local pid kb total=0
	for pid in "$@"; do
		kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
		total=$((total + ${kb:-0}))
	done
	echo "$total"
}

# established PORT: the server side's established connections on PORT.
established() {
	ss -Htn state established "( sport = :$1 )" 2>/dev/null | wc -l
}

mb() { awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }

echo
echo "$CONNS clients each send \`GET /big.bin\` ($SIZE_MB MB) and never read; held $HOLD; RSS = VmRSS summed over the server's processes; probe: \`curl\` of a 4 KiB file every ${PROBE_EVERY}s meanwhile. $(nproc) CPUs, $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC')."
echo
echo "| server | clients | RSS before MB | RSS peak MB | growth MB | RSS 2 s after close MB | connections open at the end | probes (failed) | slowest probe ms |"
echo "|---|---|---|---|---|---|---|---|---|"
for s in $SERVERS; do
	start_server "$s" "$WORK/files"
	port=$(server_port "$s")
	url=${URL[$s]}
	# Warm up: the big file once in full, the small one a few times.
	curl -sf -o /dev/null "$url/big.bin"
	for _ in 1 2 3; do curl -sf -o /dev/null "$url/small.bin"; done
	sleep 1
	pids=$(server_pids "$s")
	before=$(rss_kb $pids)

	fds=()
	for _ in $(seq "$CONNS"); do
		exec {fd}<>"/dev/tcp/127.0.0.1/$port"
		printf 'GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' >&"$fd"
		fds+=("$fd")
	done

	peak=$before probes=0 failed=0 slowest=0
	end=$(($(date +%s%N) + hold_s * 1000000000))
	while [ "$(date +%s%N)" -lt "$end" ]; do
		now=$(rss_kb $pids)
		[ "$now" -gt "$peak" ] && peak=$now
		probes=$((probes + 1))
		if t=$(curl -sf -o /dev/null -m 5 -w '%{time_total}' "$url/small.bin"); then
			slowest=$(awk -v a="$slowest" -v t="$t" 'BEGIN { t *= 1000; print (t > a) ? t : a }')
		else
			failed=$((failed + 1))
		fi
		sleep "$PROBE_EVERY"
	done
	now=$(rss_kb $pids)
	[ "$now" -gt "$peak" ] && peak=$now
	open=$(established "$port")

	for fd in "${fds[@]}"; do exec {fd}>&-; done
	sleep 2
	after=$(rss_kb $pids)
	printf '| %s | %d | %s | %s | %s | %s | %d | %d (%d) | %.1f |\n' "$s" "$CONNS" "$(mb "$before")" "$(mb "$peak")" \
		"$(mb $((peak - before)))" "$(mb "$after")" "$open" "$probes" "$failed" "$slowest"

	if [ "$s" = haboob ]; then
		stop_haboob
	else
		kill "${SERVER_PID[$s]}"
		wait "${SERVER_PID[$s]}" 2>/dev/null || true
	fi
done
