# Startup with several new functions: their images
# are prepared concurrently (at most min(cores at least 2, 4) at once) by
# preparer threads that are gone before Relay consumes; every good function
# is prepared and served, each handler runs once for its event, and one
# function whose build fails (an invalid requirements.txt: pip rejects it
# without the network) is logged and skipped while the others serve. Two
# of the six are Node functions with a package.json, whose npm install
# makes their builds long enough to overlap on any machine.
# Relay runs as a child process against a private redis-server and the real
# Docker daemon. Function names start with "mf<pid>-"; their images are
# removed at the end.

MF_NAMES=()

mf_cleanup() { rm_fn_images "${MF_NAMES[@]}"; }

# mf_fn NAME KIND: two handlers (h.a, h.b), both for events {"kind": KIND}.
mf_fn() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	MF_NAMES+=("$1")
	mkdir -p "$d"
	printf 'def a(event):\n    print("out %s a", event["n"])\n\ndef b(event):\n    print("out %s b", event["n"])\n' \
		"$1" "$1" >"$d/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.a\n    pattern: {kind: [%s]}\n  - handler: h.b\n    pattern: {kind: [%s]}\n' \
		"$2" "$2" >"$d/template.yaml"
}

# mf_node_fn NAME KIND: the same for node24, with a package.json of its
# own: its dependency image runs `npm install` (seconds even with nothing to
# install), so two of them being built overlap whatever the load; without
# such a step a build can end before the next thread logs its start, and
# "at once" would depend on the scheduler.
mf_node_fn() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	MF_NAMES+=("$1")
	mkdir -p "$d"
	printf 'export function a(event) { console.log(`out %s a ${event.n}`); }\nexport function b(event) { console.log(`out %s b ${event.n}`); }\n' \
		"$1" "$1" >"$d/h.js"
	printf '{"name": "%s", "version": "1.0.0", "private": true, "type": "module"}\n' "$1" >"$d/package.json"
	printf 'runtime: node24\nevents:\n  - handler: h.a\n    pattern: {kind: [%s]}\n  - handler: h.b\n    pattern: {kind: [%s]}\n' \
		"$2" "$2" >"$d/template.yaml"
}

# max_builds_at_once LOG NAMES...: the most builds of these functions in
# progress at once, from the log's "building function image" and "built
# function image" lines (written when each build starts and ends).
max_builds_at_once() {
	local log=$1
	shift
	printf '%s\n' "$@" >"$TMP/names"
	awk 'NR == FNR { want["function=" $0] = 1; next }
		/msg="building function image"/ || /msg="built function image"/ {
			for (i = 1; i <= NF; i++) if ($i in want) {
				cur += /msg="building/ ? 1 : -1
				if (cur > max) max = cur
			}
		}
		END { print max + 0 }' "$TMP/names" "$log"
}

test_startup_prepares_many_functions_concurrently() {
	trap 'rc=$?; mf_cleanup; (exit $rc); it_cleanup' EXIT
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	local p=mf$$ i good=()
	for i in 1 2 3 4 5 6; do
		if [ "$i" -le 2 ]; then
			mf_node_fn "$p-$i" "k$i"
		else
			mf_fn "$p-$i" "k$i"
		fi
		good+=("$p-$i")
	done
	# Sorts first: its failure must not hold back the others.
	mf_fn "$p-0bad" bad
	echo 'this is not a requirement !!!' >"$RELAY_FUNCTIONS_DIR/$p-0bad/requirements.txt"

	start_relay_as "$TMP/relay.log" "$p-host"
	local log=$TMP/relay.log
	# Finished in name order, as one at a time would: six prepared (built
	# now), the bad one logged once and skipped.
	[ "$(grep 'msg="function prepared"' "$log" | grep -o "function=$p-[^ ]*" | tr '\n' ' ')" = \
		"function=$p-1 function=$p-2 function=$p-3 function=$p-4 function=$p-5 function=$p-6 " ] ||
		fail "prepared: $(grep 'msg="function prepared"' "$log")"
	[ "$(grep 'msg="function prepared"' "$log" | grep -c 'built=true')" -eq 6 ] || fail "not every image was built"
	[ "$(grep -c "msg=\"image build failed; function unavailable\" function=$p-0bad " "$log")" -eq 1 ] ||
		fail "the bad function's build failure was not logged once: $(grep "$p-0bad" "$log")"
	grep -q "function=$p-0bad error=.*pip install --no-cache-dir -r requirements.txt" "$log" ||
		fail "the failure does not name the dependency install"
	grep -qF 'msg="Loaded 6 function(s)"' "$log" || fail "$(grep Loaded "$log")"
	# Some builds ran at the same time, never more than the pool allows.
	local most bound cores
	cores=$(nproc)
	bound=$((cores < 2 ? 2 : cores))
	bound=$((bound > 4 ? 4 : bound))
	most=$(max_builds_at_once "$log" "${good[@]}")
	echo "builds in progress at once: at most $most (pool $bound)"
	[ "$most" -ge 2 ] || fail "the builds ran one at a time"
	[ "$most" -le "$bound" ] || fail "$most builds at once, more than $bound"
	# The preparer threads are gone once Relay consumes.
	! grep -q '^prepare-' /proc/"$RELAY_PID"/task/*/comm || fail "a preparer thread outlived startup"

	# Each handler of each good function runs once for its event.
	for i in 1 2 3 4 5 6; do
		redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"kind\":\"k$i\",\"n\":$i}" >/dev/null
	done
	local last
	last=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"bad","n":0}')
	wait_for 120 acked_through "$REDIS_PORT" events relay "$last" || fail "events not all handled: $(tail -n 20 "$log")"
	for i in 1 2 3 4 5 6; do
		[ "$(grep -c "out $p-$i a $i\$" "$log")" -eq 1 ] || fail "$p-$i h.a did not run once"
		[ "$(grep -c "out $p-$i b $i\$" "$log")" -eq 1 ] || fail "$p-$i h.b did not run once"
	done
	! grep -q "out $p-0bad" "$log" || fail "the bad function ran"
	[ "$(redis-cli -p "$REDIS_PORT" XLEN events:dlq)" -eq 0 ] || fail "something was dead-lettered"

	# The state database: six ready with two handlers each, the bad one pending.
	run "$RELAY" function ls
	assert_status 0
	[ "$(awk -v p="$p-" 'index($1, p) == 1 { print $1, $3, $4 }' "$TMP/out" | tr '\n' ';')" = \
		"$p-0bad pending 2;$p-1 ready 2;$p-2 ready 2;$p-3 ready 2;$p-4 ready 2;$p-5 ready 2;$p-6 ready 2;" ] ||
		fail "function ls: $(cat "$TMP/out")"
	stop_relay_pid "$RELAY_PID"
}
