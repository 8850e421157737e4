# Scenarios no other file covers, each through the real relay
# binary against a private redis-server and the real Docker daemon:
#
#   - the 30 s periodic rescan finds a change inotify never reported (the
#     function's directory could not be watched: relay runs in its own user
#     namespace whose inotify watch limit, user.max_inotify_watches, leaves
#     room for the functions directory's watch only). A directory renamed
#     in from outside the tree is no such miss (IN_MOVED_TO on the
#     functions directory: discovered within about a second), nor is a
#     queue overflow (IN_Q_OVERFLOW starts a full pass at once);
#   - the startup image collection removes the image of a function whose
#     directory was deleted while Relay was down, and keeps the others;
#   - relay start against rediss:// with a private test CA: an event runs
#     and a failing handler with retries: 0 is dead-lettered;
#   - the Docker daemon over TLS with client certificates (socat terminating
#     TLS in front of the daemon's socket): relay health and relay start
#     end to end, and the refusal without a client certificate.
#
# Function names start with "gp-"; each test removes its images
# (relay-fn-gp-*) when it ends, passed or failed.

# gp_images_cleanup NAME...: at exit, the images of these functions go.
gp_images_cleanup() {
	GP_FNS=("$@")
	trap 'gp_rc=$?; gp_rmi "${GP_FNS[@]}"; (exit "$gp_rc"); it_cleanup' EXIT
}

# The test's own docker CLI calls go to the daemon's socket directly,
# whatever DOCKER_* the test gives Relay.
gp_docker() { env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH docker "$@"; }

gp_rmi() { # function names
	local name
	for name in "$@"; do
		gp_docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$name" |
			xargs -r env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH docker rmi >/dev/null 2>&1
	done
	return 0
}

# gp_pyfn NAME BODY [TEMPLATE-EXTRA]: a Python function whose one rule,
# main.handler, matches events whose "fn" is NAME; BODY is main.py.
gp_pyfn() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	mkdir -p "$d"
	printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {fn: [%s]}\n%s' "$1" "${3:-}" >"$d/template.yaml"
	printf '%s' "$2" >"$d/main.py"
}

# A handler printing "<tag> <n>" for each event.
gp_printer() { printf 'def handler(event):\n    print("%s " + event["n"])\n' "$1"; }

# gp_env STREAM: Relay's Redis settings for this test's private redis.
gp_env() {
	export REDIS_URI=${REDIS_URI:-127.0.0.1:$REDIS_PORT} REDIS_STREAM=$1 REDIS_GROUP=$1-group
}

gp_cli() { redis-cli -p "$REDIS_PORT" "${GP_CLI_TLS[@]}" "$@"; }
GP_CLI_TLS=()

# gp_ev FN N: an event for FN with "n" N; GP_ID is its stream id.
gp_ev() {
	GP_ID=$(gp_cli XADD "$REDIS_STREAM" '*' event "{\"event_id\":\"evt_$2\",\"fn\":\"$1\",\"n\":\"$2\"}")
	[ -n "$GP_ID" ] || fail "XADD for $1 failed"
}

# gp_out_re FN HANDLER TEXT: a forwarded handler output line, with or
# without the message and event ids before the colon.
gp_out_re() {
	printf '^relay: function "%s" handler "%s"( message "[^"]*")?( event "[^"]*")?: %s$' \
		"$(gp_re_quote "$1")" "$(gp_re_quote "$2")" "$(gp_re_quote "$3")"
}

gp_re_quote() { sed 's/[].[^$*+?(){}|\\]/\\&/g' <<<"$1"; }

# gp_wait_out LOG FN HANDLER TEXT: waits (30 s) for that output line.
gp_wait_out() {
	wait_for 30 grep -qE -- "$(gp_out_re "$2" "$3" "$4")" "$1" ||
		gp_fail_log "$1" "no output \"$4\" from $2 $3"
}

gp_fail_log() { # log, message
	echo "--- $(basename "$1") (last 60 lines):"
	tail -n 60 "$1" 2>/dev/null
	fail "$2"
}

# gp_count LOG FIXED-STRING: lines of LOG containing it.
gp_count() { grep -cF -- "$2" "$1"; }

# ---- 1. the periodic rescan ---------------------------------------------

test_rescan_catches_what_inotify_missed() {
	local fn=gp-rescan log=$TMP/relay.log
	# Per user namespace inotify limits came with Linux 5.11.
	unshare --user --map-root-user sh -c 'echo 1 >/proc/sys/user/max_inotify_watches' 2>/dev/null ||
		skip "cannot set user.max_inotify_watches in a user namespace here"
	gp_images_cleanup "$fn"
	redis_up
	gp_env gp-rescan
	export LOG_LEVEL=debug # the passes' "functions directory rescanned" lines
	gp_pyfn "$fn" "$(gp_printer v1)"
	# One inotify watch for the whole process: the functions directory's.
	# The function's own directory cannot be watched, so nothing written
	# in it produces an event; only a full pass can see a change there.
	relay_bg "$log" unshare --user --map-root-user --uts sh -c \
		"echo 1 >/proc/sys/user/max_inotify_watches && hostname $fn && exec '$RELAY' start"
	wait_for 90 grep -qF 'msg="worker started"' "$log" || gp_fail_log "$log" "relay did not start"
	grep -qF 'msg="inotify watch limit reached (fs.inotify.max_user_watches); changes below unwatched directories are found by the 30s rescan"' "$log" ||
		gp_fail_log "$log" "the function's directory was watched after all"
	grep -qF "msg=\"function prepared\" function=$fn" "$log" || gp_fail_log "$log" "$fn not prepared"
	[ "$(gp_count "$log" 'msg="functions directory rescanned" reason=periodic')" -eq 0 ] ||
		gp_fail_log "$log" "a periodic pass before the edit"

	# The edit. Unnoticed: after four debounce periods (750 ms) an event
	# still runs the old code, and no pass has run meanwhile (the first
	# comes 30 s after the reconciler started).
	gp_printer v2 >"$RELAY_FUNCTIONS_DIR/$fn/main.py"
	sleep 3
	gp_ev "$fn" 1
	gp_wait_out "$log" "$fn" main.handler "v1 1"
	[ "$(gp_count "$log" 'msg="functions directory rescanned"')" -eq 0 ] ||
		gp_fail_log "$log" "a pass ran within seconds of the start: the miss cannot be told from it"
	! grep -qF "msg=\"function changed; preparing the new version\" function=$fn" "$log" ||
		gp_fail_log "$log" "the edit was seen without a pass"

	# The first periodic pass finds it, at most 30 s after the start.
	wait_for 35 grep -qF "msg=\"function updated\" function=$fn" "$log" ||
		gp_fail_log "$log" "the periodic pass did not pick up the edit within 35 s"
	wait_for 10 grep -qF 'msg="functions directory rescanned" reason=periodic' "$log" ||
		gp_fail_log "$log" "no periodic pass line"
	# Found by that pass: the update is logged before its end and no other
	# pass (an overflow, a moved directory) ran.
	awk -v u="msg=\"function updated\" function=$fn" '
		index($0, u) && !up { up = NR }
		/msg="functions directory rescanned"/ { if (!pass) { pass = NR; periodic = /reason=periodic/ } }
		END { exit !(up && pass > up && periodic) }' "$log" ||
		gp_fail_log "$log" "the update did not come from the first periodic pass"
	# 30 s after the reconciler started. Timed by the pass's first line
	# about the function (it saw the change), not by its closing
	# "rescanned" line, which waits for the new image's build and so for
	# however loaded the machine is. Log times have whole seconds (-1, +1),
	# and +1 s more for the timer's wake-up on a loaded machine.
	local t0 t1
	t0=$(date -d "$(sed -n 's/^time=\([^ ]*\) .*msg="watching the functions directory".*/\1/p' "$log")" +%s)
	t1=$(date -d "$(sed -n "s/^time=\\([^ ]*\\) .*msg=\"function changed; preparing the new version\" function=$fn.*/\\1/p" "$log" | head -n1)" +%s)
	[ $((t1 - t0)) -ge 29 ] && [ $((t1 - t0)) -le 32 ] || gp_fail_log "$log" "first periodic pass saw the edit $((t1 - t0)) s after the start, want 30 s"
	gp_ev "$fn" 2
	gp_wait_out "$log" "$fn" main.handler "v2 2"
	stop_relay_pid "$RELAY_PID"
}

# ---- 2. the startup image collection --------------------------------------

# gp_tags FN: the relay-fn-FN tags on the daemon, one a line, sorted.
gp_tags() { gp_docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$1" | sort; }

test_startup_image_gc() {
	local gone=gp-gc-gone kept=gp-gc-kept log1=$TMP/relay1.log log2=$TMP/relay2.log
	local gone_img kept_img kept_old
	gp_images_cleanup "$gone" "$kept"
	gp_rmi "$gone" "$kept"
	redis_up
	gp_env gp-gc
	gp_pyfn "$gone" "$(gp_printer gone)"
	gp_pyfn "$kept" "$(gp_printer kept1)"

	start_relay_as "$log1" gp-gc
	gone_img=$(sed -n "s/.*msg=\"function prepared\" function=$gone image=\([^ ]*\) .*/\1/p" "$log1")
	kept_old=$(sed -n "s/.*msg=\"function prepared\" function=$kept image=\([^ ]*\) .*/\1/p" "$log1")
	[ -n "$gone_img" ] && [ -n "$kept_old" ] || gp_fail_log "$log1" "not both functions prepared"
	[ "$(gp_tags "$gone")" = "$gone_img" ] || fail "relay-fn-$gone tags: $(gp_tags "$gone"), want $gone_img"
	# Relay's labels on the image name the function.
	[ "$(docker image inspect -f '{{index .Config.Labels "relay.function"}}' "$gone_img")" = "$gone" ] ||
		fail "$gone_img lacks the label relay.function=$gone"
	gp_ev "$gone" 1
	gp_wait_out "$log1" "$gone" main.handler "gone 1"
	stop_relay_pid "$RELAY_PID"

	# While Relay is down: one function deleted, the other edited.
	rm -rf "${RELAY_FUNCTIONS_DIR:?}/$gone"
	gp_printer kept2 >"$RELAY_FUNCTIONS_DIR/$kept/main.py"

	start_relay_as "$log2" gp-gc
	kept_img=$(sed -n "s/.*msg=\"function prepared\" function=$kept image=\([^ ]*\) .*/\1/p" "$log2")
	[ -n "$kept_img" ] && [ "$kept_img" != "$kept_old" ] || gp_fail_log "$log2" "$kept not rebuilt"
	# The deleted function's image and the edited one's old version go;
	# the version being served stays.
	wait_for 30 sh -c "[ -z \"\$(docker images -q 'relay-fn-$gone')\" ]" ||
		gp_fail_log "$log2" "image of the deleted function kept: $(gp_tags "$gone")"
	wait_for 30 sh -c "[ \"\$(docker images --format '{{.Repository}}:{{.Tag}}' 'relay-fn-$kept')\" = '$kept_img' ]" ||
		gp_fail_log "$log2" "relay-fn-$kept tags: $(gp_tags "$kept"), want only $kept_img"
	grep -qF "msg=\"removed unused function image\" image=$gone_img" "$log2" ||
		gp_fail_log "$log2" "no log line for the removal of $gone_img"
	gp_ev "$kept" 2
	gp_wait_out "$log2" "$kept" main.handler "kept2 2"
	stop_relay_pid "$RELAY_PID"
}

# ---- TLS fixtures ---------------------------------------------------------

# gp_pki DIR: a private CA (ca.pem) with a server certificate for
# 127.0.0.1 (server.pem, server.key) and a client certificate (client.pem,
# client.key). (health.sh's make_certs makes the server half only.)
gp_pki() {
	local d=$1 who
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Relay gaps test CA $RANDOM" \
		-keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null || fail "openssl: CA"
	printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$d/server.ext"
	printf 'extendedKeyUsage=clientAuth\n' >"$d/client.ext"
	for who in server client; do
		openssl req -newkey rsa:2048 -nodes -subj "/CN=relay-gaps-$who" \
			-keyout "$d/$who.key" -out "$d/$who.csr" 2>/dev/null &&
			openssl x509 -req -in "$d/$who.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
				-days 2 -extfile "$d/$who.ext" -out "$d/$who.pem" 2>/dev/null || fail "openssl: $who certificate"
	done
	chmod 644 "$d"/*
}

# gp_start_tls_redis PKI: a redis-server speaking TLS only on REDIS_PORT;
# gp_cli talks to it over TLS with the CA.
gp_start_tls_redis() {
	start_tls_redis "$1"
	GP_CLI_TLS=(--tls --cacert "$1/ca.pem")
}

# gp_acked ID: the group has read the stream up to ID and nothing is pending.
gp_acked() {
	local info last lag
	info=$(gp_cli XINFO GROUPS "$REDIS_STREAM")
	last=$(awk 'p == "last-delivered-id" {print; exit} {p = $0}' <<<"$info")
	lag=$(awk 'p == "lag" {print; exit} {p = $0}' <<<"$info")
	[ "$last" = "$1" ] && [ "$lag" = 0 ] && [ "$(gp_cli XPENDING "$REDIS_STREAM" "$REDIS_GROUP" | head -n1)" = 0 ]
}

# gp_dlq_field ID FIELD: FIELD of the dead-letter entry for original_id ID.
gp_dlq_field() {
	gp_cli EVAL "for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local f, m = e[2], {}
		for i = 1, #f - 1, 2 do m[f[i]] = f[i + 1] end
		if m.original_id == ARGV[1] then return m[ARGV[2]] end
	end" 1 "relay:$REDIS_STREAM:dlq" "$1" "$2"
}

# ---- 3. relay start over rediss:// ----------------------------------------

test_rediss_relay_start() {
	local ok=gp-tls-ok bad=gp-tls-bad log=$TMP/relay.log id_ok id_bad ev_bad fields
	gp_images_cleanup "$ok" "$bad"
	gp_pki "$TMP/pki"
	gp_pki "$TMP/other-pki"
	gp_start_tls_redis "$TMP/pki"
	export REDIS_URI=rediss://127.0.0.1:$REDIS_PORT
	gp_env gp-tls
	gp_pyfn "$ok" "$(gp_printer ok)"
	gp_pyfn "$bad" 'def handler(event):
    print("failing " + event["n"])
    raise RuntimeError("boom " + event["n"])
' '    retries: 0
'
	# Another CA: the server is not trusted, Relay does not start.
	export SSL_CERT_FILE=$TMP/other-pki/ca.pem
	run timeout -k 2 30 "$RELAY" start
	assert_status 1
	assert_err_contains 'level=ERROR msg="cannot reach Redis" error='
	assert_err_contains "certificate verify failed"

	export SSL_CERT_FILE=$TMP/pki/ca.pem
	start_relay_as "$log" gp-tls
	grep -qF "redis=rediss://127.0.0.1:$REDIS_PORT" "$log" || gp_fail_log "$log" "not the rediss:// endpoint"
	gp_ev "$ok" 1
	id_ok=$GP_ID
	gp_wait_out "$log" "$ok" main.handler "ok 1"
	wait_for 10 gp_acked "$id_ok" || gp_fail_log "$log" "event 1 not acknowledged"

	ev_bad='{"event_id":"evt_2","fn":"gp-tls-bad","n":"2"}'
	id_bad=$(gp_cli XADD "$REDIS_STREAM" '*' event "$ev_bad")
	gp_wait_out "$log" "$bad" main.handler "failing 2"
	wait_for 30 gp_acked "$id_bad" || gp_fail_log "$log" "event 2 not dead-lettered and acknowledged"
	[ "$(gp_cli XLEN "relay:$REDIS_STREAM:dlq")" = 1 ] ||
		fail "relay:$REDIS_STREAM:dlq has $(gp_cli XLEN "relay:$REDIS_STREAM:dlq") entries, want 1"
	# The entry, field by field (and nothing else).
	fields=$(gp_cli XRANGE "relay:$REDIS_STREAM:dlq" - + | awk 'NR > 1 && NR % 2 == 0' | paste -sd' ')
	[ "$fields" = "original_stream original_id group consumer event reason attempts timestamp function handler traceparent" ] ||
		fail "DLQ entry fields: $fields"
	[ "$(gp_dlq_field "$id_bad" original_stream)" = "$REDIS_STREAM" ] || fail "original_stream"
	[ "$(gp_dlq_field "$id_bad" group)" = "$REDIS_GROUP" ] || fail "group"
	[ "$(gp_dlq_field "$id_bad" consumer)" = gp-tls ] || fail "consumer"
	[ "$(gp_dlq_field "$id_bad" event)" = "$ev_bad" ] || fail "event: $(gp_dlq_field "$id_bad" event)"
	[ "$(gp_dlq_field "$id_bad" attempts)" = 1 ] || fail "attempts: $(gp_dlq_field "$id_bad" attempts)"
	[ "$(gp_dlq_field "$id_bad" function)" = "$bad" ] || fail "function: $(gp_dlq_field "$id_bad" function)"
	[ "$(gp_dlq_field "$id_bad" handler)" = main.handler ] || fail "handler: $(gp_dlq_field "$id_bad" handler)"
	[[ "$(gp_dlq_field "$id_bad" reason)" == "$bad/main.handler exhausted after 1 attempt(s): function \"$bad\" handler \"main.handler\" failed: exit status 1: "*"RuntimeError: boom 2"* ]] ||
		fail "reason: $(gp_dlq_field "$id_bad" reason)"
	[[ "$(gp_dlq_field "$id_bad" timestamp)" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]] ||
		fail "timestamp: $(gp_dlq_field "$id_bad" timestamp)"
	# One attempt only, and no delivery state left behind.
	[ "$(grep -cE -- "$(gp_out_re "$bad" main.handler "failing 2")" "$log")" = 1 ] || fail "the failing handler ran more than once"
	[ -z "$(gp_cli --scan --pattern 'relay:invocation:*')" ] || fail "invocation keys left: $(gp_cli --scan --pattern 'relay:invocation:*')"
	stop_relay_pid "$RELAY_PID"
}

# ---- 4. the Docker daemon over TLS ----------------------------------------

# gp_certdir DIR CA CERT KEY: a DOCKER_CERT_PATH directory as the docker
# CLI expects it (ca.pem, cert.pem, key.pem).
gp_certdir() {
	mkdir -p "$1"
	cp "$2" "$1/ca.pem"
	cp "$3" "$1/cert.pem"
	cp "$4" "$1/key.pem"
}

test_docker_over_tls() {
	local fn=gp-dtls log=$TMP/relay.log port pki=$TMP/pki
	gp_images_cleanup "$fn"
	redis_up
	gp_env gp-dtls
	gp_pki "$pki"
	gp_pki "$TMP/rogue"
	# TLS in front of the daemon's socket, client certificates required
	# and checked against the test CA. -t: after one side half-closes
	# (stdin EOF on an attach), the other keeps flowing for up to 60 s.
	port=$(free_port)
	socat -d -d -t 60 "OPENSSL-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork,cert=$pki/server.pem,key=$pki/server.key,cafile=$pki/ca.pem,verify=1" \
		UNIX-CONNECT:/var/run/docker.sock 2>"$TMP/socat.log" &
	track $!
	wait_for 10 bash -c "echo >/dev/tcp/127.0.0.1/$port" || fail "socat did not listen: $(cat "$TMP/socat.log")"
	# The proxy itself: a client without a certificate is refused, one
	# with the test client certificate gets through.
	curl -sf --max-time 10 --cacert "$pki/ca.pem" "https://127.0.0.1:$port/_ping" >/dev/null &&
		fail "the proxy answered a client without a certificate"
	[ "$(curl -sf --max-time 10 --cacert "$pki/ca.pem" --cert "$pki/client.pem" --key "$pki/client.key" \
		"https://127.0.0.1:$port/_ping")" = OK ] || fail "the proxy does not reach the daemon: $(tail -n 5 "$TMP/socat.log")"

	export DOCKER_HOST=tcp://127.0.0.1:$port DOCKER_TLS_VERIFY=1
	# A client certificate from another CA: the proxy refuses the handshake
	# (its alert or the reset that follows, depending on timing).
	gp_certdir "$TMP/rogue-client" "$pki/ca.pem" "$TMP/rogue/client.pem" "$TMP/rogue/client.key"
	export DOCKER_CERT_PATH=$TMP/rogue-client
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: health: docker: Docker request GET /version to tcp://127.0.0.1:$port failed: "
	# No client certificate at all: Relay says so before connecting.
	mkdir -p "$TMP/no-client"
	cp "$pki/ca.pem" "$TMP/no-client/ca.pem"
	export DOCKER_CERT_PATH=$TMP/no-client
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_lines 1
	assert_err_contains "relay: health: docker: DOCKER_TLS_VERIFY is set but $TMP/no-client/cert.pem is not readable (DOCKER_CERT_PATH)"
	# The server's certificate checked against another CA, or for another
	# name: refused by Relay.
	gp_certdir "$TMP/rogue-ca" "$TMP/rogue/ca.pem" "$pki/client.pem" "$pki/client.key"
	export DOCKER_CERT_PATH=$TMP/rogue-ca
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: docker: cannot connect to the Docker daemon at tcp://127.0.0.1:$port: SSL certificate problem"
	gp_certdir "$TMP/certs" "$pki/ca.pem" "$pki/client.pem" "$pki/client.key"
	export DOCKER_CERT_PATH=$TMP/certs DOCKER_HOST=tcp://localhost:$port
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: docker: cannot connect to the Docker daemon at tcp://localhost:$port: SSL: no alternative certificate subject name matches target host name 'localhost'"
	export DOCKER_HOST=tcp://127.0.0.1:$port
	# Without DOCKER_TLS_VERIFY Relay speaks plain HTTP, which the proxy drops.
	unset DOCKER_TLS_VERIFY
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: docker: Docker request GET /version to tcp://127.0.0.1:$port failed: "

	# The success path: health, then relay start building and running a
	# function through the proxy.
	export DOCKER_TLS_VERIFY=1
	run "$RELAY" health
	assert_status 0
	assert_out_contains "docker: ok (tcp://127.0.0.1:$port, API 1."
	assert_err_empty

	gp_pyfn "$fn" 'import sys
def handler(event):
    print("over tls " + event["n"])
    print("to stderr " + event["n"], file=sys.stderr)
'
	local before
	before=$(grep -c 'accepting connection' "$TMP/socat.log")
	start_relay_as "$log" gp-dtls
	grep -qF "docker=\"tcp://127.0.0.1:$port, API 1." "$log" || gp_fail_log "$log" "not the TLS endpoint"
	grep -qF "msg=\"function prepared\" function=$fn" "$log" || gp_fail_log "$log" "$fn not built"
	gp_ev "$fn" 1
	gp_wait_out "$log" "$fn" main.handler "over tls 1"
	gp_wait_out "$log" "$fn" main.handler "to stderr 1"
	wait_for 10 acked_through "$REDIS_PORT" "$REDIS_STREAM" "$REDIS_GROUP" "$GP_ID" || gp_fail_log "$log" "event 1 not acknowledged"
	# Its container is gone (a standby container made after it may be
	# waiting for the next event); Relay's requests went through the proxy.
	wait_for 20 sh -c "[ -z \"\$(env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH docker ps -aq --filter label=relay.message_id=$GP_ID)\" ]" ||
		fail "the container of $fn was not removed: $(gp_docker ps -a --filter label=relay.function=$fn)"
	[ "$(grep -c 'accepting connection' "$TMP/socat.log")" -gt "$before" ] || fail "relay start made no connection through the proxy"
	gp_ev "$fn" 2
	gp_wait_out "$log" "$fn" main.handler "over tls 2"
	stop_relay_pid "$RELAY_PID"
	# No container of it left, standby ones included.
	wait_for 10 sh -c "[ -z \"\$(env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH docker ps -aq --filter label=relay.function=$fn)\" ]" ||
		fail "containers of $fn left after SIGTERM: $(gp_docker ps -a --filter label=relay.function=$fn)"
}
