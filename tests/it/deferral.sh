# No event waits for the reclaim because a slot was busy, through
# relay start, a private redis-server and the real Docker daemon, with the
# default 8 workers (and, in the second test, the default standby pool): a burst for one function at `concurrency: 2` runs two
# at a time back to back (the other workers park its events locally, the
# reclaim, every minute, never comes into it) and another function's event
# is not held up behind the burst.
#
# The handlers print "start N <unix time>" and "end N <unix time>" on stdout
# (they run hardened, with no mounts); relay forwards each line to its log,
# which is all the test reads. Function names start with "df-"; each test
# removes the images it made.

pending_count() { rcli XPENDING events relay | head -n1; }
nothing_pending() { [ "$(pending_count)" -eq 0 ]; }
count() { grep -cE -- "$1" "$2"; }
count_at_least() { [ "$(count "$2" "$3")" -ge "$1" ]; }

df_fn() { # name, kind, seconds
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf 'import time
def handler(event):
    print("start", event["n"], "%%.3f" %% time.time(), flush=True)
    time.sleep(%s)
    print("end", event["n"], "%%.3f" %% time.time(), flush=True)
' "$3" >"$RELAY_FUNCTIONS_DIR/$1/h.py"
	printf 'runtime: python3.14
concurrency: 2
events:
  - handler: h.handler
    pattern: {kind: [%s]}
    timeout: 60s
' "$2" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}

df_start() {
	export LOG_LEVEL=DEBUG # the per-invocation records (attempt=N) are DEBUG
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	unset MAX_CONCURRENCY
}

# xadd_n KIND FROM TO: events {"kind":KIND,"n":i} for i in FROM..TO.
xadd_n() {
	local i
	for i in $(seq "$2" "$3"); do
		echo "XADD events * event '{\"kind\":\"$1\",\"n\":$i}'"
	done | rcli >/dev/null
}

# Its "start N T" / "end N T" lines of the log as "N T" (forwarded output
# ends with the handler's own text).
times_of() { grep -oE "$1 [0-9]+ [0-9]+\.[0-9]+\$" "$2" | cut -d' ' -f2-; }

# The most intervals open at once, from "start N T" and "end N T" lines.
max_overlap() {
	{
		grep -oE "start [0-9]+ [0-9]+\.[0-9]+\$" "$1" | awk '{print $3, 1}'
		grep -oE "end [0-9]+ [0-9]+\.[0-9]+\$" "$1" | awk '{print $3, -1}'
	} | sort -k1,1n -k2,2n | awk '{c += $2; if (c > m) m = c} END {print m + 0}'
}

test_a_burst_at_concurrency_2_runs_back_to_back_without_the_reclaim() {
	df_start
	# No standby containers: they are started ahead and parked, holding no
	# slot, and would be counted by the docker ps sample below.
	export STANDBY_MAX=0
	df_fn df-burst burst 4
	start_relay_as "$TMP/relay.log" df-worker
	# The image is built by the first invocation: not part of the timing.
	xadd_n burst 0 0
	wait_for 300 grep -qE 'end 0 [0-9.]+$' "$TMP/relay.log" ||
		fail "the warm-up event did not run: $(tail -n 20 "$TMP/relay.log")"
	wait_for 30 nothing_pending || fail "the warm-up event stayed pending"
	local t0 max_ctr=0 c i
	t0=$(date +%s.%N)
	xadd_n burst 1 16
	for i in $(seq 1 600); do
		c=$(docker ps -q --filter label=relay.function=df-burst | wc -l)
		[ "$c" -gt "$max_ctr" ] && max_ctr=$c
		count_at_least 17 'end [0-9]+ [0-9.]+$' "$TMP/relay.log" && nothing_pending && break
		sleep 0.2
	done
	local last elapsed
	last=$(times_of end "$TMP/relay.log" | awk '$1 > 0 {print $2}' | sort -n | tail -n1)
	elapsed=$(echo "$last - $t0" | bc)
	echo "16 events x 4 s at concurrency 2: ${elapsed} s from the first XADD to the last end (ideal 32 s, bound 1.4 x 32 + 8 = 52.8 s); max containers $max_ctr; max handlers at once $(max_overlap "$TMP/relay.log")"
	[ "$(count 'end [0-9]+ [0-9.]+$' "$TMP/relay.log")" -eq 17 ] || fail "$(count 'end [0-9]+' "$TMP/relay.log") of 17 events done"
	nothing_pending || fail "messages left pending"
	for i in $(seq 1 16); do
		[ "$(count "start $i [0-9.]+\$" "$TMP/relay.log")" -eq 1 ] || fail "event $i ran $(count "start $i [0-9.]+\$" "$TMP/relay.log") times"
	done
	[ "$(count 'msg="handler executed" function=df-burst .* attempt=1 ' "$TMP/relay.log")" -eq 17 ] ||
		fail "not 17 first attempts: $(grep 'handler executed' "$TMP/relay.log" | head)"
	! grep -qE 'attempt=[2-9]' "$TMP/relay.log" || fail "an attempt was charged twice"
	! grep -q 'message reclaimed' "$TMP/relay.log" || fail "the reclaim took part"
	[ "$max_ctr" -le 2 ] || fail "$max_ctr containers of df-burst at once > concurrency 2"
	[ "$(max_overlap "$TMP/relay.log")" -le 2 ] || fail "more than 2 handlers ran at once"
	[ "$(max_overlap "$TMP/relay.log")" -eq 2 ] || fail "never 2 handlers at once"
	[ "$(echo "$elapsed <= 52.8" | bc)" -eq 1 ] || fail "took $elapsed s > 52.8 s"
	[ "$(rcli XLEN relay:events:dlq)" -eq 0 ] || fail "dead-lettered"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images df-burst
}

test_another_function_is_not_held_up_behind_a_burst() {
	df_start
	export MAX_BUFFERED_EVENTS=32 # the burst and the other event both read at once
	df_fn df-hot hot 4
	df_fn df-cold cold 0
	start_relay_as "$TMP/relay.log" df-worker
	xadd_n hot 0 0
	xadd_n cold 100 100
	wait_for 300 grep -qE 'end 0 [0-9.]+$' "$TMP/relay.log" || fail "the hot warm-up did not run"
	wait_for 300 grep -qE 'end 100 [0-9.]+$' "$TMP/relay.log" || fail "the cold warm-up did not run"
	wait_for 30 nothing_pending || fail "the warm-up events stayed pending"
	xadd_n hot 1 16
	local t_cold
	t_cold=$(date +%s.%N)
	xadd_n cold 101 101
	wait_for 120 grep -qE 'end 101 [0-9.]+$' "$TMP/relay.log" || fail "the cold event never ran"
	local started hot_done waited
	started=$(times_of start "$TMP/relay.log" | awk '$1 == 101 {print $2}')
	waited=$(echo "$started - $t_cold" | bc)
	hot_done=$(count 'end ([1-9]|1[0-6]) [0-9.]+$' "$TMP/relay.log")
	echo "another function's event started ${waited} s after its XADD, behind 16 x 4 s of a concurrency-2 function ($hot_done of them done by then)"
	[ "$(echo "$waited < 6" | bc)" -eq 1 ] || fail "the other function's event waited $waited s"
	[ "$hot_done" -le 4 ] || fail "it ran only after $hot_done of the burst's events"
	wait_for 120 count_at_least 17 'end ([0-9]|1[0-6]) [0-9.]+$' "$TMP/relay.log" || fail "the burst did not finish"
	wait_for 30 nothing_pending || fail "messages left pending"
	! grep -qE 'attempt=[2-9]' "$TMP/relay.log" || fail "an attempt was charged twice"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images df-hot
	rm_fn_images df-cold
}
