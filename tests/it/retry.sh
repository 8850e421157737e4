# Retry policies through relay start, a private redis-server and the real
# Docker daemon: a rule's backoff list over the template's, on time from the
# handler's own start times; an exponential backoff with jitter within its
# bounds; no_retry_exit_codes and max_age dead-letter at once with their
# reasons; a retry that fell due while no worker ran starts when one does,
# not a reclaim later; invalid retry values fail relay function validate.
#
# The functions are warm (warm: {}), so that an attempt's handler starts
# milliseconds after Relay starts the attempt: the gaps measured between
# handler starts are Relay's retry timing, not a container start on a
# loaded daemon. Function names start with "rt-".

RT_PY='import sys, time
def handler(event):
    print("RT-START %s %.3f" % (event.get("tag", ""), time.time()))
    sys.stdout.flush()
    if event.get("exit"):
        sys.exit(int(event["exit"]))
    raise ValueError("fail " + event.get("tag", ""))'

# rt_env HOST: redis, the stream, DEBUG logs, no standby.
rt_env() {
	RT_HOST=$1
	redis_up
	relay_env
	export LOG_LEVEL=DEBUG STANDBY_MAX=0
}

# rt_fn NAME TOP RULE-TAIL: a warm python function whose rule matches
# {"fn": [NAME]}; TOP goes before events:, RULE-TAIL after the rule's
# pattern (retries:, retry:).
rt_fn() {
	write_fn "$1" h.py "$RT_PY" "runtime: python3.14
warm: {}
$2events:
  - handler: h.handler
    pattern: {fn: [$1]}
$3"
}

rt_trap() { trap 'rt_rc=$?; rm_fn_images "rt-*"; (exit $rt_rc); it_cleanup' EXIT; }

rt_xadd() { rcli XADD events '*' event "{\"fn\":\"$1\",\"tag\":\"$2\"${3:-}}"; }

# rt_starts LOG TAG: the handler start times (seconds, float) of the
# event tagged TAG, one a line, in order.
rt_starts() { sed -n "s/.*: RT-START $2 \([0-9.]*\)\$/\1/p" "$1"; }

rt_dlq_n() { [ "$(rcli XLEN relay:events:dlq)" -ge "$1" ]; }

# rt_dlq_field N FIELD: FIELD of the Nth DLQ entry (1-based).
rt_dlq_field() {
	rcli -2 --json XRANGE relay:events:dlq - + | python3 -c '
import json, sys
e = json.load(sys.stdin)[int(sys.argv[1]) - 1][1]
print(dict(zip(e[::2], e[1::2])).get(sys.argv[2], ""))' "$1" "$2"
}

# rt_gap_within A B LO HI: B - A is in [LO, HI] seconds.
rt_gap_within() {
	awk -v a="$1" -v b="$2" -v lo="$3" -v hi="$4" 'BEGIN { g = b - a; exit !(g >= lo && g <= hi) }'
}

# The retry bound: a retry starts at most 1.5 s after it is due (the
# retrier wakes at the due time it recorded, docs/execution.md); the gap
# between two handler starts also holds the failed attempt's own run and
# its record (tens of ms on a warm container), hence the lower bound is the
# backoff itself and the upper one the backoff + 1.5 s.
test_a_rules_backoff_list_overrides_the_top_level_and_runs_on_time() {
	rt_trap
	rt_env rt-list-host
	rt_fn rt-list 'retry: {backoff: [30s]}
' '    retries: 2
    retry: {backoff: [2s, 4s]}
'
	start_relay_as "$TMP/relay.log" "$RT_HOST"
	local id
	id=$(rt_xadd rt-list l1)
	wait_for 60 rt_dlq_n 1 || fail "no DLQ entry: $(grep -v 'docker request' "$TMP/relay.log" | tail -n 20)"
	mapfile -t s < <(rt_starts "$TMP/relay.log" l1)
	[ "${#s[@]}" -eq 3 ] || fail "${#s[@]} attempts, want 3: ${s[*]}"
	rt_gap_within "${s[0]}" "${s[1]}" 2 3.5 || fail "gap 1: ${s[0]} -> ${s[1]}, want 2 s (+1.5)"
	rt_gap_within "${s[1]}" "${s[2]}" 4 5.5 || fail "gap 2: ${s[1]} -> ${s[2]}, want 4 s (+1.5)"
	[ "$(rt_dlq_field 1 original_id)" = "$id" ] || fail "DLQ entry of $(rt_dlq_field 1 original_id)"
	[ "$(rt_dlq_field 1 attempts)" = 3 ] || fail "attempts $(rt_dlq_field 1 attempts)"
	rt_dlq_field 1 reason | grep -q '^rt-list/h.handler exhausted after 3 attempt(s): ' ||
		fail "reason: $(rt_dlq_field 1 reason)"
	# Each retry was claimed from the retry index, not by the reclaim.
	[ "$(grep -c 'msg="claimed 1 due retry(ies)"' "$TMP/relay.log")" -eq 2 ] ||
		fail "claims: $(grep -c 'due retry' "$TMP/relay.log")"
	! grep -q 'msg="message reclaimed"' "$TMP/relay.log" || fail "a reclaim ran it"
	stop_relay_pid "$RELAY_PID"
	[ "$(rcli ZCARD relay:retry:events:relay)" = 0 ] || fail "the retry index is not empty"
	# inspect shows the rule's effective policy (its backoff over the
	# template's).
	run_expect 0 "$RELAY" function inspect rt-list
	[ "$(grep -A1 -x 'Retries:' "$TMP/out" | tail -n 1)" = '  h.handler   retries=2 backoff [2s, 4s]' ] ||
		fail "inspect: $(cat "$TMP/out")"
	run_expect 0 "$RELAY" function inspect rt-list --json
	[ "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["retry"])' <"$TMP/out")" = \
		"[{'handler': 'h.handler', 'kind': 'rule', 'retries': 2, 'policy': 'backoff [2s, 4s]'}]" ] ||
		fail "inspect --json retry: $(cat "$TMP/out")"
}

# Delays 1 s, 2 s, then 3 s (the max), each spread by +-20 % but never over
# the max: gaps within [0.8, 1.2], [1.6, 2.4], [2.4, 3.0] s, + 1.5 s each.
test_an_exponential_backoff_with_jitter_stays_within_its_bounds() {
	rt_trap
	rt_env rt-exp-host
	rt_fn rt-exp '' '    retries: 3
    retry:
      backoff: {initial: 1s, multiplier: 2, max: 3s, jitter: 0.2}
'
	start_relay_as "$TMP/relay.log" "$RT_HOST"
	rt_xadd rt-exp e1 >/dev/null
	wait_for 60 rt_dlq_n 1 || fail "no DLQ entry: $(grep -v 'docker request' "$TMP/relay.log" | tail -n 20)"
	mapfile -t s < <(rt_starts "$TMP/relay.log" e1)
	[ "${#s[@]}" -eq 4 ] || fail "${#s[@]} attempts, want 4: ${s[*]}"
	rt_gap_within "${s[0]}" "${s[1]}" 0.8 2.7 || fail "gap 1: ${s[0]} -> ${s[1]}"
	rt_gap_within "${s[1]}" "${s[2]}" 1.6 3.9 || fail "gap 2: ${s[1]} -> ${s[2]}"
	rt_gap_within "${s[2]}" "${s[3]}" 2.4 4.5 || fail "gap 3: ${s[2]} -> ${s[3]}"
	stop_relay_pid "$RELAY_PID"
}

# An exit code listed in no_retry_exit_codes (the template's, kept when the
# rule sets only its backoff) is permanent: one attempt, then the DLQ with
# the reason; another exit code is retried as usual.
test_no_retry_exit_codes_dead_letter_at_once() {
	rt_trap
	rt_env rt-perm-host
	rt_fn rt-perm 'retry: {no_retry_exit_codes: [2]}
' '    retries: 1
    retry: {backoff: [1s]}
'
	start_relay_as "$TMP/relay.log" "$RT_HOST"
	local a b
	a=$(rt_xadd rt-perm p2 ',"exit":"2"')
	wait_for 60 rt_dlq_n 1 || fail "no DLQ entry for exit 2"
	b=$(rt_xadd rt-perm p3 ',"exit":"3"')
	wait_for 60 rt_dlq_n 2 || fail "no DLQ entry for exit 3"
	[ "$(rt_starts "$TMP/relay.log" p2 | wc -l)" -eq 1 ] || fail "exit 2 ran $(rt_starts "$TMP/relay.log" p2 | wc -l) times"
	[ "$(rt_starts "$TMP/relay.log" p3 | wc -l)" -eq 2 ] || fail "exit 3 ran $(rt_starts "$TMP/relay.log" p3 | wc -l) times"
	[ "$(rt_dlq_field 1 original_id)" = "$a" ] || fail "first DLQ entry is not $a"
	rt_dlq_field 1 reason |
		grep -q '^rt-perm/h.handler not retried after 1 attempt(s): exit code 2 is listed in no_retry_exit_codes: ' ||
		fail "reason: $(rt_dlq_field 1 reason)"
	[ "$(rt_dlq_field 2 original_id)" = "$b" ] || fail "second DLQ entry is not $b"
	rt_dlq_field 2 reason | grep -q '^rt-perm/h.handler exhausted after 2 attempt(s): ' ||
		fail "reason: $(rt_dlq_field 2 reason)"
	stop_relay_pid "$RELAY_PID"
}

# A retry that would start after max_age is not run: with a 3 s max_age and
# a 5 s backoff the first failure goes to the DLQ at once.
test_max_age_dead_letters_a_retry_that_would_start_too_late() {
	rt_trap
	rt_env rt-age-host
	rt_fn rt-age '' '    retries: 3
    retry: {backoff: [5s], max_age: 3s}
'
	start_relay_as "$TMP/relay.log" "$RT_HOST"
	rt_xadd rt-age a1 >/dev/null
	wait_for 60 rt_dlq_n 1 || fail "no DLQ entry"
	[ "$(rt_starts "$TMP/relay.log" a1 | wc -l)" -eq 1 ] || fail "ran $(rt_starts "$TMP/relay.log" a1 | wc -l) times"
	rt_dlq_field 1 reason | grep -q '^rt-age/h.handler not retried after 1 attempt(s): max_age 3s exceeded: ' ||
		fail "reason: $(rt_dlq_field 1 reason)"
	stop_relay_pid "$RELAY_PID"
}

# A retry due while no worker runs starts when one starts again: its
# retrier finds it due at once, where the reclaim would take a minute. The
# relay is stopped (SIGTERM) after the first failure and started again once
# the 2 s backoff has passed; then a retry with max_age is not run when it
# is found due after its max_age.
test_a_retry_due_while_no_worker_ran_starts_on_the_next_start() {
	rt_trap
	rt_env rt-down-host
	rt_fn rt-down '' '    retries: 1
    retry: {backoff: [2s]}
'
	start_relay_as "$TMP/a.log" "$RT_HOST"
	rt_xadd rt-down d1 >/dev/null
	wait_for 60 grep -q 'msg="handler failed; retrying in 2s' "$TMP/a.log" || fail "no first failure"
	stop_relay_pid "$RELAY_PID"
	[ "$(rcli ZCARD relay:retry:events:relay)" = 1 ] || fail "the retry is not in the index"
	sleep 3 # the fault: no worker runs while the retry falls due
	local t0
	t0=$(date +%s.%N)
	start_relay_as "$TMP/b.log" "$RT_HOST"
	wait_for 60 rt_dlq_n 1 || fail "the retry did not run: $(grep -v 'docker request' "$TMP/b.log" | tail -n 20)"
	mapfile -t s < <(rt_starts "$TMP/b.log" d1)
	[ "${#s[@]}" -eq 1 ] || fail "${#s[@]} attempts after the restart, want 1"
	# 15 s: a start, its first warm container on a loaded daemon (a few
	# seconds); the reclaim would come 60 s after the start.
	rt_gap_within "$t0" "${s[0]}" 0 15 || fail "the retry started $(awk -v a="$t0" -v b="${s[0]}" 'BEGIN{print b-a}') s after the restart"
	stop_relay_pid "$RELAY_PID"
}

test_invalid_retry_values_fail_validate() {
	local d=$TMP/v
	mkdir -p "$d/rt-bad"
	printf 'def handler(e):\n    pass\n' >"$d/rt-bad/h.py"
	printf 'runtime: python3.14\nretry:\n  backoff: {initial: 1s, multiplier: 0.5, jitter: 2}\n  no_retry_exit_codes: [0]\nevents:\n  - handler: h.handler\n    pattern: {}\n    retry: {backoff: []}\n' >"$d/rt-bad/template.yaml"
	run_expect 1 "$RELAY" function validate "$d"
	assert_out_contains 'retry.backoff.multiplier: 0.5 is below 1'
	assert_out_contains 'retry.backoff.jitter: 2 is outside [0, 1] (a fraction of each delay)'
	assert_out_contains 'retry.no_retry_exit_codes[0]: 0 is success, not a failure: codes are 1 to 255'
	assert_out_contains 'events[0].retry.backoff: must not be empty (give at least one delay)'
}
