# What validation accepts, the bootstraps run: every
# shape of handler the rule accepts (two non-empty sides around the last
# dot, no whitespace) is validated by `relay function validate` and then
# run by `relay start` in a real container, once per runtime, against a
# private redis-server and the real Docker daemon. Each rule matches events
# whose "h" is its handler; each handler prints which file ran, and the
# test waits for that line forwarded under the handler's name.
#
# Function names start with "hd-"; each test removes the images it made.


cleanup_images() { # function name
	docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$1" | xargs -r docker rmi -f >/dev/null 2>&1
}

fail_log() {
	echo "assertion failed: $*"
	echo "--- relay log (last 60 lines):"
	tail -n 60 "$TMP/relay.log" 2>/dev/null
	exit 1
}

# put FUNCTION PATH TEXT: writes a file of the function.
put() {
	mkdir -p "$(dirname "$RELAY_FUNCTIONS_DIR/$1/$2")"
	printf '%s\n' "$3" >"$RELAY_FUNCTIONS_DIR/$1/$2"
}

ere() { printf '%s' "$1" | sed 's/[][\.^$*+?(){}|/]/\\&/g'; }

# forwarded FUNCTION HANDLER TEXT: the handler's output line as Relay
# forwards it (the ids after the handler are optional: their place in the
# prefix is changing).
forwarded() {
	printf '^relay: function "%s" handler "%s"( message "[^"]*")?( event "[^"]*")?: %s$' \
		"$(ere "$1")" "$(ere "$2")" "$(ere "$3")"
}

# run_shapes FUNCTION RUNTIME HOST HANDLER=TEXT...: writes the template (one
# rule per handler, matching events whose "h" is that handler), validates
# the function, starts Relay, sends one event per handler and waits for
# each handler's TEXT, exactly once; nothing failed and nothing is left
# pending.
run_shapes() {
	local f=$1 rt=$2 host=$3 pair h want re
	shift 3
	{
		printf 'runtime: %s\nevents:\n' "$rt"
		for pair in "$@"; do
			h=${pair%%=*}
			printf '  - handler: "%s"\n    pattern: {h: ["%s"]}\n' "$h" "$h"
		done
	} >"$RELAY_FUNCTIONS_DIR/$f/template.yaml"
	run "$RELAY" function validate "$RELAY_FUNCTIONS_DIR"
	assert_status 0
	assert_out_eq "$f: ok"

	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	start_relay_as "$TMP/relay.log" "$host"
	wait_for 180 grep -qF "msg=\"function prepared\" function=$f" "$TMP/relay.log" ||
		fail_log "$f was not prepared"
	for pair in "$@"; do
		h=${pair%%=*}
		rcli XADD events '*' event "{\"h\":\"$h\"}" >/dev/null
	done
	for pair in "$@"; do
		h=${pair%%=*}
		want=${pair#*=}
		re=$(forwarded "$f" "$h" "$want")
		wait_for 60 grep -qE -- "$re" "$TMP/relay.log" ||
			fail_log "handler $h did not print \"$want\""
	done
	wait_for 30 eval '[ "$(rcli XPENDING events relay | head -n1)" = 0 ]' ||
		fail_log "events still pending"
	for pair in "$@"; do
		h=${pair%%=*}
		want=${pair#*=}
		[ "$(grep -cE -- "$(forwarded "$f" "$h" "$want")" "$TMP/relay.log")" -eq 1 ] ||
			fail_log "handler $h ran more than once"
	done
	! grep -q 'relay bootstrap:' "$TMP/relay.log" || fail_log "a bootstrap failed"
	[ "$(rcli XLEN relay:events:dlq)" = 0 ] || fail_log "dead letters: $(rcli XRANGE relay:events:dlq - +)"
	stop_relay_pid "$RELAY_PID"
	cleanup_images "$f"
}

# python3.14: the module is importlib.import_module(<text before the last
# dot>) from the function's root, exactly as written.
test_python_handler_shapes() {
	local f=hd-py
	cleanup_images "$f"
	put "$f" plain.py 'def handler(event):
    print("ran plain.py")'
	# module "dd." is the empty-named module of package dd: dd/.py
	put "$f" dd/.py 'def handler(event):
    print("ran dd/.py")'
	put "$f" my-mod.py 'def main(event):
    print("ran my-mod.py")'
	# a namespace package (no __init__.py) and a regular one
	put "$f" events/created.py 'def handler(event):
    print("ran events/created.py")'
	put "$f" pkg/__init__.py ''
	put "$f" pkg/sub.py 'async def fn(event):
    print("ran pkg/sub.py")'
	put "$f" x_y.py 'def _f_(event):
    print("ran x_y.py")'
	# The bootstrap leaves without the interpreter's teardown, but only
	# after what a normal exit does: non-daemon threads, atexit handlers.
	put "$f" bg.py 'import atexit, threading, time
def thread(event):
    threading.Thread(target=lambda: (time.sleep(0.3), print("ran bg.py thread"))).start()
def atexit_(event):
    atexit.register(lambda: print("ran bg.py atexit"))'
	run_shapes "$f" python3.14 hd-py-worker \
		bg.thread='ran bg.py thread' \
		bg.atexit_='ran bg.py atexit' \
		plain.handler='ran plain.py' \
		dd..handler='ran dd/.py' \
		my-mod.main='ran my-mod.py' \
		events.created.handler='ran events/created.py' \
		pkg.sub.fn='ran pkg/sub.py' \
		x_y._f_='ran x_y.py'
}

# node24: <module> is the text before the last dot, dots kept; the first
# of <module>.mjs, <module>/index.mjs, <module>.js, <module>/index.js,
# <module>.cjs, <module>/index.cjs, then the same with a dotted module's
# dots as directories.
test_node_handler_shapes() {
	local f=hd-node
	cleanup_images "$f"
	put "$f" plain.mjs 'export function handler() { console.log("ran plain.mjs"); }'
	put "$f" dd..mjs 'export function handler() { console.log("ran dd..mjs"); }'
	# no package.json: Relay injects {"type":"module"}, so .js is ESM
	put "$f" my-mod.js 'export const main = async () => console.log("ran my-mod.js");'
	# dots kept first: events.created.mjs, not events/created.js
	put "$f" events.created.mjs 'export function handler() { console.log("ran events.created.mjs"); }'
	put "$f" events/created.js 'export function handler() { console.log("ran events/created.js"); }'
	# then the dots as directories
	put "$f" pkg/sub/index.mjs 'export function fn() { console.log("ran pkg/sub/index.mjs"); }'
	put "$f" dir/index.mjs 'export function handler() { console.log("ran dir/index.mjs"); }'
	# .mjs before .js
	put "$f" order.mjs 'export function handler() { console.log("ran order.mjs"); }'
	put "$f" order.js 'export function handler() { console.log("ran order.js"); }'
	put "$f" lib.cjs 'exports.c = () => console.log("ran lib.cjs");'
	put "$f" nested/mod.mjs 'export function handler() { console.log("ran nested/mod.mjs"); }'
	run_shapes "$f" node24 hd-node-worker \
		plain.handler='ran plain.mjs' \
		dd..handler='ran dd..mjs' \
		my-mod.main='ran my-mod.js' \
		events.created.handler='ran events.created.mjs' \
		pkg.sub.fn='ran pkg/sub/index.mjs' \
		dir.handler='ran dir/index.mjs' \
		order.handler='ran order.mjs' \
		lib.c='ran lib.cjs' \
		nested/mod.handler='ran nested/mod.mjs'
}
