# Shared by the bench/*.sh scripts (sourced, not run).

# bench_workdir NAME: makes $WORK, a directory under /tmp removed at exit,
# and $PIDS, the processes killed at exit (append the ones you start).
bench_workdir() {
	WORK=$(mktemp -d "/tmp/$1.XXXXXX")
	chmod 755 "$WORK"
	PIDS=()
	trap bench_cleanup EXIT
}

bench_cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}

# wait_port PORT: returns once 127.0.0.1:PORT accepts a connection (fails
# after about 10 s).
wait_port() {
	for _ in $(seq 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	echo "server on port $1 did not start" >&2
	return 1
}

# proc_sample PIDS...: "CPU-ticks context-switches" summed over the
# processes and all their threads.
proc_sample() {
	local ticks=0 cs=0 pid t
	for pid in "$@"; do
		[ -r "/proc/$pid/stat" ] || continue
		t=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$pid/stat")
		ticks=$((ticks + t))
		t=$(cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s + 0}')
		cs=$((cs + t))
	done
	echo "$ticks $cs"
}

# wrk_row LABEL TICKS SWITCHES: reads wrk --latency output on stdin and
# prints one Markdown row "| LABEL | requests/s | p50 ms | p99 ms | CPU
# µs/request | context switches/request | errors |", the CPU and switches
# being the server's deltas over the run divided by the requests.
wrk_row() {
	awk -v label="$1" -v dt="$2" -v dcs="$3" -v hz="$(getconf CLK_TCK)" '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/requests in/ { n = $1 }
		/Requests\/sec/ { rps = $2 }
		/Non-2xx|Socket errors/ { err = err $0 " " }
		END {
			if (n == 0) { printf "| %s | failed | | | | | |\n", label; exit }
			printf "| %s | %.0f | %.2f | %.2f | %.1f | %.3f | %s |\n", label, rps, p50, p99, dt / hz * 1e6 / n, dcs / n, (err == "" ? "0" : err)
		}'
}
