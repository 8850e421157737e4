# Hostile stream entries against `relay start`,
# with a real redis-server and the real Docker daemon: producers with the
# ACL of docs/redis-acl.md (XADD on the stream, nothing else) and Relay with
# the Relay user of the same page; an occurrence forged by such a producer
# is dead-lettered and runs nothing while its events run; an entry over
# the 64 MiB reply cap is dead-lettered inside Redis and the events after
# it run.

# As the producer of docs/redis-acl.md.
hs_producer() { redis-cli -p "$REDIS_PORT" --user producer --pass producer-pw --no-auth-warning "$@"; }

# hs_dlq_field ID FIELD: FIELD of the DLQ entry for original_id ID.
hs_dlq_field() {
	rcli EVAL "for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local f, m = e[2], {}
		for i = 1, #f - 1, 2 do m[f[i]] = f[i + 1] end
		if m.original_id == ARGV[1] then return m[ARGV[2]] end
	end" 1 relay:events:dlq "$1" "$2"
}

test_a_producer_limited_to_xadd_cannot_forge_a_scheduled_occurrence() {
	redis_up
	# The two ACL lines of docs/redis-acl.md.
	rcli ACL SETUSER relay on '>relay-pw' '~events' '~relay:*' +@all -@dangerous >/dev/null ||
		fail "ACL SETUSER relay"
	rcli ACL SETUSER producer on '>producer-pw' '~events' -@all +xadd >/dev/null || fail "ACL SETUSER producer"
	export REDIS_URI=redis://relay:relay-pw@127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	write_fn hs-acl handlers.py 'def event(e):
    print("EVENT RAN", e["n"])
def cron(e):
    print("CRON HANDLER RAN", e)
' 'runtime: python3.14
events:
  - handler: handlers.event
    pattern: {kind: [hello]}
schedules:
  - handler: handlers.cron
    cron: "0 3 * * *"
'
	start_relay_as "$TMP/relay.log" hs-acl
	! grep -q 'NOPERM' "$TMP/relay.log" ||
		fail "the Relay user of docs/redis-acl.md was refused a command: $(grep NOPERM "$TMP/relay.log")"

	# The producer's events run.
	local eid fid out
	eid=$(hs_producer XADD events '*' event '{"kind":"hello","n":1}')
	[ -n "$eid" ] || fail "the producer cannot XADD"
	wait_for 120 acked_through "$REDIS_PORT" events relay "$eid" || fail "the producer's event was not processed: $(tail -n 20 "$TMP/relay.log")"
	wait_for 10 grep -q 'EVENT RAN 1' "$TMP/relay.log" || fail "the producer's event did not run"

	# It cannot write (or read) a dedup key...
	local key='relay:schedule:schedule:hs-acl:handlers.cron:2026-03-29T03:00:00Z'
	out=$(hs_producer SET "$key" x 2>&1)
	[[ "$out" == NOPERM* ]] || fail "the producer could SET $key: $out"
	out=$(hs_producer GET "$key" 2>&1)
	[[ "$out" == NOPERM* ]] || fail "the producer could GET $key: $out"
	[ "$(rcli EXISTS "$key")" = 0 ] || fail "$key exists"

	# ...so an occurrence it forges for the cron-only handler, envelope and
	# all, is dead-lettered and runs nothing.
	# (exactly what a publication would write, in the original's format)
	local forged='{"function":"hs-acl","handler":"handlers.cron","occurrence_id":"schedule:hs-acl:handlers.cron:2026-03-29T03:00:00Z","scheduled_at":"2026-03-29T03:00:00Z","source":"relay.schedule"}'
	fid=$(hs_producer XADD events '*' event "$forged")
	[ -n "$fid" ] || fail "the producer cannot XADD the forged entry"
	wait_for 60 acked_through "$REDIS_PORT" events relay "$fid" || fail "the forged entry was not dealt with: $(tail -n 20 "$TMP/relay.log")"
	[ "$(hs_dlq_field "$fid" reason)" = "forged schedule occurrence" ] ||
		fail "no DLQ entry 'forged schedule occurrence' for $fid: $(rcli XRANGE relay:events:dlq - +)"
	[ "$(hs_dlq_field "$fid" event)" = "$forged" ] ||
		fail "the DLQ entry does not keep the forged payload"
	grep -q "msg=\"forged schedule occurrence sent to the dead-letter stream without running any handler\" message_id=$fid" "$TMP/relay.log" ||
		fail "no WARN line for the forged entry"
	! grep -q 'CRON HANDLER RAN' "$TMP/relay.log" || fail "the forged occurrence ran the cron handler"
	! grep -q 'function=hs-acl handler=handlers.cron' "$TMP/relay.log" || fail "the cron handler was started"
	! grep -q 'relay: function "hs-acl" schedule "handlers.cron"' "$TMP/relay.log" || fail "the cron handler was considered"

	# Events still run after it.
	eid=$(hs_producer XADD events '*' event '{"kind":"hello","n":2}')
	wait_for 120 acked_through "$REDIS_PORT" events relay "$eid" || fail "the next event was not processed"
	wait_for 10 grep -q 'EVENT RAN 2' "$TMP/relay.log" || fail "the next event did not run"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images hs-acl
}

test_an_entry_over_the_reply_cap_is_dead_lettered_and_reading_goes_on() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	write_fn hs-big handlers.py 'def event(e):
    print("EVENT RAN", e["n"])
' 'runtime: python3.14
events:
  - handler: handlers.event
    pattern: {kind: [hello]}
'
	start_relay_as "$TMP/relay.log" hs-big
	# 65 MiB, built inside Redis: more than any reply Relay reads (64 MiB).
	local big first last size=$((65 * 1024 * 1024))
	first=$(rcli XADD events '*' event '{"kind":"hello","n":1}')
	big=$(rcli EVAL "return redis.call('XADD', KEYS[1], '*', 'event', '{\"kind\":\"hello\",\"pad\":\"' .. string.rep('x', tonumber(ARGV[1])) .. '\"}')" 1 events "$size")
	last=$(rcli XADD events '*' event '{"kind":"hello","n":2}')
	[ -n "$big" ] && [ -n "$last" ] || fail "cannot add the entries"
	wait_for 120 acked_through "$REDIS_PORT" events relay "$last" || fail "reading stopped at the big entry: $(tail -n 20 "$TMP/relay.log")"
	wait_for 10 grep -q 'EVENT RAN 2' "$TMP/relay.log" || fail "the event after it did not run"
	grep -q 'EVENT RAN 1' "$TMP/relay.log" || fail "the event before it did not run"
	[ "$(hs_dlq_field "$big" reason)" = "event too large" ] || fail "no DLQ entry 'event too large' for $big"
	[ "$(hs_dlq_field "$big" size)" = $((size + 30)) ] || fail "DLQ size $(hs_dlq_field "$big" size), want $((size + 30))"
	[ "$(hs_dlq_field "$big" event)" = "" ] || fail "the DLQ entry carries a body"
	[ "$(rcli XLEN relay:events:dlq)" = 1 ] || fail "DLQ has $(rcli XLEN relay:events:dlq) entries, want 1"
	grep -q "msg=\"event too large: sent to the dead-letter stream without reading it\" message_id=$big size=$((size + 30))" "$TMP/relay.log" ||
		fail "no WARN line for the big entry"
	! grep -q 'reply larger than' "$TMP/relay.log" || fail "a reply over the cap was read"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images hs-big
}
