# RELAY_OCI_RUNTIME: every execution container gets
# HostConfig.Runtime = the value, and a runtime the Docker daemon does not
# list in GET /info is a startup error naming the ones it has. Real
# redis-server and Docker daemon; scripts/ensure-docker registers crun.
#
# Function names start with "ort-"; each test removes the images it made.

ort_env() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
}

ort_cleanup_images() {
	local rc=$?
	rm_fn_images 'ort-*'
	return "$rc"
}

# The daemon's runtimes as docker_check_runtime lists them: sorted, ", ".
ort_daemon_runtimes() {
	docker info --format '{{json .Runtimes}}' | jq -r 'keys | sort | join(", ")'
}

# ort_runtime_of FN KIND: the HostConfig.Runtime of FN's running
# containers on this relay (KIND standby: only the standby ones), one a line.
ort_runtime_of() {
	local f=(--filter "label=relay.function=$1" --filter "label=relay.hostname=$ORT_HOST")
	[ "$2" = standby ] && f+=(--filter label=relay.standby=true)
	local ids
	ids=$(docker ps -q "${f[@]}")
	[ -n "$ids" ] || return 1
	# shellcheck disable=SC2086
	docker inspect --format '{{.HostConfig.Runtime}}' $ids
}
ort_runtime_is() { [ "$(ort_runtime_of "$1" "$2" | sort -u)" = "$3" ]; }

test_crun_runs_the_execution_containers() {
	trap 'ort_cleanup_images; it_cleanup' EXIT
	docker info --format '{{json .Runtimes}}' | jq -e 'has("crun")' >/dev/null ||
		fail "the Docker daemon has no crun runtime (scripts/ensure-docker registers it): $(ort_daemon_runtimes)"
	mkdir -p "$RELAY_FUNCTIONS_DIR/ort-crun"
	# The handler prints, then sleeps s seconds while the test inspects
	# the running container.
	printf 'import time\ndef handler(event):\n    print("ort", event["n"], flush=True)\n    time.sleep(float(event["s"]))\n' \
		>"$RELAY_FUNCTIONS_DIR/ort-crun/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.handler\n    pattern: {fn: [ort-crun]}\n' \
		>"$RELAY_FUNCTIONS_DIR/ort-crun/template.yaml"
	ort_env
	ORT_HOST=ort-crun-host
	# STANDBY_MAX=0: crun on this machine's cgroup v1 cannot update a running
	# container's CPU quota (EBUSY on memory.limit_in_bytes), which a parked
	# standby container needs (docs/configuration.md "OCI runtime").
	export RELAY_OCI_RUNTIME=crun STANDBY_MAX=0
	start_relay_as "$TMP/relay.log" "$ORT_HOST"
	local id
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"fn":"ort-crun","n":"1","s":"3"}')
	# Fresh (on demand): its output line arrives, and it runs under crun.
	wait_for 60 grep -qF 'handler "h.handler": ort 1' "$TMP/relay.log" ||
		fail "no output line: $(grep -v 'docker request' "$TMP/relay.log" | tail -n 20)"
	ort_runtime_is ort-crun any crun || fail "running container's runtime: $(ort_runtime_of ort-crun any)"
	wait_for 60 grep -qF "executed for event \"$id\"" "$TMP/relay.log" ||
		fail "no success for $id: $(grep -v 'docker request' "$TMP/relay.log" | tail -n 20)"
	# A second one (STANDBY_MAX=0: on demand again, see the header).
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"fn":"ort-crun","n":"2","s":"0"}')
	wait_for 60 grep -qF "executed for event \"$id\"" "$TMP/relay.log" ||
		fail "no success for $id: $(grep -v 'docker request' "$TMP/relay.log" | tail -n 20)"
	grep -qF 'handler "h.handler": ort 2' "$TMP/relay.log" || fail "no output line for event 2"
	stop_relay_pid "$RELAY_PID"
	unset RELAY_OCI_RUNTIME STANDBY_MAX
}

test_unknown_runtime_fails_startup() {
	ort_env
	export RELAY_OCI_RUNTIME=nosuch-runtime
	local have t0=$SECONDS
	have=$(ort_daemon_runtimes)
	run_expect 1 timeout 30 "$RELAY" start # a configuration error (docs/operations.md)
	[ $((SECONDS - t0)) -le 15 ] || fail "took $((SECONDS - t0))s"
	assert_err_contains "level=ERROR"
	assert_err_contains "invalid configuration: RELAY_OCI_RUNTIME \\\"nosuch-runtime\\\" is not a runtime of the Docker daemon (it has: $have)"
	assert_err_lacks "worker started"
	[ -z "$(docker ps -aq --filter label=relay.function=ort-none)" ] || fail "a container was created"
	unset RELAY_OCI_RUNTIME
}

test_malformed_runtime_is_a_config_error() {
	export REDIS_URI=127.0.0.1:1 REDIS_STREAM=events REDIS_GROUP=relay DOCKER_HOST=unix:///nonexistent
	export RELAY_OCI_RUNTIME='../bin/sh'
	run_expect 1 timeout 10 "$RELAY" start
	assert_err_lines 1
	assert_err_contains "invalid configuration: RELAY_OCI_RUNTIME '../bin/sh' is invalid (a byte outside A-Z a-z 0-9 . _ -)"
	assert_err_lacks "cannot reach"
	unset RELAY_OCI_RUNTIME DOCKER_HOST
}
