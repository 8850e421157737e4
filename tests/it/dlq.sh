# relay dlq ls|show|replay|rm against a private redis-server:
#
#   - end to end with relay start and the real Docker daemon: a handler
#     with retries: 0 and malformed events of each kind are dead-lettered
#     (with function and handler), listed (exact table, filters, --json),
#     shown, replayed while the handler still fails (dead-lettered again,
#     the replay count carried), then replayed to a fixed handler that
#     runs them; dlq_replayed_total counts them; rm empties the DLQ;
#   - 100 rounds of two concurrent replays of one entry: exactly one
#     publication each round, the other says it is gone;
#   - the 10-replay guard and --force; --all with filters and --dry-run;
#   - rm asks on a pty and refuses without one;
#   - Redis down, or the stream settings missing: one line, exit 1.
#
# Function names start with "dq-"; the end-to-end test removes its images
# (relay-fn-dq-*) when it ends, passed or failed.


# dq_redis [STREAM]: a private redis and Relay's settings for it.
dq_redis() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=${1:-events} REDIS_GROUP=relay
}

# dq_add ID N [FIELD VALUE]...: a DLQ entry as Relay writes one, at ID, for
# the event {"n":N} of function dq-x, plus the extra fields.
dq_add() {
	local id=$1 n=$2
	shift 2
	rcli XADD "relay:$REDIS_STREAM:dlq" "$id" original_stream "$REDIS_STREAM" original_id "1-$n" \
		group relay consumer w event "{\"n\":$n}" reason "dq-x/h.handler exhausted: boom $n" \
		attempts 1 timestamp 2023-11-14T22:13:20Z function dq-x handler h.handler "$@" >/dev/null ||
		fail "XADD of DLQ entry $id failed"
}

# dq_field KEY ID FIELD: the (last) value of FIELD in entry ID of stream KEY.
dq_field() {
	rcli EVAL "local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
		if not e then return nil end
		local v
		for i = 1, #e[2] - 1, 2 do if e[2][i] == ARGV[2] then v = e[2][i + 1] end end
		return v" 1 "$1" "$2" "$3"
}

dq_ids() { # KEY: the ids of the stream's entries, oldest first
	rcli EVAL "local ids = {}
		for i, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do ids[i] = e[1] end
		return ids" 1 "$1" | paste -sd' '
}
dq_len() { rcli XLEN "$1"; }
dq_len_is() { [ "$(dq_len "$1")" = "$2" ]; }

dq_rmi() {
	local name
	for name in "$@"; do
		docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$name" | xargs -r docker rmi >/dev/null 2>&1
	done
	return 0
}

# dq_pyfn NAME BODY: a Python function, retries: 0, for events whose "fn" is NAME.
dq_pyfn() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	mkdir -p "$d"
	printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {fn: [%s]}\n    retries: 0\n' \
		"$1" >"$d/template.yaml"
	printf '%s' "$2" >"$d/main.py"
}

dq_out_seen() { # log text: a forwarded output line of dq-e2e's handler
	grep -qE "^relay: function \"dq-e2e\" handler \"main.handler\"( message \"[^\"]*\")?( event \"[^\"]*\")?: $2\$" "$1"
}

dq_metric() { curl -s --max-time 5 "http://$METRICS_ADDR/metrics" | awk -v s="$1" '$1 == s { print $2 }'; }
dq_metric_is() { [ "$(dq_metric "$1")" = "$2" ]; }

test_dead_letters_from_relay_start_listed_shown_replayed_and_removed() {
	trap 'dq_rc=$?; dq_rmi dq-e2e; (exit "$dq_rc"); it_cleanup' EXIT
	dq_redis events
	export METRICS_ADDR=127.0.0.1:$(free_port)
	local dlq=relay:events:dlq log=$TMP/relay.log
	dq_pyfn dq-e2e 'def handler(event):
    raise RuntimeError("boom " + event["n"])
'
	rcli XGROUP CREATE events relay 0 MKSTREAM >/dev/null
	start_relay_as "$log" dq-e2e-host
	# One at a time, so that the DLQ's order is known.
	local o1 o2 m1 m2 m3
	o1=$(rcli XADD events '*' event '{"fn":"dq-e2e","n":"1"}')
	wait_for 60 dq_len_is $dlq 1 || fail "event 1 not dead-lettered: $(tail -n 20 "$log")"
	m1=$(rcli XADD events '*' event 'not json')
	wait_for 20 dq_len_is $dlq 2 || fail "not json not dead-lettered"
	m2=$(rcli XADD events '*' event '[1,2]')
	wait_for 20 dq_len_is $dlq 3 || fail "an array not dead-lettered"
	m3=$(rcli XADD events '*' other 'no event field')
	wait_for 20 dq_len_is $dlq 4 || fail "a message without event not dead-lettered"
	o2=$(rcli XADD events '*' event '{"fn":"dq-e2e","n":"2"}')
	wait_for 60 dq_len_is $dlq 5 || fail "event 2 not dead-lettered"
	local ids d1 dm1 dm2 dm3 d2
	ids=$(dq_ids $dlq)
	read -r d1 dm1 dm2 dm3 d2 <<<"$ids"

	# The entries: function and handler after the spec's fields.
	local fields
	fields=$(rcli XRANGE $dlq "$d1" "$d1" | awk 'NR > 1 && NR % 2 == 0' | paste -sd' ')
	# traceparent last: the trace its deliveries were in (docs/operations.md, "Tracing").
	[ "$fields" = "original_stream original_id group consumer event reason attempts timestamp function handler traceparent" ] ||
		fail "DLQ entry fields: $fields"
	[ "$(dq_field $dlq "$d1" function)" = dq-e2e ] || fail "function of $d1"
	[ "$(dq_field $dlq "$d1" handler)" = main.handler ] || fail "handler of $d1"
	[ "$(dq_field $dlq "$dm1" function)" = "" ] && [ "$(dq_field $dlq "$dm1" handler)" = "" ] ||
		fail "a malformed event's entry names a function"
	[ "$(dq_field $dlq "$dm1" reason)" = "malformed event (invalid_json): event is not valid JSON: invalid literal at offset 0" ] ||
		fail "reason of $dm1: $(dq_field $dlq "$dm1" reason)"

	# The exact table: the same entries copied to fixed ids in 2023 (ages
	# read as dates), listed for REDIS_STREAM=copy at 100 columns.
	rcli EVAL "for i, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		redis.call('XADD', KEYS[2], '1700000000000-' .. i, unpack(e[2])) end" 2 $dlq relay:copy:dlq >/dev/null
	REDIS_STREAM=copy COLUMNS=100 run "$RELAY" dlq ls
	assert_status 0
	assert_err_empty
	assert_out_eq "ID               AGE         ORIGINAL         ATTEMPTS  FUNCTION  REASON
1700000000000-5  2023-11-14  $o2  1         dq-e2e    dq-e2e/main.handler exhausted a...
1700000000000-4  2023-11-14  $m3  0         -         malformed event (missing): mess...
1700000000000-3  2023-11-14  $m2  0         -         malformed event (not_object): e...
1700000000000-2  2023-11-14  $m1  0         -         malformed event (invalid_json):...
1700000000000-1  2023-11-14  $o1  1         dq-e2e    dq-e2e/main.handler exhausted a..."
	# --wide: the whole reason (escaped: the traceback's newlines as \n).
	REDIS_STREAM=copy COLUMNS=100 run "$RELAY" dlq ls --wide --limit 1
	assert_status 0
	[ "$(sed -n 2p "$TMP/out")" = "1700000000000-5  2023-11-14  $o2  1         dq-e2e    $(dq_field $dlq "$d2" reason | sed -z 's/\n$//; s/\n/\\n/g')" ] ||
		fail "--wide row: $(sed -n 2p "$TMP/out")"
	REDIS_STREAM=copy run "$RELAY" dlq ls --since 24h
	assert_out_eq "ID  AGE  ORIGINAL  ATTEMPTS  FUNCTION  REASON"

	# Filters on the live DLQ, newest first.
	run "$RELAY" dlq ls --function dq-e2e
	[ "$(awk 'NR > 1 { print $1 }' "$TMP/out" | paste -sd' ')" = "$d2 $d1" ] || fail "--function: $(cat "$TMP/out")"
	run "$RELAY" dlq ls --reason 'malformed event'
	[ "$(awk 'NR > 1 { print $1 }' "$TMP/out" | paste -sd' ')" = "$dm3 $dm2 $dm1" ] || fail "--reason: $(cat "$TMP/out")"
	run "$RELAY" dlq ls --limit 2 --since 1h
	[ "$(awk 'NR > 1 { print $1 }' "$TMP/out" | paste -sd' ')" = "$d2 $dm3" ] || fail "--limit 2: $(cat "$TMP/out")"
	[ "$(awk -F '  +' 'NR == 2 { print $2 }' "$TMP/out")" != "" ] &&
		awk -F '  +' 'NR == 2 { exit !($2 ~ /^[0-9]+s ago$/) }' "$TMP/out" || fail "AGE of a fresh entry: $(cat "$TMP/out")"

	# --json, parsed.
	run "$RELAY" dlq ls --json
	assert_status 0
	jq -e --arg d2 "$d2" --arg o2 "$o2" --arg dm1 "$dm1" 'length == 5 and
		.[0].id == $d2 and .[0].original_id == $o2 and .[0].original_stream == "events" and
		.[0].attempts == 1 and .[0].function == "dq-e2e" and .[0].handler == "main.handler" and
		(.[0].reason | startswith("dq-e2e/main.handler exhausted after 1 attempt(s): ")) and
		.[0].replays == 0 and (.[0].age_seconds | type) == "number" and
		(.[0].dead_lettered_at | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")) and
		.[3].id == $dm1 and .[3].function == "" and .[3].attempts == 0' "$TMP/out" >/dev/null ||
		fail "ls --json: $(cat "$TMP/out")"
	REDIS_STREAM=copy run "$RELAY" dlq ls --json --since 1h
	assert_out_eq "[]"

	# show: every field, the event pretty-printed, what it matches now.
	run "$RELAY" dlq show "$d1"
	assert_status 0
	assert_err_empty
	grep -qxE "Dead-lettered:    [0-9T:-]+Z \([0-9]+s ago\)" "$TMP/out" || fail "show: no Dead-lettered line"
	[ "$(sed -n '3,6p;8p;10,11p' "$TMP/out")" = "original_stream:  events
original_id:      $o1
group:            relay
consumer:         dq-e2e-host
attempts:         1
function:         dq-e2e
handler:          main.handler" ] || fail "show fields: $(cat "$TMP/out")"
	grep -qxE "traceparent:      00-[0-9a-f]{32}-[0-9a-f]{16}-01" <(sed -n 12p "$TMP/out") || fail "show: no traceparent line: $(cat "$TMP/out")"
	[ "$(sed -n '13,$p' "$TMP/out")" = "$(printf '\nEvent:\n{\n  "fn": "dq-e2e",\n  "n": "1"\n}\n\nMatches now:\n  dq-e2e\tmain.handler')" ] ||
		fail "show event and matches: $(cat "$TMP/out")"
	run "$RELAY" dlq show "$dm1"
	assert_status 0
	[ "$(sed -n '/^Event/,$p' "$TMP/out")" = "Event (not JSON, escaped):
not json

Matches now:
  (not evaluated: no decodable event; a replay would be refused)" ] || fail "show malformed: $(cat "$TMP/out")"
	run "$RELAY" dlq show --json "$d1"
	jq -e --arg d1 "$d1" --arg o1 "$o1" '.id == $d1 and .original_id == $o1 and .function == "dq-e2e" and
		.event == {"fn": "dq-e2e", "n": "1"} and .fields.attempts == "1" and .fields.consumer == "dq-e2e-host" and
		.matches == [{"function": "dq-e2e", "handler": "main.handler"}]' "$TMP/out" >/dev/null ||
		fail "show --json: $(cat "$TMP/out")"
	run "$RELAY" dlq show --json "$dm3"
	jq -e '.event == null and .matches == null and .fields.event == ""' "$TMP/out" >/dev/null ||
		fail "show --json of a message without event: $(cat "$TMP/out")"

	# Malformed entries are refused, with the reason.
	run "$RELAY" dlq replay "$dm2"
	assert_status 1
	assert_err_lines 1
	assert_err_contains "relay: dlq replay: $dm2: refused: no decodable event (malformed event (not_object): "
	dq_len_is $dlq 5 || fail "a refused replay changed the DLQ"

	# Replayed while the handler still fails: dead-lettered again, the
	# replay count and origin carried into the new entry.
	run "$RELAY" dlq replay "$d2"
	assert_status 0
	grep -qxE "$d2 replayed as [0-9]+-[0-9]+ on events \(replay 1\)" "$TMP/out" || fail "replay: $(cat "$TMP/out")"
	local r1
	r1=$(awk '{ print $4 }' "$TMP/out")
	[ "$(dq_field events "$r1" event)" = '{"fn":"dq-e2e","n":"2"}' ] || fail "the replayed message's event"
	[ "$(dq_field events "$r1" relay_replay_of)" = "$d2" ] || fail "relay_replay_of"
	[ "$(dq_field events "$r1" relay_replays)" = 1 ] || fail "relay_replays"
	wait_for 60 eval '[ "$(dq_ids $dlq | wc -w)" = 5 ] && ! dq_ids $dlq | grep -qw "$d2"' ||
		fail "the replay was not dead-lettered again: $(dq_ids $dlq)"
	local d2b
	d2b=$(dq_ids $dlq | awk '{ print $NF }')
	[ "$(dq_field $dlq "$d2b" original_id)" = "$r1" ] || fail "the new entry's original_id"
	[ "$(dq_field $dlq "$d2b" relay_replays)" = 1 ] || fail "relay_replays not carried into the DLQ"
	[ "$(dq_field $dlq "$d2b" relay_replay_of)" = "$d2" ] || fail "relay_replay_of not carried into the DLQ"
	wait_for 10 dq_metric_is dlq_replayed_total 1 || fail "dlq_replayed_total $(dq_metric dlq_replayed_total), want 1"

	# The handler fixed: --all --function replays both events to it.
	dq_pyfn dq-e2e 'def handler(event):
    print("fixed " + event["n"])
'
	wait_for 120 grep -qF 'msg="function updated" function=dq-e2e' "$log" || fail "dq-e2e not updated: $(tail -n 20 "$log")"
	run "$RELAY" dlq replay --all --function dq-e2e
	assert_status 0
	assert_err_empty
	grep -qxE "$d2b replayed as [0-9]+-[0-9]+ on events \(replay 2\)" "$TMP/out" &&
		grep -qxE "$d1 replayed as [0-9]+-[0-9]+ on events \(replay 1\)" "$TMP/out" &&
		[ "$(wc -l <"$TMP/out")" = 2 ] || fail "replay --all: $(cat "$TMP/out")"
	wait_for 60 dq_out_seen "$log" "fixed 1" || fail "the fixed handler did not run event 1"
	wait_for 60 dq_out_seen "$log" "fixed 2" || fail "the fixed handler did not run event 2"
	wait_for 10 eval '[ "$(rcli XPENDING events relay | head -n1)" = 0 ]' || fail "replays not acknowledged"
	[ "$(dq_ids $dlq)" = "$dm1 $dm2 $dm3" ] || fail "DLQ after the replays: $(dq_ids $dlq)"
	wait_for 10 dq_metric_is dlq_replayed_total 3 || fail "dlq_replayed_total $(dq_metric dlq_replayed_total), want 3"
	# Replaying it again: gone.
	run "$RELAY" dlq replay "$d1"
	assert_status 1
	assert_err_lines 1
	assert_err_contains "relay: dlq replay: $d1: gone (replayed or removed meanwhile)"
	# rm the malformed ones: the DLQ is empty.
	run "$RELAY" dlq rm --all --reason 'malformed event' --yes
	assert_status 0
	assert_out_eq "deleted 3 entries"
	dq_len_is $dlq 0 || fail "DLQ not empty after rm"
	run "$RELAY" dlq ls
	assert_out_eq "ID  AGE  ORIGINAL  ATTEMPTS  FUNCTION  REASON"
	stop_relay_pid "$RELAY_PID"
}

test_concurrent_replays_of_one_entry_publish_it_once() {
	dq_redis events
	local i a b ra rb
	for i in $(seq 1 100); do dq_add "1700000000000-$i" "$i"; done
	for i in $(seq 1 100); do
		"$RELAY" dlq replay "1700000000000-$i" >"$TMP/a.out" 2>"$TMP/a.err" &
		a=$!
		"$RELAY" dlq replay "1700000000000-$i" >"$TMP/b.out" 2>"$TMP/b.err" &
		b=$!
		wait "$a"
		ra=$?
		wait "$b"
		rb=$?
		sanitizer_clean "$TMP"/[ab].{out,err} || fail "round $i: sanitizer report"
		[ $((ra + rb)) = 1 ] && [ $((ra * rb)) = 0 ] || fail "round $i: exit statuses $ra and $rb, want 0 and 1"
		[ "$(cat "$TMP"/[ab].err)" = "relay: dlq replay: 1700000000000-$i: gone (replayed or removed meanwhile)" ] ||
			fail "round $i: stderr: $(cat "$TMP"/[ab].err)"
		[ "$(dq_len events)" = "$i" ] || fail "round $i: the stream has $(dq_len events) messages, want $i"
	done
	dq_len_is relay:events:dlq 0 || fail "DLQ not empty"
	[ "$(rcli XRANGE events - + | awk 'p { print; p = 0 } /^relay_replay_of$/ { p = 1 }' | sort -u | wc -l)" = 100 ] ||
		fail "not one publication per entry"
}

test_the_tenth_replay_needs_force() {
	dq_redis events
	dq_add 1700000000000-1 1 relay_replays 9
	dq_add 1700000000000-2 2 relay_replays 10
	run "$RELAY" dlq replay 1700000000000-1
	assert_status 0
	grep -qxE "1700000000000-1 replayed as [0-9]+-[0-9]+ on events \(replay 10\)" "$TMP/out" || fail "replay 10: $(cat "$TMP/out")"
	local id
	id=$(awk '{ print $4 }' "$TMP/out")
	# An entry without a traceparent is replayed into a new trace.
	[[ "$(rcli XRANGE events "$id" "$id" | tail -n +2 | paste -sd' ')" =~ ^'event {"n":1} relay_replay_of 1700000000000-1 relay_replays 10 traceparent 00-'[0-9a-f]{32}-[0-9a-f]{16}-01$ ]] ||
		fail "the published message: $(rcli XRANGE events "$id" "$id")"
	run "$RELAY" dlq replay 1700000000000-2
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = "relay: dlq replay: 1700000000000-2: refused: already replayed 10 times (--force replays it anyway)" ] ||
		fail "stderr: $(cat "$TMP/err")"
	dq_len_is events 1 || fail "a refused replay published"
	run "$RELAY" dlq replay --dry-run --force 1700000000000-2
	assert_status 0
	assert_out_eq "1700000000000-2 would be replayed to events (replay 11)"
	dq_len_is events 1 && dq_len_is relay:events:dlq 1 || fail "--dry-run wrote"
	run "$RELAY" dlq replay --force 1700000000000-2
	assert_status 0
	grep -qxE "1700000000000-2 replayed as [0-9]+-[0-9]+ on events \(replay 11\)" "$TMP/out" || fail "--force: $(cat "$TMP/out")"
	dq_len_is relay:events:dlq 0 || fail "DLQ not empty"
	# A count that is no count (written by hand) is as good as exhausted.
	local bad seq=3
	for bad in inf -1 nan 1e400 x; do
		dq_add "1700000000000-$seq" "$seq" relay_replays "$bad"
		run "$RELAY" dlq replay "1700000000000-$seq"
		assert_status 1
		[ "$(cat "$TMP/err")" = "relay: dlq replay: 1700000000000-$seq: refused: already replayed 1000000000 times (--force replays it anyway)" ] ||
			fail "relay_replays=$bad: $(cat "$TMP/err")"
		seq=$((seq + 1))
	done
	dq_len_is events 2 || fail "a refused replay published"
}

test_replay_all_with_filters_replays_only_the_matching_ones() {
	dq_redis events
	dq_add 1700000000000-1 1
	dq_add 1700000000000-2 2 function dq-y
	dq_add 1700000000000-3 3
	rcli XADD relay:events:dlq 1700000000000-5 original_stream events event 'oops' reason 'malformed event (invalid_json): x' \
		function '' handler '' >/dev/null
	local now
	now=$(rcli XADD relay:events:dlq '*' original_stream events original_id 1-4 event '{"n":4}' \
		reason 'dq-x/h.handler exhausted: timed out' attempts 5 function dq-x handler h.handler)
	run "$RELAY" dlq replay --all --function dq-x --dry-run
	assert_status 0
	assert_out_eq "1700000000000-1 would be replayed to events (replay 1)
1700000000000-3 would be replayed to events (replay 1)
$now would be replayed to events (replay 1)"
	dq_len_is relay:events:dlq 5 && [ "$(dq_len events)" = 0 ] || fail "--dry-run wrote"
	run "$RELAY" dlq replay --all --since 1h
	assert_status 0
	grep -qxE "$now replayed as [0-9]+-[0-9]+ on events \(replay 1\)" "$TMP/out" && [ "$(wc -l <"$TMP/out")" = 1 ] ||
		fail "--since: $(cat "$TMP/out")"
	run "$RELAY" dlq replay --all --reason 'boom 3'
	assert_status 0
	[ "$(wc -l <"$TMP/out")" = 1 ] && grep -q '^1700000000000-3 replayed as' "$TMP/out" || fail "--reason: $(cat "$TMP/out")"
	[ "$(dq_ids relay:events:dlq)" = "1700000000000-1 1700000000000-2 1700000000000-5" ] ||
		fail "DLQ: $(dq_ids relay:events:dlq)"
	# --all: the malformed one is refused, the others still replayed.
	run "$RELAY" dlq replay --all
	assert_status 1
	assert_err_lines 1
	assert_err_contains "relay: dlq replay: 1700000000000-5: refused: no decodable event (malformed event (invalid_json): x)"
	[ "$(wc -l <"$TMP/out")" = 2 ] || fail "--all: $(cat "$TMP/out")"
	[ "$(dq_ids relay:events:dlq)" = 1700000000000-5 ] && dq_len_is events 4 || fail "after --all: $(dq_ids relay:events:dlq)"
	# Usage: IDs and --all, filters without --all, neither.
	run "$RELAY" dlq replay --all 1700000000000-5
	assert_status 2
	assert_err_contains "relay dlq replay: give entry IDs or --all, not both"
	run "$RELAY" dlq replay --function dq-x 1700000000000-5
	assert_status 2
	assert_err_contains "relay dlq replay: --since, --reason and --function go with --all"
	run "$RELAY" dlq rm
	assert_status 2
	assert_err_contains "relay dlq rm: give entry IDs, or --all"
	run "$RELAY" dlq show 12ab
	assert_status 2
	assert_err_contains "relay dlq show: '12ab' is not a complete stream id"
	run "$RELAY" dlq ls --since yesterday
	assert_status 2
	run "$RELAY" dlq show 1-1
	assert_status 1
	[ "$(cat "$TMP/err")" = "relay: dlq show: 1-1: no such entry" ] || fail "show of a missing entry: $(cat "$TMP/err")"
}

test_rm_asks_on_a_terminal_and_refuses_without_one() {
	dq_redis events
	dq_add 1700000000000-1 1
	dq_add 1700000000000-2 2
	dq_add 1700000000000-3 3
	run "$RELAY" dlq rm 1700000000000-1
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = "relay: dlq rm: not deleting 1 entry without a terminal to ask on: pass --yes" ] ||
		fail "stderr: $(cat "$TMP/err")"
	dq_len_is relay:events:dlq 3 || fail "deleted without asking"
	# On a terminal (script gives the command a pty): "n" keeps them.
	local st
	printf 'n\n' | script -qec "'$RELAY' dlq rm --all" /dev/null >"$TMP/pty.out" 2>&1
	st=$?
	[ "$st" = 1 ] || fail "answer n: exit status $st"
	sanitizer_clean "$TMP/pty.out" || fail "sanitizer report"
	grep -qF 'Delete 3 entries? [y/N] ' "$TMP/pty.out" || fail "no prompt: $(cat "$TMP/pty.out")"
	grep -qF 'relay: dlq rm: nothing deleted' "$TMP/pty.out" || fail "answer n: $(cat "$TMP/pty.out")"
	dq_len_is relay:events:dlq 3 || fail "deleted after n"
	printf 'y\n' | script -qec "'$RELAY' dlq rm 1700000000000-1 1700000000000-3" /dev/null >"$TMP/pty.out" 2>&1
	st=$?
	[ "$st" = 0 ] || fail "answer y: exit status $st: $(cat "$TMP/pty.out")"
	grep -qF 'Delete 2 entries? [y/N] ' "$TMP/pty.out" && grep -qF 'deleted 2 entries' "$TMP/pty.out" ||
		fail "answer y: $(cat "$TMP/pty.out")"
	sanitizer_clean "$TMP/pty.out" || fail "sanitizer report"
	[ "$(dq_ids relay:events:dlq)" = 1700000000000-2 ] || fail "DLQ: $(dq_ids relay:events:dlq)"
	# --yes needs no terminal; a missing id is reported.
	run "$RELAY" dlq rm --yes 1700000000000-2 1700000000000-9
	assert_status 1
	assert_out_eq "deleted 1 entry"
	[ "$(cat "$TMP/err")" = "relay: dlq rm: 1700000000000-9: no such entry" ] || fail "stderr: $(cat "$TMP/err")"
	dq_len_is relay:events:dlq 0 || fail "DLQ not empty"
}

test_redis_down_or_stream_unset_is_one_line_and_exit_1() {
	export REDIS_URI=127.0.0.1:$(free_port) REDIS_STREAM=events REDIS_GROUP=relay
	local args words
	for args in "ls" "ls --json" "show 1-1" "show --json 1-1" "replay 1-1" "replay --all" "rm --yes 1-1" "rm --all --yes"; do
		# shellcheck disable=SC2086
		run "$RELAY" dlq $args
		words="dlq ${args%% *}"
		assert_status 1
		assert_out_empty
		assert_err_lines 1
		grep -qE "^relay: $words: cannot reach Redis: .*$REDIS_URI.*Connection refused" "$TMP/err" ||
			fail "dlq $args: $(cat "$TMP/err")"
	done
	unset REDIS_STREAM
	run "$RELAY" dlq ls
	assert_status 1
	assert_out_empty
	assert_err_contains "REDIS_STREAM is required"
	export REDIS_STREAM=events REDIS_GROUP=
	run "$RELAY" dlq ls
	assert_status 1
	assert_out_empty
	assert_err_contains "REDIS_GROUP is required"
	# Nothing was created under the data directory.
	[ ! -e "$RELAY_DATA_DIR" ] || fail "the data directory was created: $(ls -R "$RELAY_DATA_DIR")"
}

# --all holds at most 100,000 ids: a larger DLQ is taken newest first, the
# rest left for the next run, and the exit status says so.
test_all_takes_at_most_100000_entries_per_run() {
	dq_redis events
	# 100,001 entries, written with one pipe (the oldest is 1-1).
	awk 'BEGIN { k = "relay:events:dlq"; for (i = 1; i <= 100001; i++) {
		id = "1-" i; v = "x"
		printf "*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$6\r\nreason\r\n$1\r\n%s\r\n", length(k), k, length(id), id, v } }' |
		rcli --pipe >"$TMP/pipe.out" || fail "pipe: $(cat "$TMP/pipe.out")"
	dq_len_is relay:events:dlq 100001 || fail "DLQ has $(dq_len relay:events:dlq) entries"
	run "$RELAY" dlq rm --all --yes
	assert_status 1
	assert_out_eq "deleted 100000 entries"
	[ "$(cat "$TMP/err")" = "relay: dlq rm: more than 100000 entries match; taking the newest 100000 (run it again for the rest)" ] ||
		fail "stderr: $(cat "$TMP/err")"
	[ "$(dq_ids relay:events:dlq)" = 1-1 ] || fail "left: $(dq_ids relay:events:dlq | head -n 3)"
	run "$RELAY" dlq rm --all --yes
	assert_status 0
	assert_out_eq "deleted 1 entry"
	dq_len_is relay:events:dlq 0 || fail "not empty"
}

# An id without its sequence names a whole millisecond to Redis: refused
# (exit 2, one line), nothing published or deleted.
test_an_id_without_a_sequence_is_refused() {
	dq_redis events
	dq_add 1700000000000-0 0
	dq_add 1700000000000-1 1
	dq_add 1700000000000-2 2
	local words
	for words in "replay" "replay --force" "rm --yes" "show" "show --json"; do
		# shellcheck disable=SC2086
		run "$RELAY" dlq $words 1700000000000
		assert_status 2
		assert_out_empty
		assert_err_lines 1
		[ "$(cat "$TMP/err")" = "relay dlq ${words%% *}: '1700000000000' is not a complete stream id (MS-SEQ, like 1764629249000-0)" ] ||
			fail "dlq $words: $(cat "$TMP/err")"
	done
	for words in "1700000000000-" "-0" "1700000000000-0-0" "+" "-" "1700000000000-0 1700000000000"; do
		# shellcheck disable=SC2086
		run "$RELAY" dlq replay $words
		assert_status 2
		assert_out_empty
	done
	[ "$(dq_ids relay:events:dlq)" = "1700000000000-0 1700000000000-1 1700000000000-2" ] ||
		fail "DLQ: $(dq_ids relay:events:dlq)"
	dq_len_is events 0 || fail "published: $(rcli XRANGE events - +)"
}

# --all replays in stream order (oldest first), as the events came.
test_replay_all_goes_in_stream_order() {
	dq_redis events
	dq_add 1700000000000-1 1
	dq_add 1700000000000-2 2
	dq_add 1700000000001-0 3
	run "$RELAY" dlq replay --all
	assert_status 0
	[ "$(awk '{ print $1 }' "$TMP/out" | paste -sd' ')" = "1700000000000-1 1700000000000-2 1700000000001-0" ] ||
		fail "order: $(cat "$TMP/out")"
	[ "$(rcli XRANGE events - + | awk 'p { print; p = 0 } $0 == "event" { p = 1 }' | paste -sd' ')" = '{"n":1} {"n":2} {"n":3}' ] ||
		fail "published: $(rcli XRANGE events - +)"
}

# dlq_replayed_total counts the messages relay dlq replay published, not a
# producer's message that carries relay_replay_of itself.
test_a_forged_replay_field_is_not_counted() {
	dq_redis events
	export METRICS_ADDR=127.0.0.1:$(free_port)
	rcli XGROUP CREATE events relay 0 MKSTREAM >/dev/null
	start_relay_as "$TMP/relay.log" dq-forged-host
	rcli XADD events '*' event '{"n":1}' relay_replay_of 1700000000000-1 relay_replays 1 >/dev/null
	rcli XADD events '*' event '{"n":2}' relay_replay_of 1700000000000-2 >/dev/null
	wait_for 20 dq_metric_is events_received_total 2 || fail "events_received_total $(dq_metric events_received_total)"
	dq_add 1700000000000-3 3
	run "$RELAY" dlq replay 1700000000000-3
	assert_status 0
	wait_for 20 dq_metric_is events_received_total 3 || fail "events_received_total $(dq_metric events_received_total)"
	[ "$(dq_metric dlq_replayed_total)" = 1 ] || fail "dlq_replayed_total $(dq_metric dlq_replayed_total), want 1"
	stop_relay_pid "$RELAY_PID"
}

# dq_peak_kib CMD...: runs CMD (stdout to $TMP/out) and prints its peak
# resident set in KiB.
# (In a command substitution: its caller adds || fail, as fail here ends
# only the subshell.)
dq_peak_kib() {
	run_expect 0 /usr/bin/time -f %M -o "$TMP/time" "$@"
	tail -n 1 "$TMP/time"
}

# ls reads only what its columns need: 120 entries of 1 MiB events listed
# whole (--limit 400, table, --wide and --json) stay under 64 MiB resident
# (holding them took about 1.8 MiB per entry under the sanitizers).
test_ls_does_not_hold_event_bodies() {
	dq_redis events
	rcli EVAL "local big = string.rep('x', 1048576)
		for i = 1, 120 do redis.call('XADD', KEYS[1], '1700000000000-' .. i, 'original_stream', 'events',
			'original_id', '1-' .. i, 'event', big, 'reason', 'r' .. i, 'attempts', '1', 'function', 'dq-x') end" \
		1 relay:events:dlq >/dev/null
	dq_len_is relay:events:dlq 120 || fail "DLQ has $(dq_len relay:events:dlq) entries"
	local args kib
	for args in "" "--wide" "--json"; do
		# shellcheck disable=SC2086
		kib=$(dq_peak_kib "$RELAY" dlq ls --limit 400 $args) || fail "dlq ls --limit 400 $args"
		[ "$kib" -lt 65536 ] || fail "dlq ls --limit 400 $args: peak RSS $kib KiB"
	done
	[ "$(jq length "$TMP/out")" = 120 ] && [ "$(jq -r '.[0].reason' "$TMP/out")" = r120 ] ||
		fail "--json: $(head -c 300 "$TMP/out")"
	kib=$(dq_peak_kib "$RELAY" dlq ls --limit 400) || fail "dlq ls --limit 400"
	[ "$(wc -l <"$TMP/out")" = 121 ] && [ "$(sed -n 2p "$TMP/out" | awk '{ print $1, $3, $NF }')" = "1700000000000-120 1-120 r120" ] ||
		fail "table: $(head -n 3 "$TMP/out")"
}

# dq_raw_controls FILE: whether FILE holds a raw ESC, C0 (but tab and
# newline), DEL, C1 (U+0080..U+009F) or bidi control (U+202A..U+202E,
# U+2066..U+2069).
dq_raw_controls() {
	LC_ALL=C grep -qaP '[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]' "$1"
}

# Text from the DLQ reaches the terminal escaped (ls --wide, show, and the
# event's pretty-printed JSON); --json stays valid JSON holding the same
# text with those characters \u-escaped.
test_ls_and_show_escape_controls() {
	dq_redis events
	local reason=$'boom \e]0;pwn\a \xc2\x9b2J \xe2\x80\xaeevil\x7f' fn=$'dq-\xc2\x9b31m' out
	# The event's strings hold CSI (U+009B), RLO (U+202E) and ESC, JSON-escaped.
	rcli XADD relay:events:dlq 1700000000000-1 original_stream events original_id $'1-1\e[2J' \
		event '{"msg":"a\u009b2J b\u202e c\u001b[31m d\u2067 e\u007f"}' reason "$reason" attempts 1 \
		function "$fn" handler h.handler >/dev/null
	for out in "ls --wide" "ls" "show 1700000000000-1"; do
		# shellcheck disable=SC2086
		run "$RELAY" dlq $out
		assert_status 0
		dq_raw_controls "$TMP/out" && fail "dlq $out: raw control characters: $(od -c "$TMP/out" | head -n 30)"
	done
	run "$RELAY" dlq ls --wide
	assert_out_contains 'dq-\u009b31m  boom \x1b]0;pwn\x07 \u009b2J \u202eevil\x7f'
	assert_out_contains '1-1\x1b[2J'
	run "$RELAY" dlq show 1700000000000-1
	assert_out_contains '"msg": "a\u009B2J b\u202E c\u001B[31m d\u2067 e\u007F"'
	assert_out_contains 'boom \x1b]0;pwn\x07 \u009b2J \u202eevil\x7f'
	for out in "ls --json" "show --json 1700000000000-1"; do
		# shellcheck disable=SC2086
		run "$RELAY" dlq $out
		assert_status 0
		dq_raw_controls "$TMP/out" && fail "dlq $out: raw control characters: $(od -c "$TMP/out" | head -n 30)"
		jq -e --arg r "$reason" --arg f "$fn" '(if type == "array" then .[0] else . end) | .reason == $r and .function == $f' \
			"$TMP/out" >/dev/null || fail "dlq $out: $(cat "$TMP/out")"
	done
	jq -e '.event.msg == "a\u009b2J b\u202e c\u001b[31m d\u2067 e\u007f"' "$TMP/out" >/dev/null || fail "show --json event: $(cat "$TMP/out")"
}
