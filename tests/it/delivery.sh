# Delivery guarantees of `relay start` against a real redis-server and the
# real Docker daemon: backpressure, a worker killed mid-invocation, Redis
# restarted under load, retention, and two workers sharing 2,000 events.
# Intervals are the binary's fixed ones (reclaim every 1m, idle 1m).

fn() { # name, handler module file, handler body, template
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf '%s' "$3" >"$RELAY_FUNCTIONS_DIR/$1/$2"
	printf '%s' "$4" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}

rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

pending_count() { rcli XPENDING "$REDIS_STREAM" "$REDIS_GROUP" | head -n1; }
# For wait_for, which re-runs a command: these re-read Redis on each try.
nothing_pending() { [ "$(pending_count)" -eq 0 ]; }
xlen_at_most() { [ "$(rcli XLEN "$REDIS_STREAM")" -le "$1" ]; }

cleanup_images() {
	local name
	for name in "$@"; do
		docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$name" | xargs -r docker rmi -f >/dev/null 2>&1
	done
}

relay_env() {
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
}

test_backpressure_bounds_buffer_and_containers() {
	start_redis
	wait_redis_plain
	relay_env
	export MAX_CONCURRENCY=3 MAX_BUFFERED_EVENTS=5
	fn dl-slow slow.py 'import time
def handler(event):
    time.sleep(0.3)
    print("done", event["n"])
' 'runtime: python3.14
concurrency: 8
events:
  - handler: slow.handler
    pattern: {kind: [slow]}
'
	local i
	for i in $(seq 1 200); do echo "XADD events * event '{\"kind\":\"slow\",\"n\":$i}'"; done | rcli >/dev/null
	rcli XGROUP CREATE events relay 0 >/dev/null
	start_relay_as "$TMP/relay.log" bp-worker
	local max_pel=0 max_ctr=0 p c done=0
	for i in $(seq 1 900); do
		p=$(pending_count)
		c=$(docker ps -q --filter label=relay.function=dl-slow | wc -l)
		[ "$p" -gt "$max_pel" ] && max_pel=$p
		[ "$c" -gt "$max_ctr" ] && max_ctr=$c
		done=$(grep -c 'msg="handler executed" function=dl-slow' "$TMP/relay.log")
		[ "$done" -ge 200 ] && [ "$p" -eq 0 ] && break
		sleep 0.2
	done
	echo "max pending entries $max_pel (limit 5), max containers $max_ctr (limit 3), executed $done"
	[ "$done" -eq 200 ] || fail "executed $done of 200"
	[ "$max_pel" -le 5 ] || fail "pending entries reached $max_pel > MAX_BUFFERED_EVENTS=5"
	[ "$max_pel" -ge 3 ] || fail "pending entries never above $max_pel: the buffer was not used"
	[ "$max_ctr" -le 3 ] || fail "$max_ctr containers at once > MAX_CONCURRENCY=3"
	[ "$max_ctr" -ge 2 ] || fail "never more than $max_ctr container at once"
	[ "$(pending_count)" -eq 0 ] || fail "messages left pending"
	stop_relay_pid "$RELAY_PID"
	cleanup_images dl-slow
}

test_worker_killed_mid_invocation_is_recovered_by_another() {
	start_redis
	wait_redis_plain
	relay_env
	fn dl-long long.py 'import time
def handler(event):
    print("start", event["event_id"], flush=True)
    time.sleep(3)
    print("finished", event["event_id"])
' 'runtime: python3.14
events:
  - handler: long.handler
    pattern: {kind: [long]}
    timeout: 10s
'
	start_relay_as "$TMP/a.log" worker-a
	local pid_a=$RELAY_PID
	rcli XADD events '*' event '{"kind":"long","event_id":"evt-k9"}' >/dev/null
	wait_for 30 grep -q 'start evt-k9' "$TMP/a.log" || fail "worker-a never started the handler"
	kill9_relay_pid "$pid_a"
	sleep 0.5
	[ "$(pending_count)" -eq 1 ] || fail "the message is not pending after the crash"
	rcli XPENDING events relay - + 10 | grep -q worker-a || fail "worker-a does not own the pending entry"
	start_relay_as "$TMP/b.log" worker-b
	# reclaim runs every minute for entries idle over a minute
	wait_for 170 grep -q 'finished evt-k9' "$TMP/b.log" || fail "worker-b did not complete the message: $(tail -n 20 "$TMP/b.log")"
	wait_for 10 nothing_pending || fail "still pending after worker-b completed it"
	grep -q 'handler executed.*attempt=2' "$TMP/b.log" || fail "the redelivery was not attempt 2"
	[ "$(rcli XLEN relay:events:dlq)" -eq 0 ] || fail "dead-lettered"
	stop_relay_pid "$RELAY_PID"
	cleanup_images dl-long
}

test_redis_restart_under_load_loses_nothing() {
	start_redis --appendonly yes --appendfsync always
	wait_redis_plain
	relay_env
	fn dl-echo echo.py 'def handler(event):
    print("handled", event["event_id"])
' 'runtime: python3.14
concurrency: 4
events:
  - handler: echo.handler
    pattern: {kind: [echo]}
'
	start_relay_as "$TMP/relay.log" restart-worker
	local i
	for i in $(seq 1 60); do echo "XADD events * event '{\"kind\":\"echo\",\"event_id\":\"e$i\"}'"; done | rcli >/dev/null
	wait_for 60 grep -q 'handled e5$' "$TMP/relay.log" || fail "nothing handled before the restart"
	local port=$REDIS_PORT
	kill -TERM "$REDIS_PID"
	wait "$REDIS_PID" 2>/dev/null
	sleep 2
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly yes --appendfsync always \
		--dir "$TMP/redis-$port" >>"$TMP/redis-$port.log" 2>&1 &
	REDIS_PID=$!
	track "$REDIS_PID"
	wait_redis_plain
	for i in $(seq 61 100); do echo "XADD events * event '{\"kind\":\"echo\",\"event_id\":\"e$i\"}'"; done | rcli >/dev/null
	local missing=100
	for _ in $(seq 1 200); do
		missing=0
		for i in $(seq 1 100); do grep -q "handled e$i\$" "$TMP/relay.log" || missing=$((missing + 1)); done
		[ "$missing" -eq 0 ] && [ "$(pending_count)" -eq 0 ] && break
		sleep 1
	done
	local dup
	dup=$(grep -o 'handled e[0-9]*$' "$TMP/relay.log" | sort | uniq -d | wc -l)
	echo "events handled more than once across the restart: $dup"
	[ "$missing" -eq 0 ] || fail "$missing event(s) lost across the Redis restart"
	[ "$(pending_count)" -eq 0 ] || fail "messages left pending"
	grep -q 'redis connection restored' "$TMP/relay.log" || grep -q 'reconnect' "$TMP/relay.log" ||
		fail "no reconnect was logged"
	stop_relay_pid "$RELAY_PID"
	cleanup_images dl-echo
}

test_retention_trims_old_entries_and_keeps_new_ones() {
	start_redis
	wait_redis_plain
	relay_env
	export REDIS_STREAM_RETENTION=1h
	rcli CONFIG SET stream-node-max-entries 4 >/dev/null
	local old=$(( ($(date +%s) - 7200) * 1000 )) i
	for i in $(seq 1 40); do echo "XADD events $old-$i event '{\"old\":$i}'"; done | rcli >/dev/null
	for i in $(seq 1 10); do rcli XADD events '*' event "{\"new\":$i}" >/dev/null; done
	local new_ids
	new_ids=$(rcli XRANGE events - + | grep -E '^[0-9]+-[0-9]+$' | tail -n 10)
	start_relay_as "$TMP/relay.log" retention-worker
	wait_for 20 xlen_at_most 14 || fail "stream not trimmed: XLEN $(rcli XLEN events)"
	local id
	for id in $new_ids; do
		[ -n "$(rcli XRANGE events "$id" "$id")" ] || fail "new entry $id was trimmed"
	done
	grep -q 'msg="stream retention enabled"' "$TMP/relay.log" || fail "no retention line"
	stop_relay_pid "$RELAY_PID"
}

test_two_workers_share_2000_events() {
	start_redis
	wait_redis_plain
	relay_env
	export LOG_LEVEL=DEBUG MAX_BUFFERED_EVENTS=32
	fn dl-pick pick.py 'def handler(event):
    print("picked", event["event_id"])
' 'runtime: python3.14
concurrency: 4
events:
  - handler: pick.handler
    pattern: {kind: [pick]}
'
	rcli XGROUP CREATE events relay 0 MKSTREAM >/dev/null
	start_relay_as "$TMP/w1.log" worker-1
	local p1=$RELAY_PID
	start_relay_as "$TMP/w2.log" worker-2
	local p2=$RELAY_PID
	local i
	for i in $(seq 1 2000); do
		if [ $((i % 40)) -eq 0 ]; then
			echo "XADD events * event '{\"kind\":\"pick\",\"event_id\":\"p$i\"}'"
		else
			echo "XADD events * event '{\"kind\":\"none\",\"event_id\":\"n$i\"}'"
		fi
	done | rcli >/dev/null
	rcli XRANGE events - + | grep -E '^[0-9]+-[0-9]+$' | sort >"$TMP/ids"
	[ "$(wc -l <"$TMP/ids")" -eq 2000 ] || fail "XADD produced $(wc -l <"$TMP/ids") entries"
	all_done() {
		[ "$(cat "$TMP/w1.log" "$TMP/w2.log" | grep -c 'picked p')" -ge 50 ] &&
			[ "$(pending_count)" = 0 ] &&
			[ "$(rcli XINFO GROUPS events | sed -n '/^lag$/{n;p}')" = 0 ]
	}
	wait_for 240 all_done || fail "not all events were handled in time"
	stop_relay_pid "$p1"
	stop_relay_pid "$p2"
	# Every message: acknowledged without a match, or its handler ran.
	grep -h -o 'msg="no rule matched; acknowledging" message_id=[0-9-]*' "$TMP/w1.log" "$TMP/w2.log" |
		sed 's/.*message_id=//' >"$TMP/acked"
	grep -h -o 'msg="handler executed" function=dl-pick handler=pick.handler message_id=[0-9-]*' \
		"$TMP/w1.log" "$TMP/w2.log" | sed 's/.*message_id=//' >>"$TMP/acked"
	local lost dups w1 w2
	lost=$(sort -u "$TMP/acked" | comm -23 "$TMP/ids" - | wc -l)
	dups=$(sort "$TMP/acked" | uniq -d | wc -l)
	w1=$(grep -c 'message_id=' "$TMP/w1.log")
	w2=$(grep -c 'message_id=' "$TMP/w2.log")
	echo "2000 events: lost $lost, handled more than once $dups; log lines with ids: worker-1 $w1, worker-2 $w2"
	[ "$lost" -eq 0 ] || fail "$lost event(s) never handled"
	[ "$(cat "$TMP/w1.log" "$TMP/w2.log" | grep -c 'picked p')" -ge 50 ] || fail "handlers missing"
	grep -q 'message_id=' "$TMP/w1.log" || fail "worker-1 handled nothing"
	grep -q 'message_id=' "$TMP/w2.log" || fail "worker-2 handled nothing"
	[ "$(rcli XLEN relay:events:dlq)" -eq 0 ] || fail "dead-lettered"
	cleanup_images dl-pick
}
