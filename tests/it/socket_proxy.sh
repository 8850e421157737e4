# Relay behind a Docker socket proxy: the stand-in
# tecnativa/docker-socket-proxy (scripts/standin/socket-proxy, Debian's
# haproxy) runs on the host on a free loopback port in front of the real
# daemon, with the allow-list each test gives it. Its own rules are checked
# with curl; then relay health and relay start go through it, with the
# spec's minimal allow-list (PING VERSION BUILD CONTAINERS POST, no IMAGES):
# functions still build and run (the attach's half-close, the handler's
# stdin EOF, passes through the proxy's tunnel), image cleanup is skipped
# with one WARN, and a refusal names the request and the proxy variable.
#
# Relays run under their own host names; function names start with "sp-"
# and the tests remove the relay-fn-sp-* images they made.

PROXY_DIR=$ROOT/scripts/standin/socket-proxy
MINIMAL=(PING=1 VERSION=1 BUILD=1 CONTAINERS=1 POST=1)

# start_proxy [VAR=VALUE...]: the stand-in proxy with only these variables
# (the entrypoint's defaults for the rest) on a free loopback port
# (PROXY_PORT); log in $TMP/proxy-<port>.log.
start_proxy() {
	PROXY_PORT=$(free_port)
	env -i PATH="$PATH" "$@" PROXY_CFG="$PROXY_DIR/haproxy.cfg" LISTEN="127.0.0.1:$PROXY_PORT" \
		"$PROXY_DIR/entrypoint" >"$TMP/proxy-$PROXY_PORT.log" 2>&1 &
	track $!
	wait_for 10 bash -c "echo > /dev/tcp/127.0.0.1/$PROXY_PORT" ||
		fail "proxy did not listen: $(cat "$TMP/proxy-$PROXY_PORT.log")"
}

# status_of METHOD PATH [JSON]: the HTTP status the proxy answers.
status_of() {
	curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X "$1" ${3:+-H 'Content-Type: application/json' -d "$3"} \
		"http://127.0.0.1:$PROXY_PORT$2"
}

expect_status() { # want METHOD PATH [JSON]
	local got
	got=$(status_of "${@:2}")
	[ "$got" = "$1" ] || fail "$2 $3 through the proxy: HTTP $got, want $1"
}

fail_log() { # the log first: tests/run shows the end of the output
	echo "--- relay log (last 60 lines):"
	tail -n 60 "$TMP/relay.log" 2>/dev/null
	echo "assertion failed: $*"
	exit 1
}

wait_log() { # seconds fixed-string
	wait_for "$1" grep -qF -- "$2" "$TMP/relay.log" || fail_log "relay log lacks (after $1s): $2"
}

count_log() { # fixed-string...: lines of the relay log containing all of them
	local f=$TMP/relay.log s
	cp "$f" "$TMP/count.tmp"
	for s in "$@"; do
		grep -F -- "$s" "$TMP/count.tmp" >"$TMP/count.tmp2" || true
		mv "$TMP/count.tmp2" "$TMP/count.tmp"
	done
	wc -l <"$TMP/count.tmp"
}

expect_count() { # n fixed-string...
	local n
	n=$(count_log "${@:2}")
	[ "$n" -eq "$1" ] || fail_log "$n log lines with [${*:2}], want $1"
}

# pyfn name marker: a Python function handling events whose "fn" is its
# name; it prints "<marker> <n>".
pyfn() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	mkdir -p "$d"
	printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {fn: [%s]}\n' "$1" >"$d/template.yaml"
	printf 'def handler(event):\n    print("%s " + event["n"])\n' "$2" >"$d/main.py.tmp"
	mv "$d/main.py.tmp" "$d/main.py"
}

# ev fn n: one event for function fn; EV_ID is its stream entry id.
ev() {
	EV_ID=$(redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"event_id\":\"evt_$2\",\"fn\":\"$1\",\"n\":\"$2\"}")
}

handled() { # fn n marker: the handler's output line for event n
	wait_for 60 grep -qE -- "^relay: function \"$1\" handler \"main.handler\": $3 $2\$" "$TMP/relay.log" ||
		fail_log "event $2 of $1 not handled with \"$3\""
}

updates_are() { # function n: the log has n "function updated" lines for it
	[ "$(count_log "msg=\"function updated\" function=$1")" -eq "$2" ]
}

nothing_pending() {
	wait_for 30 acked_through "$REDIS_PORT" events relay "$EV_ID" || fail_log "event $EV_ID still pending or unread"
}

# dk ARGS...: the docker CLI on the daemon's own socket, not the proxy.
dk() { env -u DOCKER_HOST docker "$@"; }

fn_images() { # function: its relay-fn images, one a line
	dk images --format '{{.Repository}}:{{.Tag}}' | grep -E "^relay-fn-$1:" || true
}

remove_images() { # function
	local imgs
	imgs=$(fn_images "$1")
	[ -z "$imgs" ] || dk rmi $imgs >/dev/null 2>&1 || true
}

# start_relay_behind_proxy HOSTNAME: redis and relay start through the proxy.
start_relay_behind_proxy() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	export DOCKER_HOST=tcp://127.0.0.1:$PROXY_PORT LOG_LEVEL=debug
	start_relay_as "$TMP/relay.log" "$1"
}

# ---- the proxy's own rules -------------------------------------------------

test_allow_list() {
	local id
	id=$(dk create --label relay-it=socket-proxy python:3.14-slim true) || fail "docker create"
	start_proxy "${MINIMAL[@]}"
	expect_status 200 GET /_ping
	expect_status 200 HEAD /_ping
	expect_status 200 GET /v1.41/version
	expect_status 200 GET /v1.41/containers/json
	expect_status 200 GET "/v1.41/containers/$id/json"
	expect_status 403 GET /v1.41/images/json
	expect_status 403 GET /v1.41/secrets
	expect_status 403 GET /v1.41/info
	expect_status 403 GET /v1.41/containersx
	# Running a command in a container is EXEC, whatever CONTAINERS and POST say.
	expect_status 403 POST "/v1.41/containers/$id/exec" '{"Cmd":["true"]}'
	expect_status 403 POST "/containers/$id/exec" '{"Cmd":["true"]}'
	expect_status 403 POST "/v1.41/containers%2F$id%2Fexec"
	grep -qF '"GET /v1.41/images/json HTTP/1.1"' "$TMP/proxy-$PROXY_PORT.log" || fail "the proxy logs no requests"

	# With EXEC=1 the exec request reaches the daemon (which refuses it
	# for a container that is not running).
	start_proxy "${MINIMAL[@]}" EXEC=1
	expect_status 409 POST "/v1.41/containers/$id/exec" '{"Cmd":["true"]}'

	# The defaults: EVENTS PING VERSION, GET and HEAD only.
	start_proxy
	expect_status 200 GET /_ping
	expect_status 200 GET /version
	expect_status 403 GET /v1.41/containers/json
	expect_status 403 POST /v1.41/containers/create
	expect_status 403 DELETE "/v1.41/containers/$id"
	start_proxy CONTAINERS=1
	expect_status 200 GET /v1.41/containers/json
	expect_status 403 POST /v1.41/containers/create
	expect_status 403 DELETE "/v1.41/containers/$id"
	# 0 is off, like an unset variable.
	start_proxy PING=0 VERSION=0
	expect_status 403 GET /_ping
	expect_status 403 GET /version
	dk rm -f "$id" >/dev/null
}

# ---- relay through the proxy -------------------------------------------

test_health_through_proxy() {
	redis_up
	start_proxy "${MINIMAL[@]}"
	export REDIS_URI=127.0.0.1:$REDIS_PORT DOCKER_HOST=tcp://127.0.0.1:$PROXY_PORT
	run "$RELAY" health
	assert_status 0
	assert_out_contains "docker: ok (tcp://127.0.0.1:$PROXY_PORT, API 1."
	assert_err_empty
}

# What a user sees when the proxy refuses something Relay needs: the
# request, the endpoint, the proxy and the variable, on one line.
test_health_refused_names_request() {
	redis_up
	start_proxy PING=0 VERSION=1
	export REDIS_URI=127.0.0.1:$REDIS_PORT DOCKER_HOST=tcp://127.0.0.1:$PROXY_PORT
	run "$RELAY" health
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: health: docker: Docker API request GET /_ping to tcp://127.0.0.1:$PROXY_PORT refused with HTTP 403, probably by a Docker socket proxy (allowing it takes PING=1)"

	start_proxy VERSION=0
	export DOCKER_HOST=tcp://127.0.0.1:$PROXY_PORT
	run "$RELAY" health
	assert_status 1
	assert_err_lines 1
	assert_err_contains "relay: health: docker: Docker API request GET /version to tcp://127.0.0.1:$PROXY_PORT refused with HTTP 403, probably by a Docker socket proxy (allowing it takes VERSION=1)"
}

# The spec's minimal allow-list: no IMAGES. The existence check is refused,
# so the function is built; the handler's stdin EOF passes the proxy's
# tunnel (the Python bootstrap reads stdin to its end); updates rebuild and
# serve, and cleaning the old images up is skipped with one WARN for the
# process, not one per update.
test_minimal_allow_list_builds_and_runs() {
	local fn=sp-minimal old
	remove_images "$fn"
	start_proxy "${MINIMAL[@]}"
	pyfn "$fn" first
	start_relay_behind_proxy sp-minimal-host
	wait_log 5 "msg=\"function prepared\" function=$fn"
	ev "$fn" 1
	handled "$fn" 1 first
	nothing_pending
	expect_count 1 level=WARN 'msg="cannot check for existing images; building every function image instead (IMAGES=1 on the Docker socket proxy allows the check)"'
	old=$(fn_images "$fn")
	[ -n "$old" ] || fail "no image for $fn"

	# The startup cleanup is the first one refused.
	wait_log 30 'msg="old function images are not removed: the Docker daemon refused image cleanup (IMAGES=1 on the Docker socket proxy allows it); tried again hourly"'

	pyfn "$fn" second
	wait_log 120 "msg=\"function updated\" function=$fn"
	ev "$fn" 2
	handled "$fn" 2 second
	nothing_pending

	pyfn "$fn" third
	wait_for 120 updates_are "$fn" 2 || fail_log "second update not made"
	wait_log 30 "msg=\"image cleanup skipped: the Docker daemon refused the last one\" function=$fn"
	ev "$fn" 3
	handled "$fn" 3 third
	nothing_pending

	# One refused listing, one WARN each for the check and the cleanup.
	expect_count 1 'msg="docker request" method=GET path=/v1.41/images/json'
	expect_count 1 'msg="docker request" method=GET path=/v1.41/images/json status=403'
	expect_count 2 level=WARN IMAGES=1
	expect_count 1 level=WARN 'msg="old function images are not removed'
	expect_count 1 level=WARN 'msg="cannot check for existing images'
	expect_count 0 level=ERROR
	dk image inspect "$old" >/dev/null 2>&1 || fail "the old image $old was removed"
	stop_relay_pid "$RELAY_PID"
	remove_images "$fn"
}

# Without BUILD the function cannot be prepared; the error logged says
# which request the proxy refused and how to allow it.
test_build_refused_names_request() {
	local fn=sp-nobuild
	remove_images "$fn"
	start_proxy PING=1 VERSION=1 CONTAINERS=1 IMAGES=1 POST=1
	pyfn "$fn" never
	start_relay_behind_proxy sp-nobuild-host
	wait_log 10 "msg=\"image build failed; function unavailable\" function=$fn"
	expect_count 1 level=ERROR "function=$fn" "image build failed: building relay-fn-$fn:" "Docker API request POST /v1.41/build to tcp://127.0.0.1:$PROXY_PORT refused with HTTP 403, probably by a Docker socket proxy (allowing it takes BUILD=1 and POST=1)"
	stop_relay_pid "$RELAY_PID"
	[ -z "$(fn_images "$fn")" ] || fail "an image was built without BUILD"
}

# With IMAGES=1 as well, an update removes the old image through the proxy
# and nothing warns.
test_images_allowed_gc_works() {
	local fn=sp-gc old
	remove_images "$fn"
	start_proxy "${MINIMAL[@]}" IMAGES=1
	pyfn "$fn" first
	start_relay_behind_proxy sp-gc-host
	wait_log 5 "msg=\"function prepared\" function=$fn"
	old=$(fn_images "$fn")
	[ -n "$old" ] || fail "no image for $fn"
	ev "$fn" 1
	handled "$fn" 1 first
	pyfn "$fn" second
	wait_log 120 "msg=\"function updated\" function=$fn"
	wait_log 30 "msg=\"removed unused function image\" image=$old"
	dk image inspect "$old" >/dev/null 2>&1 && fail "the old image $old is still there"
	ev "$fn" 2
	handled "$fn" 2 second
	nothing_pending
	expect_count 0 level=WARN
	stop_relay_pid "$RELAY_PID"
	remove_images "$fn"
}
