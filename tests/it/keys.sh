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

ky_trap() {
	trap 'ky_rc=$?; docker ps -aq --filter label=relay.function | xargs -r docker rm -f >/dev/null 2>&1; rm_fn_images "ky-*"; (exit $ky_rc); it_cleanup' EXIT
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
	ky_fn ky-fifo 'key_concurrency: {key: new_image.tenant_id}
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
