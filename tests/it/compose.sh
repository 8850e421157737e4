# Relay as docs/operations.md's "Running in containers" deploys it: the
# Dockerfile's image and compose.dev.yaml (relay, redis, socket-proxy) with
# Debian's docker-compose 1.29, against the real Docker daemon. The images
# the file names come from scripts/standin-images deploy on machines
# without a registry.

TRY_IT_EVENT='{"event_id":"evt_123","event_name":"INSERT","table_name":"users","new_image":{"id":"user_123","name":"John Doe","email":"john@example.com"}}'

# compose_setup [override.yaml]: a private project (its own name, relay
# host name, image tag and metrics port) torn down with `down -v` when the
# test ends, whatever happens.
compose_setup() {
	command -v docker-compose >/dev/null || fail "docker-compose is not installed (scripts/install-deps)"
	"$ROOT/scripts/standin-images" deploy >"$TMP/standin.log" 2>&1 ||
		fail "stand-in images: $(tail -n 20 "$TMP/standin.log")"
	# scripts/test builds Relay's image in the background for the build
	# cache; wait until it is done rather than build the same layers twice.
	flock /run/lock/relay-image-cache.lock true
	PROJECT=relayit$$
	export RELAY_HOSTNAME=relay-it-$$ RELAY_IMAGE=relay:it-$$ RELAY_METRICS_PORT
	RELAY_METRICS_PORT=$(free_port)
	DC=(docker-compose --ansi never -p "$PROJECT" -f "$ROOT/compose.dev.yaml")
	[ $# -gt 0 ] && DC+=(-f "$1")
	trap compose_teardown EXIT
}

compose_teardown() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "--- relay's log:"
		"${DC[@]}" logs --no-color relay 2>&1 | tail -n 40
	fi
	"${DC[@]}" down -v --remove-orphans >/dev/null 2>&1
	docker image rm "$RELAY_IMAGE" >/dev/null 2>&1
	(exit "$rc")
	it_cleanup
}

dc() { "${DC[@]}" "$@"; }

relay_cid() { dc ps -q relay; }

health_is() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$(relay_cid)")" = "$1" ]; }

redis_cli() { dc exec -T redis redis-cli "$@"; }

# logs_have COUNT TEXT: relay's log holds TEXT at least COUNT times.
logs_have() { [ "$(dc logs --no-color relay 2>&1 | grep -cF -- "$2")" -ge "$1" ]; }

# proxy_status METHOD PATH: the HTTP status socket-proxy answers, asked
# from inside the relay container (bash's /dev/tcp: the image has no curl).
proxy_status() {
	dc exec -T relay bash -c 'exec 3<>/dev/tcp/socket-proxy/2375 &&
		printf "%s %s HTTP/1.1\r\nHost: socket-proxy\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" "$0" "$1" >&3 &&
		head -n 1 <&3' "$1" "$2" | awk '{ print $2 }'
}

# up_healthy: `up --build -d`, then relay healthy within 60 s.
up_healthy() {
	dc up --build -d >"$TMP/up.log" 2>&1 || fail "compose up: $(tail -n 30 "$TMP/up.log")"
	wait_for 60 health_is healthy || fail "relay not healthy within 60 s ($(docker inspect -f '{{.State.Health.Status}}' "$(relay_cid)"))"
}

# try_it_lines ID: the plain relay: lines of relay's log from the first
# one about message ID on, at most six.
try_it_lines() {
	dc logs --no-color relay 2>&1 | sed 's/^[^|]*| //' | grep '^relay: ' |
		awk -v first="relay: function \"user-events-python\" rule \"events.created.handler\" matched event \"$1\"" \
			'$0 == first { on = 1 } on' | head -n 6
}

# try_it: the README's Try-it event through the redis service; relay's
# log holds the spec's six lines for it, in order, exactly, and nothing
# stays pending.
try_it() {
	local id want
	id=$(redis_cli XADD events '*' event "$TRY_IT_EVENT" | tr -d '\r')
	[[ "$id" =~ ^[0-9]+-[0-9]+$ ]] || fail "XADD answered: $id"
	want="relay: function \"user-events-python\" rule \"events.created.handler\" matched event \"$id\"
relay: function \"user-events-python\" handler \"events.created.handler\": User created: user_123
relay: function \"user-events-python\" handler \"events.created.handler\" executed for event \"$id\"
relay: function \"welcome-email-node\" rule \"handler.handler\" matched event \"$id\"
relay: function \"welcome-email-node\" handler \"handler.handler\": Sending welcome email to john@example.com
relay: function \"welcome-email-node\" handler \"handler.handler\" executed for event \"$id\""
	six() { [ "$(try_it_lines "$id" | wc -l)" -eq 6 ]; }
	wait_for 60 six || fail "not six lines for $id: $(try_it_lines "$id")"
	[ "$(try_it_lines "$id")" = "$want" ] || fail "the Try-it lines differ:
$(diff <(echo "$want") <(try_it_lines "$id"))"
	wait_for 20 pending_zero || fail "XPENDING: $(redis_cli XPENDING events relay | head -n 1)"
}

pending_zero() { [ "$(redis_cli XPENDING events relay | head -n 1 | tr -d '\r')" = 0 ]; }

test_image_as_documented() {
	# The image compose.dev.yaml builds, looked at from outside.
	compose_setup
	dc build relay >"$TMP/build.log" 2>&1 || fail "build: $(tail -n 30 "$TMP/build.log")"
	local version
	run_expect 0 docker run --rm "$RELAY_IMAGE" relay --version
	version=$(cat "$TMP/out")
	run_expect 0 "$RELAY" --version
	[ "$version" = "$(cat "$TMP/out")" ] || fail "image's relay --version: $version"
	[ "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$RELAY_IMAGE")" = "${version#relay }" ] ||
		fail "label org.opencontainers.image.version is not ${version#relay }"
	[ -n "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.source"}}' "$RELAY_IMAGE")" ] ||
		fail "no org.opencontainers.image.source label"
	[ "$(docker image inspect -f '{{json .Config.Cmd}}' "$RELAY_IMAGE")" = '["relay","start"]' ] ||
		fail "CMD is $(docker image inspect -f '{{json .Config.Cmd}}' "$RELAY_IMAGE")"
	[ "$(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$RELAY_IMAGE")" = '["CMD","relay","health"]' ] ||
		fail "HEALTHCHECK is $(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$RELAY_IMAGE")"
	docker image inspect -f '{{json .Config.Volumes}}' "$RELAY_IMAGE" | grep -qF '"/var/lib/relay"' ||
		fail "/var/lib/relay is not a volume"
	# Only what the binary needs: no compiler, no Docker CLI, no library
	# missing, not root.
	run_expect 0 docker run --rm --entrypoint bash "$RELAY_IMAGE" -c \
		'command -v relay; id -u; for c in cc gcc make docker; do command -v $c; done; ldd /usr/local/bin/relay | grep "not found"; test -d /functions && echo functions'
	assert_out_eq "/usr/local/bin/relay
10000
functions"
}

test_compose_dev_topology() {
	compose_setup
	up_healthy
	try_it
	# /metrics on the published host port.
	curl -sf --max-time 5 "http://127.0.0.1:$RELAY_METRICS_PORT/metrics" >"$TMP/metrics" ||
		fail "no /metrics on host port $RELAY_METRICS_PORT"
	grep -qx 'events_processed_total 1' "$TMP/metrics" || fail "metrics: $(grep events_ "$TMP/metrics")"
	# The CLI inside the container sees the mounted functions.
	run_expect 0 dc exec -T relay relay function ls
	assert_out_contains "user-events-python"
	assert_out_contains "welcome-email-node"
	# The proxy answers Relay's calls and refuses what Relay never needs.
	[ "$(proxy_status GET /_ping)" = 200 ] || fail "GET /_ping through the proxy: $(proxy_status GET /_ping)"
	[ "$(proxy_status POST "/v1.41/containers/$(relay_cid)/exec")" = 403 ] || fail "exec was not refused"
	[ "$(proxy_status GET /v1.41/secrets)" = 403 ] || fail "GET /secrets was not refused"
	# The socket is mounted only into the proxy, read-only; 2375 is not
	# published.
	docker inspect -f '{{json .Mounts}}' "$(relay_cid)" | grep -q docker.sock && fail "docker.sock is mounted into relay"
	[ "$(docker inspect -f '{{range .Mounts}}{{if eq .Destination "/var/run/docker.sock"}}{{.RW}}{{end}}{{end}}' "$(dc ps -q socket-proxy)")" = false ] ||
		fail "socket-proxy's docker.sock is not read-only"
	[ -z "$(docker port "$(dc ps -q socket-proxy)")" ] || fail "socket-proxy publishes $(docker port "$(dc ps -q socket-proxy)")"
	# Redis away: unhealthy; back: healthy, and nothing lost (AOF). Killed
	# (SIGKILL), not stopped: a stopped redis writes an RDB snapshot on its
	# way down, which would keep the stream without the AOF. No snapshot was
	# ever written before (rdb_saves 0), so only the AOF, fsynced every
	# second (appendfsync everysec; every entry is older than that), can.
	local before
	before=$(redis_cli XLEN events | tr -d '\r')
	[ "$before" -ge 1 ] || fail "nothing in the stream to keep: XLEN $before"
	[ "$(redis_cli CONFIG GET appendonly | tr -d '\r' | tail -n 1)" = yes ] || fail "redis runs without the AOF"
	redis_cli INFO persistence | tr -d '\r' | grep -qx 'rdb_saves:0' ||
		fail "an RDB snapshot could hold the stream: $(redis_cli INFO persistence | grep rdb_)"
	dc kill -s SIGKILL redis >/dev/null 2>&1 || fail "cannot kill redis"
	wait_for 90 health_is unhealthy || fail "relay still $(docker inspect -f '{{.State.Health.Status}}' "$(relay_cid)") with redis stopped"
	dc start redis >/dev/null 2>&1
	wait_for 60 health_is healthy || fail "relay not healthy again after redis came back"
	[ "$(redis_cli XLEN events | tr -d '\r')" = "$before" ] || fail "the stream lost entries over the restart"
	local id
	id=$(redis_cli XADD events '*' event "$TRY_IT_EVENT" | tr -d '\r')
	wait_for 60 logs_have 1 "relay: function \"welcome-email-node\" handler \"handler.handler\" executed for event \"$id\"" ||
		fail "an event after redis came back was not handled"
	wait_for 20 pending_zero || fail "XPENDING after the restart: $(redis_cli XPENDING events relay | head -n 1)"
	# down -v leaves nothing of the project, and no handler container.
	dc down -v >/dev/null 2>&1 || fail "down -v failed"
	[ -z "$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")" ] || fail "containers left after down -v"
	[ -z "$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")" ] || fail "volumes left after down -v"
	[ -z "$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")" ] || fail "networks left after down -v"
	[ -z "$(docker ps -aq --filter "label=relay.hostname=$RELAY_HOSTNAME")" ] || fail "handler containers left after down -v"
}

test_compose_spec_minimal_allowlist() {
	# The spec's proxy allow-list, without IMAGES: Relay cannot look up or
	# remove images, and still builds and runs every function.
	cat >"$TMP/minimal.yaml" <<'EOF'
services:
  socket-proxy:
    environment:
      IMAGES: 0
EOF
	compose_setup "$TMP/minimal.yaml"
	up_healthy
	[ "$(proxy_status GET /v1.41/images/json)" = 403 ] || fail "the override did not take IMAGES away"
	try_it
	logs_have 1 'image build failed' && fail "a build failed behind the minimal allow-list"
	logs_have 1 'msg="Loaded 2 function(s)"' || fail "not both functions loaded"
	# Said once, naming what to allow, although both functions were built.
	[ "$(dc logs --no-color relay | grep -c 'level=WARN msg="cannot check for existing images.*IMAGES=1')" = 1 ] ||
		fail "want one WARN naming IMAGES=1 for the existence check: $(dc logs --no-color relay | grep IMAGES=1)"
}
