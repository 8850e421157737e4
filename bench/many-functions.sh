#!/usr/bin/env bash
# bench/many-functions.sh: many functions, measured
# black-box on two relay binaries side by side, with a private redis-server
# and the real Docker daemon.
#
#   bench/many-functions.sh BEFORE_RELAY AFTER_RELAY
#   env: SIZES="20 200"  function counts whose startup is measured
#        EVENTS=1000     events sent to the largest size (0: none)
#        EVENT_RUNS="before after"  which binaries get the events
#        ROUNDS=1        startups measured per size and binary (new
#                        functions each time); medians reported; the events
#                        run in the last round
#        KEEP=1          keep the temporary directory (relay logs) at exit
#
# Each function is new (its own name, so its own relay-fn-<name> image is
# built; a line naming the function makes its files differ, so the daemon's
# build cache cannot serve its source layer), dependency-free Python, 5
# handlers. Rule r (function f, handler h: r = 5f + h) has the pattern
# {table_name: [table_<r % 100>]}; event i is {"table_name":"table_<i % 100>"},
# so with 200 functions each event matches 10 rules (10 invocations).
#
# For every size, BEFORE then AFTER (each with a fresh functions directory,
# data directory and stream; a UTS namespace with its own hostname, so no
# other relay's containers are touched):
#   startup     from spawning `relay start` to its msg="worker started" line
#               (consuming), polled every 50 ms; the threads seen at most
#               while it started (sampled at each poll)
#   after start VmHWM (peak RSS), VmRSS, threads, Redis connections (CLIENT
#               LIST of the private Redis, the asking one left out), sockets
#               among its fds (ls -l /proc/PID/fd | grep socket), of them unix
#               (the Docker socket) and TCP (Redis), from ss -p
#   events      (largest size) EVENTS events in one pipelined XADD burst; the
#               time until the group has read the last one and nothing is
#               pending; handler outputs counted in the log; the same figures
#               again, threads at most while handling.
# The images the bench built (relay-fn-mf<pid>*) are removed after each run
# and at exit; no other image is touched. Match time per event for this rule
# shape: build/bench/match (its last line).
set -u
BEFORE=$(realpath "$1")
AFTER=$(realpath "$2")
SIZES=${SIZES:-"20 200"}
EVENTS=${EVENTS:-1000}
EVENT_RUNS=${EVENT_RUNS:-"before after"}
ROUNDS=${ROUNDS:-1}
TAG=mf$$
TMP=$(mktemp -d /tmp/relay-bench-mf.XXXXXX)
REDIS_PID=
RELAY_PID=

rm_images() { # prefix: every relay-fn-<prefix>* image
	docker images --format '{{.Repository}}:{{.Tag}}' | grep "^relay-fn-$1" |
		xargs -r docker rmi >/dev/null 2>&1
}

cleanup() {
	[ -n "$RELAY_PID" ] && kill -TERM "$RELAY_PID" 2>/dev/null && wait "$RELAY_PID" 2>/dev/null
	[ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
	rm_images "$TAG"
	if [ -n "${KEEP:-}" ]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
	echo "bench/many-functions: $*" >&2
	exit 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

port=$((20000 + RANDOM % 40000))
while [ -n "$(ss -Htan "( sport = :$port )")" ]; do port=$((20000 + RANDOM % 40000)); done
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli() { redis-cli -p "$port" "$@"; }

make_functions() { # dir prefix n
	local dir=$1 prefix=$2 n=$3 f h name r
	for f in $(seq 0 $((n - 1))); do
		name=$prefix-$(printf %03d "$f")
		mkdir -p "$dir/$name"
		{
			echo "# $name"
			for h in 0 1 2 3 4; do printf 'def h%d(event):\n    print("mfout %s h%d", event["n"])\n\n' "$h" "$name" "$h"; done
		} >"$dir/$name/h.py"
		{
			echo "runtime: python3.14"
			echo "events:"
			for h in 0 1 2 3 4; do
				r=$((5 * f + h))
				printf '  - handler: h.h%d\n    pattern: {table_name: [table_%d]}\n' "$h" $((r % 100))
			done
		} >"$dir/$name/template.yaml"
	done
}

status_field() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
redis_conns() { rcli CLIENT LIST | grep -vc 'cmd=client|list'; }
socket_fds() { ls -l "/proc/$1/fd" 2>/dev/null | grep -c socket; }
unix_socks() { ss -Hxp 2>/dev/null | grep -c "pid=$1,"; }
tcp_socks() { ss -Htnp 2>/dev/null | grep -c "pid=$1,"; }

figures() { # pid label
	printf '  %-13s VmHWM %6d KiB  VmRSS %6d KiB  threads %3d  redis conns %d  socket fds %d (unix %d, tcp %d)\n' \
		"$2" "$(status_field "$1" VmHWM)" "$(status_field "$1" VmRSS)" "$(status_field "$1" Threads)" \
		"$(redis_conns)" "$(socket_fds "$1")" "$(unix_socks "$1")" "$(tcp_socks "$1")"
}

group_field() { rcli XINFO GROUPS "$1" | awk -v f="$2" 'NR % 2 { k = $0; next } k == f { print; exit }'; }

# run which binary n events round: one measured start (and the events), then stop
run() {
	local which=$1 bin=$2 n=$3 events=$4 round=$5
	local prefix=$TAG${which:0:1}${n}r$round
	local fdir=$TMP/fn-$which-$n-$round log=$TMP/$which-$n-$round.log stream=mf-$which-$n-$round
	make_functions "$fdir" "$prefix" "$n"
	local t0 t1 maxthr=0 thr
	t0=$(now_ms)
	REDIS_URI=127.0.0.1:$port REDIS_STREAM=$stream REDIS_GROUP=relay RELAY_FUNCTIONS_DIR=$fdir \
		RELAY_DATA_DIR=$TMP/data-$which-$n-$round LOG_LEVEL=INFO \
		unshare --uts sh -c "hostname $TAG-$which-$n-$round && exec '$bin' start" >"$log" 2>&1 </dev/null &
	RELAY_PID=$!
	until grep -q 'msg="worker started"' "$log" 2>/dev/null; do
		kill -0 "$RELAY_PID" 2>/dev/null || die "$which relay exited: $(tail -n 5 "$log")"
		thr=$(status_field "$RELAY_PID" Threads 2>/dev/null)
		[ -n "$thr" ] && [ "$thr" -gt "$maxthr" ] && maxthr=$thr
		[ $(($(now_ms) - t0)) -lt 1800000 ] || die "$which: not consuming after 30 min"
		sleep 0.05
	done
	t1=$(now_ms)
	local prepared failed
	prepared=$(grep -c 'msg="function prepared"' "$log")
	failed=$(grep -c 'msg="image build failed' "$log")
	printf '%-6s N=%-4d r%d start to consuming %7.2f s  (%d prepared, %d failed; threads at most %d while starting)\n' \
		"$which" "$n" "$round" "$(echo "($t1 - $t0) / 1000" | bc -l)" "$prepared" "$failed" "$maxthr"
	echo "$which $n $((t1 - t0))" >>"$TMP/startup"
	sleep 1
	figures "$RELAY_PID" "after start"
	if [ "$events" -gt 0 ]; then
		local i t2 t3 last outs dlq
		for i in $(seq 0 $((events - 1))); do
			echo "XADD $stream * event '{\"table_name\":\"table_$((i % 100))\",\"n\":$i}'"
		done >"$TMP/xadd"
		maxthr=0
		t2=$(now_ms)
		rcli <"$TMP/xadd" >"$TMP/ids"
		last=$(tail -n 1 "$TMP/ids")
		while :; do
			if [ "$(group_field "$stream" last-delivered-id)" = "$last" ] &&
				[ "$(group_field "$stream" lag)" = 0 ] && [ "$(group_field "$stream" pending)" = 0 ]; then
				break
			fi
			thr=$(status_field "$RELAY_PID" Threads)
			[ "$thr" -gt "$maxthr" ] && maxthr=$thr
			[ $(($(now_ms) - t2)) -lt 3600000 ] || die "$which: events not done after 1 h"
			sleep 0.2
		done
		t3=$(now_ms)
		outs=$(grep -c 'mfout ' "$log")
		dlq=$(rcli XLEN "$stream:dlq")
		printf '%-6s N=%-4d %d events end to end %7.2f s  (%d handler outputs, want %d; DLQ %d; threads at most %d while handling)\n' \
			"$which" "$n" "$events" "$(echo "($t3 - $t2) / 1000" | bc -l)" "$outs" $((events * 10)) "$dlq" "$maxthr"
		echo "$which-events $n $((t3 - t2))" >>"$TMP/startup"
		figures "$RELAY_PID" "after events"
	fi
	kill -TERM "$RELAY_PID"
	wait "$RELAY_PID" || echo "  ($which relay exited $?)"
	RELAY_PID=
	rm_images "$prefix"
}

echo "bench/many-functions: before=$BEFORE after=$AFTER, $(nproc) cores, $(docker version --format '{{.Server.Version}}') dockerd, $ROUNDS round(s)"
largest=0
for n in $SIZES; do [ "$n" -gt "$largest" ] && largest=$n; done
for round in $(seq 1 "$ROUNDS"); do
	# Interleaved, the order swapped every other round: the machine is shared.
	order="before after"
	[ $((round % 2)) -eq 0 ] && order="after before"
	for n in $SIZES; do
		for which in $order; do
			bin=$BEFORE
			[ "$which" = after ] && bin=$AFTER
			ev=0
			[ "$round" -eq "$ROUNDS" ] && [ "$n" -eq "$largest" ] &&
				[[ " $EVENT_RUNS " == *" $which "* ]] && ev=$EVENTS
			run "$which" "$bin" "$n" "$ev" "$round"
		done
	done
done
echo "medians, after / before:"
for n in $SIZES; do
	for what in "" -events; do
		b=$(awk -v k="before$what" -v n="$n" '$1 == k && $2 == n { print $3 }' "$TMP/startup" | sort -n |
			awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
		a=$(awk -v k="after$what" -v n="$n" '$1 == k && $2 == n { print $3 }' "$TMP/startup" | sort -n |
			awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
		[ -n "$b" ] && [ -n "$a" ] || continue
		awk -v n="$n" -v w="${what:-startup}" -v b="$b" -v a="$a" \
			'BEGIN { sub(/^-/, "", w); printf "  N=%-4d %-8s %7.2f s -> %7.2f s: %.2fx\n", n, w, b / 1000, a / 1000, a / b }'
	done
done
