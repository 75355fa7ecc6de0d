# The servers of the Haboob benchmark, shared by bench/run.sh,
# bench/figs37-40.sh and bench/hostile-rss.sh (sourced after bench/lib.sh
# and bench_workdir):
#
#   haboob      cmd/haboob, the embedded configuration or $HABOOB_CONFIG
#               ($HABOOB_BIN: a prebuilt binary to measure instead)
#   haboob-patched  the same cmd/haboob built against a copy of gnet with
#               $GNET_PATCH applied (default bench/gnet-netpoll-wait.patch;
#               through go build -modfile: go.mod is not touched), same
#               flags as haboob
#   nginx       Debian's nginx-light, 2 workers, sendfile, open-file cache
#   fasthttp    bench/fasthttpfs: fasthttp's FS (sendfile above 8 KiB,
#               60 s file cache, no compression), its own Go module
#   fileserver  bench/fileserver: net/http.FileServer
#
# build_servers SERVERS...   builds $WORK/bin/{loadgen,...}; installs nginx
# start_server NAME ROOT     starts NAME on 127.0.0.1, serving ROOT; sets
#                            URL[NAME] and SERVER_PID[NAME]
# server_pids NAME           the processes whose CPU and switches count
# wrk_row_of NAME CONNS      a WRK_DURATION wrk run of bench/specweb.lua
#                            after a WARMUP one: one Markdown row (wrk_row)
#                            with the server's CPU and switches per request
# stop_haboob                SIGINT to haboob (and haboob-patched); fails
#                            unless each exits cleanly
#
# Ports (127.0.0.1): HABOOB_PORT [18080], NGINX_PORT [18081],
# FILESERVER_PORT [18082], FASTHTTP_PORT [18083], HABOOB_PATCHED_PORT [18084].
#
# HABOOB_PROFILE=DIR: Haboob serves its admin endpoints on
# 127.0.0.1:$HABOOB_ADMIN_PORT (default 19090), and each wrk row of Haboob
# writes a CPU profile of the run to DIR/haboob-CONNS.pprof (go tool
# pprof -top DIR/haboob-64.pprof): where its CPU per request goes.
#
# SYSCALLS=DIR: each wrk row counts the server's system calls with
# `perf stat -e 'syscalls:sys_enter_*'` attached to its processes during
# the measured run, and writes them per request, most frequent first, to
# DIR/NAME-CONNS.syscalls (bench/lib.sh syscalls_per_request).
HABOOB_PORT=${HABOOB_PORT:-18080}
NGINX_PORT=${NGINX_PORT:-18081}
FILESERVER_PORT=${FILESERVER_PORT:-18082}
FASTHTTP_PORT=${FASTHTTP_PORT:-18083}
declare -A URL SERVER_PID

install_pkg() { # command package
	command -v "$1" >/dev/null 2>&1 && return 0
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "# installing $2" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >&2
}

build_servers() {
	echo "# building" >&2
	mkdir -p "$WORK/bin"
	go build -o "$WORK/bin/loadgen" ./cmd/loadgen
	local s
	for s in "$@"; do
		case $s in
		haboob)
			if [ -n "${HABOOB_BIN:-}" ]; then cp "$HABOOB_BIN" "$WORK/bin/haboob"; else go build -o "$WORK/bin/haboob" ./cmd/haboob; fi
			;;
		haboob-patched) build_haboob_patched "${GNET_PATCH:-bench/gnet-netpoll-wait.patch}" ;;
		nginx) install_pkg nginx nginx-light ;;
		fasthttp) (cd bench/fasthttpfs && go build -o "$WORK/bin/fasthttpfs" .) ;;
		fileserver) go build -o "$WORK/bin/fileserver" ./bench/fileserver ;;
		*)
			echo "unknown server $s (want haboob, haboob-patched, nginx, fasthttp or fileserver)" >&2
			return 2
			;;
		esac
	done
}

# build_haboob_patched PATCH: $WORK/bin/haboob-patched, cmd/haboob built
# against a copy of the module's gnet with PATCH applied.
build_haboob_patched() {
	local gnet
	gnet=$(go list -m -f '{{.Dir}}' github.com/panjf2000/gnet/v2)
	cp -r "$gnet" "$WORK/gnet"
	chmod -R u+w "$WORK/gnet"
	patch -s -d "$WORK/gnet" -p1 <"$1" >&2
	cp go.mod go.sum "$WORK/"
	echo "replace github.com/panjf2000/gnet/v2 => $WORK/gnet" >>"$WORK/go.mod"
	go build -modfile="$WORK/go.mod" -o "$WORK/bin/haboob-patched" ./cmd/haboob
}

start_server() { # name root
	local name=$1 root=$2 port
	port=$(server_port "$name") || return 2
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port $port for $name is taken by another process (set ${name^^}_PORT)" >&2
		return 1
	fi
	case $name in
	haboob | haboob-patched)
		local args=(-root "$root" -addr "127.0.0.1:$port" -profiler "")
		[ "$name" = haboob ] && [ -n "${HABOOB_PROFILE:-}" ] && args=(-root "$root" -addr "127.0.0.1:$port" -profiler "127.0.0.1:${HABOOB_ADMIN_PORT:-19090}")
		[ -n "${HABOOB_CONFIG:-}" ] && args+=(-config "$HABOOB_CONFIG")
		"$WORK/bin/$name" "${args[@]}" 2>"$WORK/$name.log" &
		;;
	nginx)
		nginx_conf "$WORK/nginx.conf" "$WORK/nginx" "$(cat <<CONF
    access_log off;
    server {
        listen 127.0.0.1:$port backlog=4096;
        root $root;
    }
CONF
		)"
		nginx -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' 2>"$WORK/nginx/stderr.log" &
		;;
	fasthttp)
		"$WORK/bin/fasthttpfs" -addr "127.0.0.1:$port" -root "$root" 2>"$WORK/fasthttp.log" &
		;;
	fileserver)
		"$WORK/bin/fileserver" -addr "127.0.0.1:$port" -root "$root" 2>"$WORK/fileserver.log" &
		;;
	esac
	SERVER_PID[$name]=$!
	PIDS+=($!)
	wait_port "$port"
	if ! kill -0 "${SERVER_PID[$name]}" 2>/dev/null; then
		echo "$name exited at start; its log: $WORK/$name.log" >&2
		return 1
	fi
	URL[$name]="http://127.0.0.1:$port"
}

server_port() { # name
	case $1 in
	haboob) echo "$HABOOB_PORT" ;;
	haboob-patched) echo "${HABOOB_PATCHED_PORT:-18084}" ;;
	nginx) echo "$NGINX_PORT" ;;
	fasthttp) echo "$FASTHTTP_PORT" ;;
	fileserver) echo "$FILESERVER_PORT" ;;
	*)
		echo "unknown server $1" >&2
		return 2
		;;
	esac
}

server_pids() { # name
	local main=${SERVER_PID[$1]}
	echo "$main" $(pgrep -P "$main" 2>/dev/null || true)
}

wrk_row_of() { # name conns
	local threads=${WRK_THREADS:-2} pids t0 t1 cs0 cs1 out
	wrk -t"$threads" -c"$2" -d"$WARMUP" -s bench/specweb.lua "${URL[$1]}" -- "$DIRS" >/dev/null 2>&1 || true
	pids=$(server_pids "$1")
	read -r t0 cs0 < <(proc_sample $pids)
	local prof=""
	if [ "$1" = haboob ] && [ -n "${HABOOB_PROFILE:-}" ]; then
		mkdir -p "$HABOOB_PROFILE"
		# The profile covers the run but its last two seconds (the
		# profiler costs a little CPU: the rows to quote are unprofiled).
		local secs=$(($(wrk_seconds "$WRK_DURATION") - 2))
		curl -s -o "$HABOOB_PROFILE/haboob-$2.pprof" \
			"http://127.0.0.1:${HABOOB_ADMIN_PORT:-19090}/debug/pprof/profile?seconds=$((secs > 0 ? secs : 1))" &
		prof=$!
	fi
	local perf="" counts=""
	if [ -n "${SYSCALLS:-}" ]; then
		mkdir -p "$SYSCALLS"
		counts="$SYSCALLS/$1-$2.perf"
		perf stat -x, -o "$counts" -e 'syscalls:sys_enter_*' -p "$(echo $pids | tr ' ' ,)" &
		perf=$!
	fi
	out=$(wrk -t"$threads" -c"$2" -d"$WRK_DURATION" --latency -s bench/specweb.lua "${URL[$1]}" -- "$DIRS" 2>&1)
	read -r t1 cs1 < <(proc_sample $pids)
	[ -n "$prof" ] && wait "$prof"
	if [ -n "$perf" ]; then
		kill -INT "$perf"
		wait "$perf" || true
		echo "$out" | syscalls_per_request "$counts" >"$SYSCALLS/$1-$2.syscalls"
	fi
	echo "$out" | wrk_row "$1 | $2" $((t1 - t0)) $((cs1 - cs0))
}

# wrk_seconds DURATION: a wrk duration (10s, 2m, 1h) in seconds.
wrk_seconds() {
	case $1 in
	*m) echo $((${1%m} * 60)) ;;
	*h) echo $((${1%h} * 3600)) ;;
	*) echo "${1%s}" ;;
	esac
}

stop_haboob() {
	local name pid rc=0
	for name in haboob haboob-patched; do
		pid=${SERVER_PID[$name]:-}
		[ -n "$pid" ] || continue
		kill -INT "$pid"
		if wait "$pid"; then
			echo >&2 "# $name exited cleanly"
		else
			echo >&2 "# $name exit status $?; log:"
			tail -20 "$WORK/$name.log" >&2
			rc=1
		fi
	done
	return $rc
}
