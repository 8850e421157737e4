# Per-key concurrency and order (key_concurrency) through relay start, a
# private redis-server and the real Docker daemon: FIFO per key across two
# workers while different keys run in parallel; limit 2; a failing event
# holding only its own key until it is dead-lettered, shown by relay event
# status; a worker killed with -9 while holding a key; the template's
# validation errors and relay function inspect.
#
# The functions are warm (warm: {}): a handler starts milliseconds after
# Relay starts its attempt, so the start and end times the handlers print
# are Relay's ordering, not container starts. Function names start with
# "ky-"; each test's relays run under a hostname of their own.

KY_PY='import sys, time
def handler(event):
    img = event.get("new_image", {})
    print("KY-START %s %s %.3f" % (event.get("tag", ""), img.get("tenant_id", "-"), time.time()))
    sys.stdout.flush()
    time.sleep(float(event.get("sleep", 0.3)))
    if event.get("exit"):
        sys.exit(int(event["exit"]))
    print("KY-END %s %s %.3f" % (event.get("tag", ""), img.get("tenant_id", "-"), time.time()))
    sys.stdout.flush()'

ky_env() {
	redis_up
	relay_env
	export LOG_LEVEL=DEBUG STANDBY_MAX=0
}

# ky_fn NAME KEY-BLOCK [RULE-TAIL]: a warm python function matching
# {"fn": [NAME]} with KEY-BLOCK (the key_concurrency lines) on top.
ky_fn() {
	write_fn "$1" h.py "$KY_PY" "runtime: python3.14
warm: {}
$2events:
  - handler: h.handler
    pattern: {fn: [$1]}
${3:-}"
}

# ky_rm_containers: the containers of this file's relays (hostnames ky-*),
# a killed relay's among them; no other file's.
ky_rm_containers() {
	docker ps -a --format '{{.ID}} {{.Label "relay.hostname"}}' | awk '$2 ~ /^ky-/ { print $1 }' |
		xargs -r docker rm -f >/dev/null 2>&1
}

ky_trap() {
	trap 'ky_rc=$?; ky_rm_containers; rm_fn_images "ky-*"; (exit $ky_rc); it_cleanup' EXIT
}

# ky_xadd FN TAG TENANT [EXTRA-JSON]: the message id.
ky_xadd() {
	local img=''
	[ "$3" = - ] || img=",\"new_image\":{\"tenant_id\":\"$3\"}"
	rcli XADD events '*' event "{\"fn\":\"$1\",\"tag\":\"$2\"$img${4:-}}"
}

# ky_runs LOG...: "tag tenant start end" a line for each finished run, in
# start order (a run with no end has end "-").
ky_runs() {
	cat "$@" | python3 -c '
import re, sys
s, e = {}, {}
for line in sys.stdin:
    m = re.search(r"KY-(START|END) (\S+) (\S+) ([0-9.]+)$", line.rstrip("\n"))
    if m:
        (s if m.group(1) == "START" else e)[(m.group(2), m.group(3))] = float(m.group(4))
for (tag, ten), t in sorted(s.items(), key=lambda kv: kv[1]):
    print(tag, ten, "%.3f" % t, "%.3f" % e[(tag, ten)] if (tag, ten) in e else "-")'
}

# ky_check_fifo RUNS-FILE: per tenant, no two runs overlap and the tags
# (t<tenant><n>) start in n order; prints what is wrong.
ky_check_fifo() {
	python3 - "$1" <<'EOF'
import sys
runs = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for tag, ten, s, e in runs:
    by.setdefault(ten, []).append((float(s), float(e) if e != "-" else None, tag))
bad = []
for ten, rs in by.items():
    rs.sort()
    tags = [r[2] for r in rs]
    if tags != sorted(tags, key=lambda t: int(t.split("-")[1])):
        bad.append("tenant %s ran out of order: %s" % (ten, tags))
    for a, b in zip(rs, rs[1:]):
        if a[1] is None or b[0] < a[1]:
            bad.append("tenant %s: %s overlaps %s" % (ten, a[2], b[2]))
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
}

# ky_max_overlap RUNS-FILE: the most runs of the file in flight at once.
ky_max_overlap() {
	python3 - "$1" <<'EOF'
import sys
ev = []
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) == 4 and f[3] != "-":
        ev += [(float(f[2]), 1), (float(f[3]), -1)]
n = m = 0
for _, d in sorted(ev, key=lambda x: (x[0], x[1])):
    n += d
    m = max(m, n)
print(m)
EOF
}

ky_all_acked() { acked_through "$REDIS_PORT" events relay "$1"; }

# Two workers, three tenants, four events each, interleaved in the stream:
# per tenant one at a time in stream order; different tenants in parallel.
test_a_keys_events_run_one_at_a_time_in_stream_order_across_two_workers() {
	ky_trap
	ky_env
	ky_fn ky-fifo 'concurrency: 4
key_concurrency: {key: new_image.tenant_id}
'
	start_relay_as "$TMP/a.log" ky-fifo-a
	start_relay_as "$TMP/b.log" ky-fifo-b
	local last n ten
	for n in 1 2 3 4; do
		for ten in a b c; do
			last=$(ky_xadd ky-fifo "t$ten-$n" "$ten")
		done
	done
	wait_for 120 ky_all_acked "$last" ||
		fail "not all acknowledged: $(grep -v 'docker request' "$TMP/a.log" | tail -n 30)"
	ky_runs "$TMP/a.log" "$TMP/b.log" >"$TMP/runs"
	[ "$(wc -l <"$TMP/runs")" -eq 12 ] || fail "$(wc -l <"$TMP/runs") runs, want 12: $(cat "$TMP/runs")"
	ky_check_fifo "$TMP/runs" || fail "per-key order: $(cat "$TMP/runs")"
	[ "$(ky_max_overlap "$TMP/runs")" -ge 2 ] || fail "no two tenants ran in parallel: $(cat "$TMP/runs")"
	grep -q 'KY-START' "$TMP/a.log" && grep -q 'KY-START' "$TMP/b.log" ||
		fail "one worker ran everything"
	stop_relay_pid "$RELAY_PID"
	# The queues are empty once every event is done.
	[ -z "$(rcli --scan --pattern 'relay:keyq:*')" ] || fail "queues left: $(rcli --scan --pattern 'relay:keyq:*')"
}

scrape() { curl -s --max-time 5 "http://$METRICS_ADDR/metrics"; }

# limit: 2 on one tenant (six events of a second each): two at a time,
# never three, and the waits are counted; events without the key are not
# limited (more than two of four run together).
test_limit_two_runs_two_at_a_time_and_events_without_the_key_are_not_limited() {
	ky_trap
	ky_env
	export METRICS_ADDR=127.0.0.1:$(free_port)
	# concurrency 8: the key's limit is what holds them to two.
	ky_fn ky-two 'concurrency: 8
key_concurrency: {key: new_image.tenant_id, limit: 2}
'
	start_relay_as "$TMP/a.log" ky-two-a
	local last n
	for n in 1 2 3 4 5 6; do
		last=$(ky_xadd ky-two "tx-$n" x ',"sleep":1')
	done
	wait_for 120 ky_all_acked "$last" ||
		fail "not all acknowledged: $(grep -v 'docker request' "$TMP/a.log" | tail -n 30)"
	ky_runs "$TMP/a.log" >"$TMP/runs"
	[ "$(wc -l <"$TMP/runs")" -eq 6 ] || fail "$(wc -l <"$TMP/runs") runs: $(cat "$TMP/runs")"
	[ "$(ky_max_overlap "$TMP/runs")" -eq 2 ] || fail "in flight at once: $(ky_max_overlap "$TMP/runs"), want 2: $(cat "$TMP/runs")"
	scrape >"$TMP/m"
	awk '$1 == "key_waits_total{function=\"ky-two\"}" { found = 1; exit !($2 >= 4) } END { exit !found }' "$TMP/m" ||
		fail "key_waits_total: $(grep key_waits "$TMP/m")"
	# Without the key: not limited (more than 2 at once; 4 s each, so that
	# the containers started for the third and fourth overlap them).
	for n in 1 2 3 4; do
		last=$(ky_xadd ky-two "nk-$n" - ',"sleep":4')
	done
	wait_for 120 ky_all_acked "$last" || fail "keyless events not acknowledged"
	ky_runs "$TMP/a.log" | grep '^nk-' >"$TMP/runs2"
	[ "$(ky_max_overlap "$TMP/runs2")" -ge 3 ] || fail "keyless in flight at once: $(ky_max_overlap "$TMP/runs2"), want 3 or 4: $(cat "$TMP/runs2")"
	stop_relay_pid "$RELAY_PID"
}

# A failing event (two retries 2 s apart, then the DLQ) holds its own key
# only: the next event of its tenant waits, shown by relay event status,
# and runs after the DLQ entry; another tenant's event runs at once.
test_a_failing_event_holds_only_its_own_key_until_dead_lettered() {
	ky_trap
	ky_env
	ky_fn ky-hol 'key_concurrency: {key: new_image.tenant_id}
' '    retries: 2
    retry: {backoff: [2s]}
'
	start_relay_as "$TMP/a.log" ky-hol-a
	local a1 a2 b1
	a1=$(ky_xadd ky-hol ha-1 a ',"exit":"1","sleep":0')
	a2=$(ky_xadd ky-hol ha-2 a)
	b1=$(ky_xadd ky-hol hb-1 b)
	wait_for 60 grep -q "KY-END hb-1 b" "$TMP/a.log" || fail "the other tenant's event did not run"
	wait_for 30 grep -q 'msg="waiting for its key' "$TMP/a.log" || fail "ha-2 did not wait"
	run_expect 0 "$RELAY" event status "$a2"
	grep -qx "Key: *waiting for key a (behind $a1)" "$TMP/out" || fail "status: $(cat "$TMP/out")"
	run_expect 0 "$RELAY" event status "$a2" --json
	[ "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["key_wait"])' <"$TMP/out")" = "waiting for key a (behind $a1)" ] ||
		fail "status --json: $(cat "$TMP/out")"
	wait_for 60 ky_all_acked "$b1" || fail "not all done: $(grep -v 'docker request' "$TMP/a.log" | tail -n 30)"
	[ "$(rcli XLEN relay:events:dlq)" = 1 ] || fail "DLQ length $(rcli XLEN relay:events:dlq)"
	ky_runs "$TMP/a.log" >"$TMP/runs"
	# ha-1 ran three times (the runs list keeps its last start); hb-1
	# ended before ha-1's last attempt, ha-2 started after it.
	local hb_end ha1_last ha2_start
	hb_end=$(awk '$1 == "hb-1" { print $4 }' "$TMP/runs")
	ha1_last=$(awk '$1 == "ha-1" { print $3 }' "$TMP/runs")
	ha2_start=$(awk '$1 == "ha-2" { print $3 }' "$TMP/runs")
	[ "$(grep -c 'KY-START ha-1' "$TMP/a.log")" -eq 3 ] || fail "ha-1 ran $(grep -c 'KY-START ha-1' "$TMP/a.log") times"
	awk -v a="$hb_end" -v b="$ha1_last" 'BEGIN { exit !(a < b) }' || fail "hb-1 waited for ha-1: $(cat "$TMP/runs")"
	awk -v a="$ha1_last" -v b="$ha2_start" 'BEGIN { exit !(a < b) }' || fail "ha-2 did not wait for ha-1: $(cat "$TMP/runs")"
	# The wait charged no attempt: ha-2 ran once and succeeded.
	[ "$(grep -c 'KY-START ha-2' "$TMP/a.log")" -eq 1 ] || fail "ha-2 ran $(grep -c 'KY-START ha-2' "$TMP/a.log") times"
	stop_relay_pid "$RELAY_PID"
}

# A worker killed with -9 while its handler holds a key: the key is
# released within the rule's timeout (10 s, counted from when the event
# took its place, before the kill), and the next event of that key runs on
# the other worker. The bound adds 4 s for the retrier's poll and a
# container start on a loaded daemon; without the lease the key would wait
# for the crashed invocation's running deadline, over 100 s.
test_a_worker_killed_while_holding_a_key_releases_it_within_the_timeout() {
	ky_trap
	ky_env
	ky_fn ky-kill 'key_concurrency: {key: new_image.tenant_id}
' '    timeout: 10s
'
	start_relay_as "$TMP/a.log" ky-kill-a
	local a=$RELAY_PID b victim survivor t0
	start_relay_as "$TMP/b.log" ky-kill-b
	b=$RELAY_PID
	ky_xadd ky-kill k-1 k ',"sleep":60' >/dev/null
	wait_for 60 grep -q "KY-START k-1" "$TMP/a.log" "$TMP/b.log" || fail "k-1 did not start"
	if grep -q "KY-START k-1" "$TMP/a.log"; then
		victim=$a survivor=$TMP/b.log RELAY_PID=$b
	else
		victim=$b survivor=$TMP/a.log RELAY_PID=$a
	fi
	ky_xadd ky-kill k-2 k ',"sleep":0' >/dev/null
	wait_for 30 grep -q 'msg="waiting for its key' "$TMP/a.log" "$TMP/b.log" || fail "k-2 did not wait"
	t0=$(date +%s.%N)
	kill9_relay_pid "$victim"
	wait_for 30 grep -q "KY-END k-2" "$survivor" || fail "k-2 never ran: $(grep -v 'docker request' "$survivor" | tail -n 30)"
	local s2
	s2=$(sed -n 's/.*KY-START k-2 k \([0-9.]*\)$/\1/p' "$survivor")
	awk -v a="$t0" -v b="$s2" 'BEGIN { exit !(b - a <= 14) }' ||
		fail "k-2 started $(awk -v a="$t0" -v b="$s2" 'BEGIN { print b - a }') s after the kill, want <= 10 s + 4"
	stop_relay_pid "$RELAY_PID"
}

# Validation: an empty key path, a path with an empty segment, limit 0, a
# string limit, an unknown key and a missing key each fail relay function
# validate with an error naming the field; a valid one is shown by relay
# function inspect.
test_invalid_key_concurrency_fails_validate_and_inspect_shows_a_valid_one() {
	local d=$TMP/v f
	for f in empty dots zero str unknown nokey; do
		mkdir -p "$d/ky-$f"
		printf 'def handler(e):\n    pass\n' >"$d/ky-$f/h.py"
	done
	ky_tpl() { printf 'runtime: python3.14\nkey_concurrency: %s\nevents:\n  - handler: h.handler\n    pattern: {}\n' "$2" >"$d/ky-$1/template.yaml"; }
	ky_tpl empty '{key: ""}'
	ky_tpl dots '{key: a..b}'
	ky_tpl zero '{key: a, limit: 0}'
	ky_tpl str '{key: a, limit: "2"}'
	ky_tpl unknown '{key: a, order: fifo}'
	ky_tpl nokey '{limit: 3}'
	run_expect 1 "$RELAY" function validate "$d"
	assert_out_contains 'key_concurrency.key: is empty; must be a dotted path into the event such as new_image.tenant_id'
	assert_out_contains 'key_concurrency.key: has an empty segment (a leading, trailing or doubled dot)'
	assert_out_contains 'key_concurrency.limit: 0 is out of range; must be an integer from 1 to 10000'
	assert_out_contains 'key_concurrency.limit: must be an integer from 1 to 10000, not a string'
	assert_out_contains 'key_concurrency: unknown key "order" (key_concurrency takes key and limit)'
	assert_out_contains 'key_concurrency.key: is required (a dotted path into the event such as new_image.tenant_id)'

	ky_trap
	ky_env
	ky_fn ky-insp 'key_concurrency: {key: new_image.tenant_id, limit: 3}
'
	start_relay_as "$TMP/a.log" ky-insp-a
	stop_relay_pid "$RELAY_PID"
	run_expect 0 "$RELAY" function inspect ky-insp
	[ "$(grep -A1 -x 'Key concurrency:' "$TMP/out" | tail -n 1)" = '  key new_image.tenant_id, limit 3' ] ||
		fail "inspect: $(cat "$TMP/out")"
	run_expect 0 "$RELAY" function inspect ky-insp --json
	[ "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["key_concurrency"])' <"$TMP/out")" = \
		"{'key': 'new_image.tenant_id', 'limit': 3}" ] || fail "inspect --json: $(cat "$TMP/out")"
}

# The plain build under valgrind through the keyed paths: registration,
# waiting, wake-up, release, lease renewal, and a graceful stop with a
# keyed event still waiting: no memory errors, no leaks.
test_valgrind_keyed_paths() {
	[ -x "$RELAY_PLAIN" ] || fail "$RELAY_PLAIN not built (make all)"
	ky_trap
	ky_env
	ky_fn ky-vg 'key_concurrency: {key: new_image.tenant_id}
'
	relay_bg "$TMP/a.log" unshare --uts sh -c "hostname ky-vg-a && exec valgrind --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=99 '$RELAY_PLAIN' start"
	wait_for 120 grep -qF 'msg="worker started"' "$TMP/a.log" || fail "relay did not start: $(tail -n 20 "$TMP/a.log")"
	local last n
	for n in 1 2 3; do
		ky_xadd ky-vg "v-$n" v ',"sleep":0.5' >/dev/null
	done
	last=$(ky_xadd ky-vg w-1 w)
	wait_for 120 ky_all_acked "$last" || fail "not all acknowledged: $(grep -v 'docker request' "$TMP/a.log" | tail -n 30)"
	grep -q 'msg="waiting for its key' "$TMP/a.log" || fail "no event waited"
	# One more that waits behind a long one when the stop comes.
	ky_xadd ky-vg v-4 v ',"sleep":3' >/dev/null
	ky_xadd ky-vg v-5 v >/dev/null
	wait_for 60 grep -q "KY-START v-4" "$TMP/a.log" || fail "v-4 did not start"
	stop_relay_pid "$RELAY_PID"
	grep -q "ERROR SUMMARY: 0 errors" "$TMP/a.log" || fail "valgrind: $(grep -A5 'definitely lost\|Invalid' "$TMP/a.log" | head -n 20)"
}
