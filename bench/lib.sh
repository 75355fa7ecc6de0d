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

# nginx_conf FILE DIR EXTRA: writes the benchmarks' nginx configuration to
# FILE: 2 workers, pid, logs and temporary files under DIR, sendfile,
# keep-alive as long as a load generator wants, open_file_cache (nginx's
# own tuning for static files); EXTRA (lines inside http { }: the access
# log directive, the server blocks, TLS or gzip settings) follows.
nginx_conf() {
	local file=$1 dir=$2 extra=$3
	mkdir -p "$dir/logs" "$dir/tmp"
	cat >"$file" <<CONF
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 8192; }
http {
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    open_file_cache max=10000 inactive=60s;
    client_body_temp_path $dir/tmp;
$extra
}
CONF
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

# syscalls_per_request PERF_CSV: reads wrk output on stdin and prints the
# system calls counted in PERF_CSV (perf stat -x, of syscalls:sys_enter_*)
# per request, most frequent first, and their total.
syscalls_per_request() {
	awk -F, -v perf="$1" '
		/requests in/ { n = $1 }
		END {
			if (n == 0) { print "no requests"; exit }
			while ((getline line < perf) > 0) {
				split(line, f, ",")
				if (f[3] !~ /^syscalls:sys_enter_/ || f[1] + 0 == 0) continue
				name = f[3]; sub(/^syscalls:sys_enter_/, "", name)
				c[name] = f[1] / n; total += f[1] / n
			}
			for (k in c) printf "%8.3f %s\n", c[k], k | "sort -rn"
			close("sort -rn")
			printf "%8.3f total per request (%d requests)\n", total, n
		}' FS=" "
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
