# Redelivery by the reclaim of `relay start`, against a real redis-server
# and the real Docker daemon: a worker killed mid-invocation, a second
# signal that cancels the handler, and a pending entry that retention
# trimmed away. Each waits for the binary's fixed intervals (reclaim every
# 1m, for entries idle over 1m), so the file spends most of its time
# asleep; it is apart from delivery.sh so that a lane can run it beside
# other files.

source "$ROOT/tests/it/delivery.bash"

test_worker_killed_mid_invocation_is_recovered_by_another() {
	export LOG_LEVEL=DEBUG # the per-invocation records (attempt=N) are DEBUG
	redis_up
	relay_env
	write_fn dl-long long.py 'import time
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
	wait_for 10 pending_is 1 || fail "the message is not pending after the crash: $(pending_count)"
	rcli XPENDING events relay - + 10 | grep -q worker-a || fail "worker-a does not own the pending entry"
	start_relay_as "$TMP/b.log" worker-b
	# reclaim runs every minute for entries idle over a minute
	wait_for 240 grep -q 'finished evt-k9' "$TMP/b.log" || fail "worker-b did not complete the message: $(tail -n 20 "$TMP/b.log")"
	wait_for 10 nothing_pending || fail "still pending after worker-b completed it"
	grep -q 'handler executed.*attempt=2' "$TMP/b.log" || fail "the redelivery was not attempt 2"
	# At-least-once allows the one invocation in flight at the crash to run
	# again, once: started on each worker, finished only on worker-b.
	[ "$(cat "$TMP/a.log" "$TMP/b.log" | grep -c ': start evt-k9$')" -eq 2 ] || fail "evt-k9 did not start exactly twice"
	[ "$(cat "$TMP/a.log" "$TMP/b.log" | grep -c ': finished evt-k9$')" -eq 1 ] || fail "evt-k9 did not finish exactly once"
	[ "$(rcli XLEN relay:events:dlq)" -eq 0 ] || fail "dead-lettered"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images dl-long
}

# A second signal stops the running container at once: not an attempt. The
# message stays pending with its marker put back as it was before the
# attempt (here: absent), so the redelivery, by the same worker restarted,
# runs it as attempt 1 again.
test_second_signal_cancels_the_handler_and_the_redelivery_keeps_attempt_1() {
	export LOG_LEVEL=DEBUG # the per-invocation records (attempt=N) are DEBUG
	redis_up
	relay_env
	long_fn dl-cancel 20
	start_relay_as "$TMP/a.log" cancel-worker
	local pid=$RELAY_PID id key
	id=$(rcli XADD events '*' event '{"kind":"long","event_id":"c1"}')
	key=$(inv_key "$id")
	wait_for 60 grep -qF ': start c1' "$TMP/a.log" || fail "the handler never started"
	rcli HGET "$key" dl-cancel/long.handler | grep -qE '^running:[0-9]+#1$' ||
		fail "no running marker for attempt 1 while the handler runs"
	kill -TERM "$pid"
	wait_for 10 grep -qF 'msg="Relay stopping: finishing in-flight invocations"' "$TMP/a.log" ||
		fail "the first SIGTERM was not logged"
	kill -TERM "$pid"
	# The second signal exits 1 at once (start.c), without waiting for handlers.
	reap_relay "$pid" 1 || fail "relay after the second signal"
	grep -qF 'level=WARN msg="second signal: stopping running containers and exiting now" signal=SIGTERM' "$TMP/a.log" ||
		fail "no 'second signal' line"
	grep -qE "level=INFO msg=\"invocation cancelled by shutdown; the message stays pending\" function=dl-cancel handler=long.handler message_id=$id event_id=c1 event_name=\"\" attempt=1 " \
		"$TMP/a.log" || fail "no 'invocation cancelled' line for attempt 1"
	! grep -qF ': finished c1' "$TMP/a.log" || fail "the handler finished: it was not stopped"
	wait_for 10 no_containers_of dl-cancel || fail "the container is still there: $(docker ps -a --filter label=relay.function=dl-cancel)"
	pending_is 1 || fail "the message is not pending: $(pending_count)"
	rcli XPENDING events relay - + 10 | grep -qx cancel-worker || fail "cancel-worker does not own the pending entry"
	[ "$(rcli HEXISTS "$key" dl-cancel/long.handler)" = 0 ] ||
		fail "the marker was not restored (still $(rcli HGET "$key" dl-cancel/long.handler))"
	# The same worker restarted: its reclaim (every 1m, idle over 1m)
	# delivers the message again.
	start_relay_as "$TMP/b.log" cancel-worker
	wait_for 170 grep -qF 'msg="handler executed" function=dl-cancel' "$TMP/b.log" ||
		fail "the redelivery did not complete: $(tail -n 5 "$TMP/b.log")"
	grep -qE "msg=\"handler executed\" function=dl-cancel handler=long.handler message_id=$id event_id=c1 event_name=\"\" attempt=1 " \
		"$TMP/b.log" || fail "the redelivery was not attempt 1: $(grep -F 'handler executed' "$TMP/b.log")"
	grep -qF ': finished c1' "$TMP/b.log" || fail "the redelivered handler did not run to its end"
	# At-least-once allows the cancelled invocation one more run: c1
	# started once per relay and finished once.
	[ "$(cat "$TMP/a.log" "$TMP/b.log" | grep -c ': start c1$')" -eq 2 ] || fail "c1 did not start exactly twice"
	[ "$(cat "$TMP/a.log" "$TMP/b.log" | grep -c ': finished c1$')" -eq 1 ] || fail "c1 did not finish exactly once"
	wait_for 10 all_acked_up_to "$id" || fail "not acknowledged after the redelivery"
	[ "$(rcli EXISTS "$key")" = 0 ] || fail "the invocation state was not deleted"
	[ "$(rcli XLEN relay:events:dlq)" = 0 ] || fail "dead-lettered"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images dl-cancel
}

# Retention trims a message that is still pending (its handler failed and
# waits out the 1m backoff). Nothing can run it any more: the reclaim drops
# it from the group with one WARN, deletes its invocation state, and writes
# no DLQ entry; the handler never runs again.
test_pending_entry_trimmed_by_retention_is_dropped_without_dlq() {
	export LOG_LEVEL=DEBUG # the per-invocation records (attempt=N) are DEBUG
	redis_up
	relay_env
	export REDIS_STREAM_RETENTION=1h
	# One entry per stream node, so the approximate trim (~) removes it.
	rcli CONFIG SET stream-node-max-entries 1 >/dev/null
	write_fn dl-trim fail.py 'def handler(event):
    print("attempt", event["event_id"], flush=True)
    raise RuntimeError("always fails")
' 'runtime: python3.14
events:
  - handler: fail.handler
    pattern: {kind: [trim]}
'
	# Two hours old: past the window as soon as the relay trims.
	local id="$((($(date +%s) - 7200) * 1000))-1" key
	key=$(inv_key "$id")
	rcli XGROUP CREATE events relay 0 MKSTREAM >/dev/null
	rcli XADD events "$id" event '{"kind":"trim","event_id":"old-1"}' >/dev/null
	start_relay_as "$TMP/a.log" trim-worker
	wait_for 60 grep -qF "msg=\"handler failed; retrying in 1m0s: " "$TMP/a.log" ||
		fail "the handler did not fail once: $(tail -n 5 "$TMP/a.log")"
	# Relay's own retention (first trim 5 s after start) removes the entry.
	wait_for 30 xlen_at_most 0 || fail "retention did not trim the entry: XLEN $(rcli XLEN events)"
	pending_is 1 || fail "the trimmed message is not pending: $(pending_count)"
	rcli HGET "$key" dl-trim/fail.handler | grep -qE '^next_attempt_at:[0-9]+#1$' ||
		fail "no backoff marker: $(rcli HGETALL "$key")"
	# Restarted, the worker's first reclaim (1m after start) finds the entry
	# idle over 1m; without a restart that would take a second tick.
	stop_relay_pid "$RELAY_PID"
	start_relay_as "$TMP/b.log" trim-worker
	local gone="level=WARN msg=\"pending message no longer in the stream (trimmed or deleted); dropped without running or dead-lettering it\" stream=events group=relay message_id=$id"
	wait_for 170 log_has_line "$gone" "$TMP/b.log" ||
		fail "no WARN for the dropped message: $(grep -v DEBUG "$TMP/b.log" | tail -n 5)"
	wait_for 10 nothing_pending || fail "still pending: $(pending_count)"
	wait_for 10 key_absent "$key" || fail "the invocation state is left: $(rcli HGETALL "$key")"
	[ "$(rcli EXISTS relay:events:dlq)" = 0 ] || fail "a DLQ entry was written: $(rcli XRANGE relay:events:dlq - +)"
	[ "$(cat "$TMP/a.log" "$TMP/b.log" | grep -c ': attempt old-1$')" -eq 1 ] || fail "the handler ran again"
	[ "$(grep -cF 'pending message no longer in the stream' "$TMP/b.log")" -eq 1 ] || fail "the drop was logged more than once"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images dl-trim
}
