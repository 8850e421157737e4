# relay function invoke: one function's handlers run once,
# locally, against the real Docker daemon and never Redis: the exact
# forwarded output and exit status of a success, a failure, a timeout and a
# missing secret; the matched handlers in order, stopping at the first
# failure; a schedule handler fed the schedule envelope; no container left
# behind (also after SIGTERM); the image relay start built reused as is;
# build steps logged once each for a function with a dependency manifest.
#
# Function names start with "iv-" and carry the test's pid; each test
# removes the images it made (and the dependency image it made).

# ivfn NAME: a python function with handlers ok, fail (exit 3), slow
# (sleeps), env (prints TOKEN's length) and tick (a schedule handler), and
# rules matching {"k": ...} in file order.
ivfn() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	mkdir -p "$d"
	cat >"$d/h.py" <<'PY'
import json, os, sys, time
def ok(event):
    print("ok got", json.dumps(event, sort_keys=True))
def second(event):
    print("second ran")
def fail(event):
    print("fail says bye", file=sys.stderr)
    sys.exit(3)
def slow(event):
    print("slow started", flush=True)
    time.sleep(30)
def env(event):
    print("token length", len(os.environ.get("TOKEN", "")), "mode", os.environ.get("MODE"))
def tick(event):
    print("tick", event["source"], len(event["scheduled_at"]))
PY
	cat >"$d/template.yaml" <<'YAML'
runtime: python3.14
env:
  MODE: local
events:
  - handler: h.ok
    pattern: {k: [one, chain, stop]}
  - handler: h.second
    pattern: {k: [chain, stop]}
  - handler: h.fail
    pattern: {k: [stop, fail]}
  - handler: h.env
    pattern: {k: [never]}
  - handler: h.slow
    pattern: {k: [slow]}
    timeout: 2s
schedules:
  - handler: h.tick
    cron: "0 0 1 1 *"
YAML
}

# no_containers NAME: docker has no container labelled relay.function=NAME.
no_containers() {
	local left
	left=$(docker ps -aq --filter "label=relay.function=$1")
	[ -z "$left" ] || fail "containers left for $1: $left"
}

iv_prefix() { printf 'relay: function "%s" handler "%s": ' "$1" "$2"; }

test_invoke_runs_handlers_like_the_consumer() {
	local f=iv-$$
	trap 'rc=$?; rm_fn_images '"$f"'; (exit $rc); it_cleanup' EXIT
	ivfn "$f"

	# Success: the handler's output with the usual prefix, exit 0.
	run_expect 0 "$RELAY" function invoke "$f" --handler h.ok --event '{"k":"one","n":1}'
	assert_out_empty
	[ "$(grep -c '^relay: function "' "$TMP/err")" -eq 1 ] || fail "forwarded lines: $(cat "$TMP/err")"
	assert_err_contains "$(iv_prefix "$f" h.ok)ok got {\"k\": \"one\", \"n\": 1}"
	no_containers "$f"

	# Cached now: the whole stderr is the one forwarded line.
	run_expect 0 "$RELAY" function invoke "$f" --handler h.ok --event '{"k":"one","n":2}'
	[ "$(cat "$TMP/err")" = "$(iv_prefix "$f" h.ok)ok got {\"k\": \"one\", \"n\": 2}" ] ||
		fail "stderr: $(cat "$TMP/err")"

	# Non-zero exit: that exit status and one line saying so.
	run_expect 3 "$RELAY" function invoke "$f" --handler h.fail --event '{"k":"fail"}'
	assert_err_contains "$(iv_prefix "$f" h.fail)fail says bye"
	assert_err_contains "relay: function invoke: function \"$f\" handler \"h.fail\" failed: exit status 3"

	# Timeout: the rule's 2s, then --timeout; 124 and a message.
	run_expect 124 "$RELAY" function invoke "$f" --event '{"k":"slow"}'
	assert_err_contains "$(iv_prefix "$f" h.slow)slow started"
	assert_err_contains "relay: function invoke: function \"$f\" handler \"h.slow\" timed out after 2s"
	# --timeout overrides the rule's 2s; longer, so that a docker start
	# slowed by a loaded machine cannot use it up (a start that outlasts
	# the handler's timeout is an error, exit 1: it/engine)
	run_expect 124 "$RELAY" function invoke "$f" --handler h.slow --event '{}' --timeout 3s
	assert_err_contains "handler \"h.slow\" timed out after 3s"
	no_containers "$f"

	# Matched handlers in file order; with a failure, the ones after it
	# do not run. Same order as relay function match lists.
	run_expect 0 "$RELAY" function match '{"k":"stop"}'
	assert_out_eq "$(printf '%s\th.ok\n%s\th.second\n%s\th.fail' "$f" "$f" "$f")"
	run_expect 0 "$RELAY" function invoke "$f" --event '{"k":"chain"}'
	[ "$(grep '^relay: function "' "$TMP/err" | sed 's/.*handler "\([^"]*\)".*/\1/' | tr '\n' ' ')" = "h.ok h.second " ] ||
		fail "chain order: $(cat "$TMP/err")"
	sed -i 's/pattern: {k: \[stop, fail\]}/pattern: {k: [stop, fail]}\n  - handler: h.env\n    pattern: {k: [stop]}/' \
		"$RELAY_FUNCTIONS_DIR/$f/template.yaml"
	run_expect 3 "$RELAY" function invoke "$f" --event '{"k":"stop"}'
	[ "$(grep '^relay: function "' "$TMP/err" | sed 's/.*handler "\([^"]*\)".*/\1/' | tr '\n' ' ')" = "h.ok h.second h.fail " ] ||
		fail "stop order: $(cat "$TMP/err")"
	assert_err_lacks 'handler "h.env"'

	# A schedule handler without --event reads the schedule envelope.
	run_expect 0 "$RELAY" function invoke "$f" --handler h.tick
	[ "$(cat "$TMP/err")" = "$(iv_prefix "$f" h.tick)tick relay.schedule 20" ] ||
		fail "stderr: $(cat "$TMP/err")"

	# A secret missing from RELAY_DATA_DIR: exit 1 naming it, no
	# container; once set, the handler sees it (and the template's env).
	sed -i 's/^env:/secrets:\n  TOKEN: iv-token\nenv:/' "$RELAY_FUNCTIONS_DIR/$f/template.yaml"
	run_expect 1 "$RELAY" function invoke "$f" --handler h.env --event '{}'
	# (the template changed: the image is rebuilt, its steps logged)
	[ "$(grep -v ' level=INFO ' "$TMP/err")" = "relay: function invoke: function \"$f\" handler \"h.env\": secret \"iv-token\" (for TOKEN) not found" ] ||
		fail "stderr: $(cat "$TMP/err")"
	no_containers "$f"
	relay_secret_set iv-token abcdefg
	run_expect 0 "$RELAY" function invoke "$f" --handler h.env --event '{}'
	assert_err_contains "$(iv_prefix "$f" h.env)token length 7 mode local"

	# Argument errors: exit 2, one line; unknown handler: 1 naming them.
	run_expect 2 "$RELAY" function invoke "$f" --handler h.ok
	assert_err_contains 'handler "h.ok" handles events: give --event'
	run_expect 1 "$RELAY" function invoke "$f" --handler h.nope --event '{}'
	assert_err_contains "function \"$f\" has no handler \"h.nope\" (handlers: h.ok, h.second, h.fail, h.env, h.slow, h.tick (schedule))"
	run_expect 1 "$RELAY" function invoke "$f" --event '{"k":"none"}'
	assert_err_contains "the event matches no handler of function \"$f\""
	run_expect 1 "$RELAY" function invoke iv-missing-$$ --event '{}'
	assert_err_contains "no function \"iv-missing-$$\""
	no_containers "$f"
}

test_invoke_sigterm_removes_the_container() {
	local f=iv-sig-$$
	trap 'rc=$?; rm_fn_images '"$f"'; (exit $rc); it_cleanup' EXIT
	ivfn "$f"
	"$RELAY" function invoke "$f" --handler h.slow --event '{}' --timeout 60s \
		>"$TMP/out" 2>"$TMP/err" &
	local pid=$!
	track "$pid"
	wait_for 60 grep -qF "slow started" "$TMP/err" || fail "never started: $(cat "$TMP/err")"
	[ -n "$(docker ps -q --filter "label=relay.function=$f")" ] || fail "no running container"
	kill -TERM "$pid"
	local st=0
	wait "$pid" || st=$?
	[ "$st" -eq 143 ] || fail "exit $st, want 143: $(cat "$TMP/err")"
	sanitizer_clean "$TMP/out" "$TMP/err" || fail "sanitizer report from relay function invoke"
	grep -qF "handler \"h.slow\" stopped by Terminated; container removed" "$TMP/err" ||
		fail "stderr: $(cat "$TMP/err")"
	no_containers "$f"
}

# A relay start on the same host (same host name) starting while an invoke
# runs: its orphan sweep removes a worker's leftovers, never invoke's
# container (label relay.local=invoke), whose handler finishes. The
# leftover is a container as a worker of an earlier process on this host
# left it (its labels, another relay.instance), created before the start;
# the sweep must remove it, so the sweep did run while invoke's container
# was there.
test_relay_start_sweep_leaves_a_running_invoke_alone() {
	local f=iv-sweep-$$ host=iv-sweep-$$ inv orphan
	trap 'rc=$?; [ -z "${orphan:-}" ] || docker rm -f "$orphan" >/dev/null 2>&1; rm_fn_images '"$f"'; (exit $rc); it_cleanup' EXIT
	ivfn "$f"
	# 15 s: relay start reaches its sweep in about a second here; the
	# margin is for a loaded machine. The handler must still be running
	# once the sweep is over (checked below), or the test proves nothing.
	cat >>"$RELAY_FUNCTIONS_DIR/$f/h.py" <<'PY'
def nap(event):
    print("nap started", flush=True)
    time.sleep(15)
    print("nap done")
PY
	sed -i 's/^events:$/events:\n  - handler: h.nap\n    pattern: {k: [nap]}/' "$RELAY_FUNCTIONS_DIR/$f/template.yaml"
	unshare --uts sh -c "hostname $host && exec '$RELAY' function invoke '$f' --handler h.nap --event '{}' --timeout 60s" \
		>"$TMP/out" 2>"$TMP/err" &
	local pid=$!
	track "$pid"
	wait_for 90 grep -qF "nap started" "$TMP/err" || fail "never started: $(cat "$TMP/err")"
	inv=$(docker ps -q --no-trunc --filter "label=relay.function=$f")
	[ "$(wc -w <<<"$inv")" -eq 1 ] || fail "want one running invoke container: $inv"
	[ "$(docker inspect -f '{{index .Config.Labels "relay.local"}}' "$inv")" = invoke ] || fail "no relay.local=invoke label"
	orphan=$(docker create --label "relay.function=$f" --label "relay.hostname=$host" \
		--label relay.instance=gone-$$ --label relay.stream=events --label relay.group=relay \
		--label relay.handler=h.ok "$(docker inspect -f '{{.Config.Image}}' "$inv")") || fail "docker create (the leftover)"
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	start_relay_as "$TMP/relay.log" "$host"
	# The sweep runs before the worker starts: it is over now.
	grep -qF "msg=\"removed orphaned execution container\" container=$orphan" "$TMP/relay.log" ||
		fail "the leftover was not swept: $(grep -i orphan "$TMP/relay.log")"
	grep -qF 'msg="removed orphaned containers of this host" removed=1' "$TMP/relay.log" ||
		fail "want exactly one container swept: $(grep -i orphan "$TMP/relay.log")"
	[ -z "$(docker ps -aq --filter "id=$orphan")" ] || fail "the leftover is still there"
	[ "$(docker inspect -f '{{.State.Running}}' "$inv" 2>/dev/null)" = true ] ||
		fail "invoke's container was not running after the sweep (swept, or the handler ended before it)"
	! grep -qF "nap done" "$TMP/err" || fail "the handler ended before the sweep: nothing to protect"
	local st=0
	wait "$pid" || st=$?
	[ "$st" -eq 0 ] || fail "invoke exit $st: $(cat "$TMP/err")"
	grep -qF "$(iv_prefix "$f" h.nap)nap done" "$TMP/err" || fail "stderr: $(cat "$TMP/err")"
	sanitizer_clean "$TMP/out" "$TMP/err" || fail "sanitizer report from relay function invoke"
	stop_relay_pid "$RELAY_PID"
	no_containers "$f"
}

test_invoke_reuses_the_image_relay_start_built() {
	local f=iv-reuse-$$
	trap 'rc=$?; rm_fn_images '"$f"'; (exit $rc); it_cleanup' EXIT
	ivfn "$f"
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	start_relay_as "$TMP/relay.log" "iv-reuse-$$"
	grep -q "msg=\"function prepared\" function=$f .*built=true" "$TMP/relay.log" ||
		fail "relay start did not build: $(grep "$f" "$TMP/relay.log")"
	# relay start logs each build step once too.
	[ "$(grep -cE "level=INFO msg=\"step [0-9]+/[0-9]+: COPY src/ /app/\" function=$f image=relay-fn-$f:[0-9a-f]{16} elapsed=" "$TMP/relay.log")" -eq 1 ] ||
		fail "relay start's build steps: $(grep "$f" "$TMP/relay.log")"
	stop_relay_pid "$RELAY_PID"
	local before after
	before=$(docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' "relay-fn-$f")
	[ "$(printf '%s\n' "$before" | grep -c .)" -eq 1 ] || fail "images: $before"
	unset REDIS_URI REDIS_STREAM REDIS_GROUP
	run_expect 0 "$RELAY" function invoke "$f" --handler h.ok --event '{"k":"one"}'
	assert_err_lacks "step "
	assert_err_lacks "building"
	[ "$(cat "$TMP/err")" = "$(iv_prefix "$f" h.ok)ok got {\"k\": \"one\"}" ] ||
		fail "stderr: $(cat "$TMP/err")"
	after=$(docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' "relay-fn-$f")
	[ "$before" = "$after" ] || fail "images changed: $before -> $after"
	no_containers "$f"
}

test_invoke_logs_each_build_step_once() {
	local f=iv-dep-$$
	IV_DEP="" # global: the EXIT trap runs after this function returned
	trap 'rc=$?; rm_fn_images '"$f"'; [ -z "$IV_DEP" ] || docker rmi "$IV_DEP" >/dev/null 2>&1; (exit $rc); it_cleanup' EXIT
	ivfn "$f"
	# A manifest pip satisfies offline (no requirement, a unique comment:
	# a dependency image of its own, so pip install really runs).
	printf '# iv test %s %s\n' "$$" "$(date +%s%N)" >"$RELAY_FUNCTIONS_DIR/$f/requirements.txt"
	run_expect 0 "$RELAY" function invoke "$f" --handler h.ok --event '{"k":"one"}'
	IV_DEP=$(sed -n 's/.*msg="building dependency image" function=[^ ]* image=\([^ ]*\).*/\1/p' "$TMP/err")
	local dep=$IV_DEP
	[ -n "$dep" ] || fail "no dependency image built: $(cat "$TMP/err")"
	# Each step once, in order, with the elapsed time; the dependency
	# build's RUN pip install among them.
	grep -E 'level=INFO msg="step [0-9]+/[0-9]+: ' "$TMP/err" >"$TMP/steps"
	grep -qE "msg=\"step [0-9]+/[0-9]+: RUN pip install --no-cache-dir -r requirements.txt\" function=$f image=$dep elapsed=[0-9]+\.[0-9]s$" "$TMP/steps" ||
		fail "no pip step: $(cat "$TMP/err")"
	local img total
	for img in "$dep" "relay-fn-$f"; do
		grep -F "image=$img" "$TMP/steps" | sed 's/.*msg="step \([0-9]*\)\/\([0-9]*\):.*/\1 \2/' >"$TMP/nums"
		total=$(head -n1 "$TMP/nums" | cut -d' ' -f2)
		[ -n "$total" ] || fail "no steps for $img: $(cat "$TMP/err")"
		[ "$(cut -d' ' -f1 "$TMP/nums" | tr '\n' ' ')" = "$(seq -s ' ' 1 "$total") " ] ||
			fail "steps of $img not each once in order: $(cat "$TMP/nums")"
	done
	# No per-output-line noise at INFO: the build output stays at DEBUG.
	assert_err_lacks "image build output"
	assert_err_contains "$(iv_prefix "$f" h.ok)ok got {\"k\": \"one\"}"
	# The second run reuses everything: no step at all.
	run_expect 0 "$RELAY" function invoke "$f" --handler h.ok --event '{"k":"one"}'
	assert_err_lacks "step "
}

test_new_then_invoke_each_runtime() {
	local py=iv-new-py-$$ node=iv-new-node-$$ f rt
	trap 'rc=$?; rm_fn_images '"$py $node"'; (exit $rc); it_cleanup' EXIT
	for rt in python3.14 node24; do
		f=$py
		[ "$rt" = node24 ] && f=$node
		run_expect 0 "$RELAY" function new "$f" --runtime "$rt"
		# The command new suggests, as printed.
		local next
		next=$(sed -n 's/^next: relay //p' "$TMP/out")
		[ "$next" = "function invoke $f --event '{\"event_name\":\"hello\",\"name\":\"world\"}'" ] ||
			fail "next: $(cat "$TMP/out")"
		run_expect 0 "$RELAY" function invoke "$f" --event '{"event_name":"hello","name":"world"}'
		assert_out_empty
		[ "$(grep -v ' level=INFO ' "$TMP/err")" = "$(iv_prefix "$f" handler.handler)hello, world" ] ||
			fail "$rt: $(cat "$TMP/err")"
		no_containers "$f"
	done
}

# --event @FILE reads only a regular file: a FIFO, one held open
# by a writer that never writes, and a directory are refused at once
# (exit 2, one line) before any image or container is made. timeout bounds
# each run: an open or read that waits forever shows as exit 124.
test_invoke_event_file_must_be_regular() {
	local f=iv-fifo-$$ p
	ivfn "$f"
	mkfifo "$TMP/fifo" "$TMP/held"
	exec 3<>"$TMP/held"
	for p in "$TMP/fifo" "$TMP/held" "$TMP"; do
		run_expect 2 timeout 10 "$RELAY" function invoke "$f" --handler h.ok --event "@$p"
		assert_out_empty
		[ "$(cat "$TMP/err")" = "relay function invoke: cannot read $p: not a regular file" ] ||
			fail "invoke --event @$p: $(cat "$TMP/err")"
	done
	exec 3>&-
	no_containers "$f"
	[ -z "$(docker images -q "relay-fn-$f")" ] || fail "an image was built for $f"
}
