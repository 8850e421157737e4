# Cron schedules end to end (docs/schedules.md): `relay schedule next`
# as a process, three workers in their own UTS namespaces publishing an
# every-second schedule exactly once per occurrence (one of them killed
# mid-run), the catch-up policy on restart, the schedule counters on
# /metrics, a schedule removed live while occurrences are pending, and the
# scheduler through a Redis outage.

# sc_start LOG HOSTNAME [METRICS_ADDR]: a worker, ready once its scheduler runs.
sc_start() {
	export METRICS_ADDR=${3:-}
	start_relay_as "$1" "$2" 'msg="Cron scheduler started with '
}

sc_pending() { rcli XPENDING events relay | head -n1; }
sc_lag() { rcli XINFO GROUPS events | sed -n '/^lag$/{n;p}'; }

# The stream's occurrences, one "epoch-seconds occurrence-id message-id" per
# line, in stream order.
sc_occurrences() {
	rcli XRANGE events - + | awk '
		/^[0-9]+-[0-9]+$/ { id = $0 }
		match($0, /"occurrence_id":"[^"]*"/) { print id, substr($0, RSTART + 17, RLENGTH - 18) }' >"$TMP/occ.raw"
	# scheduled_at is the id's last 20 characters
	awk '{ print substr($2, length($2) - 19) }' "$TMP/occ.raw" | date -u -f - +%s >"$TMP/occ.secs"
	paste -d' ' "$TMP/occ.secs" <(awk '{print $2, $1}' "$TMP/occ.raw")
}

# Fails the test unless the occurrences are distinct and one second apart;
# sets SERIES_FIRST, SERIES_LAST, SERIES_COUNT. Called in the test's own
# shell (never in $(...) or <(...), where `fail` would only end a subshell).
sc_check_series() { # file of "secs occ-id msg-id"
	local dups
	dups=$(awk '{print $2}' "$1" | sort | uniq -d | wc -l)
	[ "$dups" -eq 0 ] || fail "$dups occurrence id(s) published more than once"
	awk 'NR > 1 && $1 != prev + 1 { print "gap after " prev ": next " $1; bad = 1 }
	     { prev = $1 } END { exit bad }' "$1" >/dev/null || fail "gaps in the published series: $(awk 'NR>1 && $1 != p+1 {print p "->" $1} {p=$1}' "$1" | head -n5)"
	read -r SERIES_FIRST SERIES_LAST SERIES_COUNT < <(awk 'NR == 1 { f = $1 } { l = $1; n++ } END { print f, l, n }' "$1")
	[ "${SERIES_COUNT:-0}" -ge 1 ] || fail "no occurrence published"
}

test_schedule_next_prints_exact_occurrences() {
	run "$RELAY" schedule next "30 2 * * *" --timezone Europe/Rome --from 2026-03-28T12:00:00Z -n 3
	assert_status 0
	assert_out_eq 'Description: At 02:30
2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00
2026-03-30T00:30:00Z  2026-03-30T02:30:00+02:00
2026-03-31T00:30:00Z  2026-03-31T02:30:00+02:00'
	# fall back: 02:30 happens twice on 2026-10-25 and fires once, the first time
	run "$RELAY" schedule next "30 2 * * *" --timezone Europe/Rome --from 2026-10-24T12:00:00Z -n 2
	assert_status 0
	assert_out_eq 'Description: At 02:30
2026-10-25T00:30:00Z  2026-10-25T02:30:00+02:00
2026-10-26T01:30:00Z  2026-10-26T02:30:00+01:00'
	# 6 fields: each occurrence carries its own second; default N is 5
	run "$RELAY" schedule next "*/20 * * * * *" --from 2026-03-28T23:59:30Z
	assert_status 0
	assert_out_eq 'Description: Every 20 seconds
2026-03-28T23:59:40Z  2026-03-28T23:59:40Z
2026-03-29T00:00:00Z  2026-03-29T00:00:00Z
2026-03-29T00:00:20Z  2026-03-29T00:00:20Z
2026-03-29T00:00:40Z  2026-03-29T00:00:40Z
2026-03-29T00:01:00Z  2026-03-29T00:01:00Z'
	run "$RELAY" schedule next "0 8 * * 1-5" --timezone America/Sao_Paulo --from 2026-03-27T00:00:00Z -n 2
	assert_status 0
	assert_out_eq 'Description: At 08:00, Monday through Friday
2026-03-27T11:00:00Z  2026-03-27T08:00:00-03:00
2026-03-30T11:00:00Z  2026-03-30T08:00:00-03:00'
	# --from is exclusive
	run "$RELAY" schedule next "@hourly" --from 2026-03-28T12:00:00Z -n 1
	assert_out_eq 'Description: Every hour
2026-03-28T13:00:00Z  2026-03-28T13:00:00Z'
	# from now by default: N lines after the description, all in the future
	run "$RELAY" schedule next "* * * * * *" -n 3
	assert_status 0
	[ "$(wc -l <"$TMP/out")" -eq 4 ] || fail "want 4 lines"
	local first
	first=$(sed -n 2p "$TMP/out" | cut -d' ' -f1)
	[ "$(date -u -d "$first" +%s)" -ge "$(($(date +%s) - 1))" ] || fail "first occurrence $first is in the past"

	run "$RELAY" schedule next "61 * * * *"
	assert_status 1
	assert_err_contains 'cron "61 * * * *": minute 61 out of range 0-59'
	assert_out_empty
	run "$RELAY" schedule next "0 0 30 2 *"
	assert_status 1
	assert_err_contains '0 0 30 2 *'
	run "$RELAY" schedule next "* * * * *" --timezone Europe/Nowhere
	assert_status 1
	assert_err_contains 'Europe/Nowhere'
	assert_out_empty
	run "$RELAY" schedule next "* * * * *" --timezone Local
	assert_status 1
	run "$RELAY" schedule next
	assert_status 2
	run "$RELAY" schedule next "* * * * *" -n 0
	assert_status 2
	run "$RELAY" schedule next "* * * * *" -n abc
	assert_status 2
	run "$RELAY" schedule next "* * * * *" --from yesterday
	assert_status 2
	assert_err_contains 'yesterday'
	run "$RELAY" schedule next "* * * * *" --bogus
	assert_status 2
}

test_three_workers_publish_each_occurrence_once() {
	redis_up
	relay_env
	write_fn sc-tick tick.py 'import json
def handler(event):
    print("ran", event["scheduled_at"], event["source"], flush=True)
    print("stdin", json.dumps(event, separators=(",", ":")), flush=True)
' 'runtime: python3.14
concurrency: 4
schedules:
  - handler: tick.handler
    cron: "* * * * * *"
'
	local m1=127.0.0.1:$(free_port)
	sc_start "$TMP/w1.log" sched-worker-1 "$m1"
	local p1=$RELAY_PID t_start
	t_start=$(grep -o 'msg="Cron scheduler started with [0-9]* schedule job(s)" start=[^ ]*' "$TMP/w1.log" | sed 's/.*start=//')
	grep -q 'level=INFO msg="Cron scheduler started with 1 schedule job(s)" start=' "$TMP/w1.log" ||
		fail "no start line naming one job: $(grep -F 'Cron scheduler' "$TMP/w1.log")"
	sc_start "$TMP/w2.log" sched-worker-2
	local p2=$RELAY_PID
	sc_start "$TMP/w3.log" sched-worker-3
	local p3=$RELAY_PID
	sleep 15
	kill9_relay_pid "$p3"
	sleep 15
	curl -s --max-time 5 "http://$m1/metrics" >"$TMP/metrics"
	# An invocation interrupted by the stop stays pending: the accounting
	# below counts it, so there is nothing to wait for. One SIGTERM each
	# (stop_relay_pid sends it): a second one means "exit now" (status 1).
	stop_relay_pid "$p1"
	stop_relay_pid "$p2"

	sc_occurrences >"$TMP/series"
	local first last count
	sc_check_series "$TMP/series"
	first=$SERIES_FIRST last=$SERIES_LAST count=$SERIES_COUNT
	echo "published $count occurrences, $(date -u -d "@$first" +%T) to $(date -u -d "@$last" +%T); worker-3 killed mid-run"
	[ "$count" -ge 28 ] || fail "only $count occurrences in ~33 s"
	[ "$first" -gt "$(date -u -d "$t_start" +%s)" ] || fail "first occurrence $first not after the first start $t_start"
	# every entry is a scheduled occurrence of sc-tick
	[ "$(rcli XLEN events)" -eq "$count" ] || fail "XLEN differs from the occurrences"

	# the handler ran once per occurrence: no duplicate runs; every
	# occurrence ran or is still pending with the killed worker
	cat "$TMP"/w[123].log | grep -o 'ran [0-9TZ:-]* relay.schedule' | awk '{print $2}' >"$TMP/ran"
	local total distinct
	total=$(wc -l <"$TMP/ran")
	distinct=$(sort -u "$TMP/ran" | wc -l)
	rcli XPENDING events relay - + 1000 | awk 'NR % 4 == 1' >"$TMP/pending.ids"
	rcli XPENDING events relay - + 1000 | awk 'NR % 4 == 2' | sort -u >"$TMP/pending.owners"
	local unaccounted=0 secs occ mid at
	while read -r secs occ mid; do
		at=${occ: -20}
		grep -qx -- "$at" "$TMP/ran" || grep -qx -- "$mid" "$TMP/pending.ids" || unaccounted=$((unaccounted + 1))
	done <"$TMP/series"
	echo "handler runs: $total, distinct occurrences $distinct; pending: $(grep -c . "$TMP/pending.ids")"
	[ "$total" -eq "$distinct" ] || fail "$((total - distinct)) duplicate handler run(s)"
	[ "$unaccounted" -eq 0 ] || fail "$unaccounted occurrence(s) neither ran nor pending"
	# (an entry read while its worker was stopping also stays pending for
	# a later reclaim: accounted for, not lost)
	echo "pending entries owned by: $(tr '\n' ' ' <"$TMP/pending.owners")"
	local w
	for w in 1 2; do
		grep -q 'ran .* relay.schedule' "$TMP/w$w.log" || fail "worker-$w ran no occurrence"
	done
	[ "$(rcli XLEN relay:events:dlq)" -eq 0 ] || fail "dead-lettered"
	# The original's wire format: one field, the five keys in order; the
	# handler reads only scheduled_at and source; the dedup key holds the
	# occurrence id for 7 days; INFO "Schedule: occurrence published".
	local e1 o1 at1
	e1=$(rcli XRANGE events - + COUNT 1 | sed -n 3p)
	[ "$(rcli XRANGE events - + COUNT 1 | wc -l)" -eq 3 ] || fail "not a single-field entry: $(rcli XRANGE events - + COUNT 1)"
	[ "$(rcli XRANGE events - + COUNT 1 | sed -n 2p)" = event ] || fail "the field is not event"
	o1=$(sed -n 1p "$TMP/series" | awk '{print $2}')
	at1=${o1: -20}
	[ "$e1" = "{\"function\":\"sc-tick\",\"handler\":\"tick.handler\",\"occurrence_id\":\"$o1\",\"scheduled_at\":\"$at1\",\"source\":\"relay.schedule\"}" ] ||
		fail "entry: $e1"
	[ "$(rcli GET "relay:schedule:$o1")" = "$o1" ] || fail "dedup key value: $(rcli GET "relay:schedule:$o1")"
	local pttl
	pttl=$(rcli PTTL "relay:schedule:$o1")
	[ "$pttl" -gt 604000000 ] && [ "$pttl" -le 604800000 ] || fail "dedup key PTTL $pttl"
	grep -qhF "relay: function \"sc-tick\" handler \"tick.handler\": stdin {\"scheduled_at\":\"" "$TMP"/w[123].log ||
		fail "no stdin line"
	! grep -hF 'handler "tick.handler": stdin' "$TMP"/w[123].log | grep -vqE '^relay: function "sc-tick" handler "tick.handler": stdin \{"scheduled_at":"[0-9TZ:-]{20}","source":"relay.schedule"\}$' ||
		fail "a handler read more than the occurrence payload: $(grep -hF 'stdin' "$TMP"/w[123].log | head -n 3)"
	grep -qE "level=INFO msg=\"Schedule: occurrence published\" function=sc-tick handler=tick.handler scheduled_at=[0-9TZ:-]{20} occurrence_id=schedule:sc-tick:tick.handler:" "$TMP"/w[123].log ||
		fail "no 'Schedule: occurrence published' line"

	# /metrics of worker-1: schedule counters move, event counters do not
	metric() { awk -v k="$1" '$1 == k {print $2}' "$TMP/metrics"; }
	echo "worker-1: published $(metric schedule_occurrences_published_total), duplicate $(metric schedule_occurrences_duplicate_total), failures $(metric schedule_publish_failures_total)"
	[ "$(metric schedule_occurrences_published_total)" -ge 1 ] || fail "published counter did not move"
	[ "$(metric schedule_occurrences_duplicate_total)" -ge 1 ] || fail "duplicate counter did not move"
	[ "$(metric schedule_publish_failures_total)" = 0 ] || fail "publish failures"
	[ "$(metric events_received_total)" = 0 ] || fail "events_received_total moved"
	[ "$(metric events_processed_total)" = 0 ] || fail "events_processed_total moved"
	[ "$(metric 'function_events_total{function="sc-tick"}')" = 0 ] || fail "function_events_total moved"
	[ "$(metric 'handler_invocations_total{function="sc-tick",handler="tick.handler",outcome="success"}')" -ge 1 ] ||
		fail "handler_invocations_total did not move"

	# catch-up: a worker that was down publishes nothing it missed. Down
	# until at least 3 occurrences after the last published one were due.
	while [ "$(date +%s)" -lt $((last + 4)) ]; do sleep 0.2; done
	sc_start "$TMP/w4.log" sched-worker-1
	local p4=$RELAY_PID t_restart
	t_restart=$(grep -o 'msg="Cron scheduler started with [0-9]* schedule job(s)" start=[^ ]*' "$TMP/w4.log" | sed 's/.*start=//')
	t_restart=$(date -u -d "$t_restart" +%s)
	[ "$t_restart" -ge $((last + 3)) ] || fail "restarted at $t_restart, only $((t_restart - last)) s after $last"
	published_after() { sc_occurrences | awk -v l="$last" '$1 > l { found = 1 } END { exit !found }'; }
	wait_for 20 published_after || fail "nothing published after the restart"
	stop_relay_pid "$p4"
	sc_occurrences >"$TMP/series2"
	local next
	next=$(awk -v l="$last" '$1 > l { print $1; exit }' "$TMP/series2")
	echo "down from $(date -u -d "@$last" +%T) to $(date -u -d "@$t_restart" +%T); next occurrence published $(date -u -d "@$next" +%T)"
	[ "$next" -gt "$t_restart" ] || fail "missed occurrence $next published on restart ($t_restart)"
	rm_fn_images sc-tick
}

test_removed_schedule_pending_occurrences_are_acked_obsolete() {
	redis_up
	relay_env
	export MAX_CONCURRENCY=1 MAX_BUFFERED_EVENTS=1
	write_fn sc-gone slow.py 'import time
def handler(event):
    time.sleep(2)
    print("slow", event["scheduled_at"], flush=True)
' 'runtime: python3.14
concurrency: 1
schedules:
  - handler: slow.handler
    cron: "* * * * * *"
'
	sc_start "$TMP/w.log" sched-obsolete
	# occurrences pile up faster than the one slow slot runs them
	backlog() { [ "$(sc_lag)" -ge 5 ]; }
	wait_for 60 backlog || fail "no backlog built up: lag $(sc_lag)"
	printf '%s' 'runtime: python3.14
concurrency: 1
events:
  - handler: slow.handler
    pattern: {kind: [never]}
' >"$RELAY_FUNCTIONS_DIR/sc-gone/template.yaml"
	wait_for 90 grep -q 'scheduled occurrence obsolete' "$TMP/w.log" ||
		fail "no obsolete occurrence: $(tail -n 20 "$TMP/w.log")"
	drained() { [ "$(sc_pending)" -eq 0 ] && [ "$(sc_lag)" -eq 0 ]; }
	wait_for 30 drained || fail "occurrences left: pending $(sc_pending), lag $(sc_lag)"
	# the schedule is gone: nothing more is published
	local len
	len=$(rcli XLEN events)
	sleep 2.5
	[ "$(rcli XLEN events)" -eq "$len" ] || fail "the removed schedule still publishes"
	local obsolete ran
	obsolete=$(grep -c 'scheduled occurrence obsolete' "$TMP/w.log")
	ran=$(grep -c '^relay: function "sc-gone" handler "[^"]*" executed for event' "$TMP/w.log")
	echo "$len occurrences: $ran ran before the removal, $obsolete acknowledged as obsolete"
	grep 'scheduled occurrence obsolete' "$TMP/w.log" | head -n1
	grep -q 'level=INFO msg="scheduled occurrence obsolete' "$TMP/w.log" || fail "not an INFO line"
	[ $((obsolete + ran)) -eq "$len" ] || fail "$len published, $ran ran + $obsolete obsolete"
	[ "$(rcli XLEN relay:events:dlq)" -eq 0 ] || fail "dead-lettered"
	# Nothing failed, so nothing was retried (the retry record is DEBUG; the
	# failure line before any retry is printed at every level).
	! grep -q '^relay: function "sc-gone" handler "[^"]*" execution failed for event' "$TMP/w.log" ||
		fail "an occurrence failed (and would be retried): $(grep 'execution failed' "$TMP/w.log" | head -n 3)"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images sc-gone
}

# Redis stops (SHUTDOWN SAVE) under a worker with an every-second schedule
# and comes back on the same port with the same data (the RDB written at
# shutdown: stream, group and dedup keys). The scheduler attempts each
# occurrence once, at its due time, and never retries a failed attempt:
# occurrences due while Redis was down are not published, before or after
# it returns. One WARN when publishing starts failing, one INFO line on the
# first success; nothing published twice.
test_scheduler_rides_out_a_redis_outage() {
	redis_up
	relay_env
	write_fn sc-out out.py 'def handler(event):
    print("ran", event["scheduled_at"], flush=True)
' 'runtime: python3.14
schedules:
  - handler: out.handler
    cron: "* * * * * *"
'
	local m=127.0.0.1:$(free_port)
	sc_start "$TMP/w.log" sched-outage "$m"
	local p=$RELAY_PID
	have_entries() { [ "$(rcli XLEN events)" -ge "$1" ]; }
	wait_for 30 have_entries 3 || fail "no occurrences before the outage: XLEN $(rcli XLEN events)"

	local t_down t_gone t_up t_ready
	t_down=$(date +%s.%N)
	rcli SHUTDOWN SAVE >/dev/null 2>&1
	wait "$REDIS_PID" 2>/dev/null
	t_gone=$(date +%s.%N)
	[ -s "$TMP/redis-$REDIS_PORT/dump.rdb" ] || fail "redis saved no data at shutdown"
	wait_for 10 grep -q 'msg="Schedule: publish failed"' "$TMP/w.log" ||
		fail "no WARN while redis is down: $(tail -n 20 "$TMP/w.log")"
	# Down for at least 4 whole seconds: several occurrences fall due.
	while [ "$(date +%s)" -lt $((${t_gone%.*} + 5)) ]; do sleep 0.2; done
	t_up=$(date +%s.%N)
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
		--dir "$TMP/redis-$REDIS_PORT" >>"$TMP/redis-$REDIS_PORT.log" 2>&1 &
	REDIS_PID=$!
	track "$REDIS_PID"
	wait_redis_plain
	t_ready=$(date +%s.%N)
	wait_for 15 grep -q 'msg="Schedule: publishing recovered"' "$TMP/w.log" ||
		fail "no recovery line: $(tail -n 20 "$TMP/w.log")"
	# two more occurrences after the recovery, then stop
	published_since() { sc_occurrences | awk -v t="$1" '$1 > t { n++ } END { exit !(n >= 2) }'; }
	wait_for 15 published_since "${t_ready%.*}" || fail "publishing did not resume"
	curl -s --max-time 5 "http://$m/metrics" >"$TMP/metrics"
	stop_relay_pid "$p"

	# The series: distinct occurrences, contiguous except for one gap.
	sc_occurrences >"$TMP/series"
	local dups
	dups=$(awk '{print $2}' "$TMP/series" | sort | uniq -d | wc -l)
	[ "$dups" -eq 0 ] || fail "$dups occurrence(s) published more than once"
	[ "$(rcli XLEN events)" -eq "$(wc -l <"$TMP/series")" ] || fail "stream entries that are not occurrences"
	awk 'NR > 1 && $1 != p + 1 { print p, $1 } { p = $1 }' "$TMP/series" >"$TMP/gaps"
	[ "$(wc -l <"$TMP/gaps")" -eq 1 ] || fail "want exactly one gap in the series, got: $(tr '\n' ' ' <"$TMP/gaps")"
	local before after missed
	read -r before after <"$TMP/gaps"
	missed=$((after - before - 1))
	echo "redis down $(date -u -d "@$t_down" +%T.%N | cut -c1-12) to $(date -u -d "@$t_ready" +%T.%N | cut -c1-12); last published before $(date -u -d "@$before" +%T), first after $(date -u -d "@$after" +%T); $missed occurrence(s) not published"
	# Everything due before the shutdown was published (the second in
	# flight at the shutdown aside), nothing after redis was gone.
	[ "$before" -ge $((${t_down%.*} - 1)) ] || fail "last occurrence before the outage $before, shutdown at $t_down"
	[ "$before" -le "${t_gone%.*}" ] || fail "occurrence $before published after redis was gone ($t_gone)"
	# Missed occurrences are not published late: the first one after is
	# due no earlier than redis came back, and no later than the second
	# after it was ready.
	[ "$after" -ge "${t_up%.*}" ] || fail "occurrence $after, due while redis was down, published after it came back ($t_up)"
	[ "$after" -le $((${t_ready%.*} + 2)) ] || fail "first occurrence after the outage $after, redis ready at $t_ready"
	[ "$missed" -ge 3 ] || fail "only $missed occurrence(s) missed in a 4 s outage"
	# Dedup keys: one per published occurrence (they survived the restart),
	# none for the missed ones.
	local keys
	keys=$(rcli --scan --pattern 'relay:schedule:schedule:sc-out:*' | wc -l)
	[ "$keys" -eq "$(wc -l <"$TMP/series")" ] || fail "$keys dedup keys for $(wc -l <"$TMP/series") occurrences"
	local s
	for s in $(seq $((before + 1)) $((after - 1))); do
		[ "$(rcli EXISTS "relay:schedule:schedule:sc-out:out.handler:$(date -u -d "@$s" +%Y-%m-%dT%H:%M:%SZ)")" -eq 0 ] ||
			fail "dedup key for the missed occurrence $s"
	done
	# One WARN for the whole outage, one recovery line after it.
	local warns recovered
	warns=$(grep -c 'level=WARN msg="Schedule: publish failed"' "$TMP/w.log")
	recovered=$(grep -c 'level=INFO msg="Schedule: publishing recovered"' "$TMP/w.log")
	[ "$warns" -eq 1 ] || fail "$warns WARN lines for one outage"
	[ "$recovered" -eq 1 ] || fail "$recovered recovery lines"
	[ "$(grep -n 'Schedule: publish failed' "$TMP/w.log" | cut -d: -f1)" -lt \
		"$(grep -n 'Schedule: publishing recovered' "$TMP/w.log" | cut -d: -f1)" ] || fail "recovery logged before the failure"
	grep 'Schedule: publish failed\|Schedule: publishing recovered' "$TMP/w.log"
	# Each missed occurrence was attempted once and counted as a failure.
	metric() { awk -v k="$1" '$1 == k {print $2}' "$TMP/metrics"; }
	[ "$(metric schedule_publish_failures_total)" = "$missed" ] ||
		fail "schedule_publish_failures_total $(metric schedule_publish_failures_total), want $missed"
	echo "other WARN/ERROR lines during the outage:"
	grep -E 'level=(WARN|ERROR)' "$TMP/w.log" | grep -v 'Schedule: publish failed' | sed 's/^/  /' | head -n 20
	rm_fn_images sc-out
}
