# relay health against real Redis servers (plain, ACL, TLS, down) and the
# real Docker daemon (unix socket and tcp through socat).

test_plain_redis() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok (redis://127.0.0.1:$REDIS_PORT)"
	assert_out_contains "docker: ok (unix:///var/run/docker.sock, API 1."
	assert_err_empty
	export REDIS_URI=redis://127.0.0.1:$REDIS_PORT/2
	run "$RELAY" health
	assert_status 0
}

test_acl_user_and_password() {
	redis_up
	redis-cli -p "$REDIS_PORT" ACL SETUSER alice on '>wonder land@x' '~*' '&*' '+@all' >/dev/null
	redis-cli -p "$REDIS_PORT" ACL SETUSER default off >/dev/null
	export REDIS_URI="redis://alice:wonder%20land%40x@127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok"

	export REDIS_URI="redis://alice:Wr0ngPassw0rd@127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: health: redis redis://127.0.0.1:$REDIS_PORT: authentication failed: WRONGPASS"
	assert_err_lacks "Wr0ngPassw0rd"

	# Without credentials the default user is disabled: PING is refused.
	export REDIS_URI="127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: redis redis://127.0.0.1:$REDIS_PORT: PING failed: NOAUTH"
}

test_requirepass_default_user() {
	start_redis --requirepass 'p@ss:word'
	wait_for 10 redis-cli -p "$REDIS_PORT" -a 'p@ss:word' --no-auth-warning ping || fail "redis did not start"
	export REDIS_URI="redis://:p@ss:word@127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 0
}

make_certs() { # dir, SAN of the server certificate
	local d=$1 san=$2
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Relay Test CA" \
		-keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/CN=redis-test" \
		-keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
	printf 'subjectAltName=%s\n' "$san" >"$d/ext.cnf"
	openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/ext.cnf" -out "$d/server.pem" 2>/dev/null
	chmod 644 "$d"/*
}

test_tls_redis() {
	make_certs "$TMP/pki" "IP:127.0.0.1,DNS:localhost"
	start_tls_redis "$TMP/pki"
	export SSL_CERT_FILE=$TMP/pki/ca.pem
	export REDIS_URI="rediss://127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok (rediss://127.0.0.1:$REDIS_PORT)"
	export REDIS_URI="rediss://localhost:$REDIS_PORT"
	run "$RELAY" health
	assert_status 0

	# The same server through plain redis:// is not Redis speaking RESP.
	export REDIS_URI="redis://127.0.0.1:$REDIS_PORT"
	run timeout 20 "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: redis redis://127.0.0.1:$REDIS_PORT:"

	# Without the test CA the certificate is not trusted.
	unset SSL_CERT_FILE
	export REDIS_URI="rediss://127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: redis rediss://127.0.0.1:$REDIS_PORT: TLS handshake: certificate verify failed"
}

test_tls_redis_wrong_host_name() {
	make_certs "$TMP/pki" "DNS:other.example"
	start_tls_redis "$TMP/pki"
	export SSL_CERT_FILE=$TMP/pki/ca.pem
	export REDIS_URI="rediss://127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 1
	assert_err_contains "certificate verify failed"
}

test_tls_redis_with_acl_password() {
	make_certs "$TMP/pki" "IP:127.0.0.1"
	start_tls_redis "$TMP/pki"
	redis-cli --tls --cacert "$TMP/pki/ca.pem" -p "$REDIS_PORT" ACL SETUSER bob on '>s3cret' '~*' '+@all' >/dev/null
	export SSL_CERT_FILE=$TMP/pki/ca.pem
	export REDIS_URI="rediss://bob:s3cret@127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 0
	export REDIS_URI="rediss://bob:nope@127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 1
	assert_err_contains "WRONGPASS"
	assert_err_lacks "nope@"
}

test_redis_down() {
	local port
	port=$(free_port)
	export REDIS_URI=127.0.0.1:$port
	run timeout 20 "$RELAY" health
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: health: redis redis://127.0.0.1:$port: connect: Connection refused"
}

test_redis_unresolvable_host() {
	export REDIS_URI=no-such-host.invalid:6379
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: redis redis://no-such-host.invalid:6379: cannot resolve host"
}

test_docker_socket_missing() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT
	export DOCKER_HOST=unix:///nonexistent
	run timeout 20 "$RELAY" health
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: health: docker: "
	assert_err_contains "unix:///nonexistent"
}

test_docker_bad_host_value() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT
	export DOCKER_HOST=ftp://example
	run "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: docker: "
	assert_err_contains "DOCKER_HOST"
}

test_docker_over_tcp() {
	redis_up
	local port
	port=$(free_port)
	socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" UNIX-CONNECT:/var/run/docker.sock &
	track $!
	wait_for 10 bash -c "echo > /dev/tcp/127.0.0.1/$port" || fail "socat did not listen"
	export REDIS_URI=127.0.0.1:$REDIS_PORT
	export DOCKER_HOST=tcp://127.0.0.1:$port
	run "$RELAY" health
	assert_status 0
	assert_out_contains "docker: ok (tcp://127.0.0.1:$port, API 1."
}

test_docker_api_version_pinned() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT DOCKER_API_VERSION=1.40
	run "$RELAY" health
	assert_status 0
	assert_out_contains "API 1.40)"
}

test_redis_checked_before_docker() {
	local port
	port=$(free_port)
	export REDIS_URI=127.0.0.1:$port DOCKER_HOST=unix:///nonexistent
	run "$RELAY" health
	assert_status 1
	assert_err_lines 1
	assert_err_contains "relay: health: redis "
}

test_health_reads_no_functions_or_state() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT
	export RELAY_FUNCTIONS_DIR=$TMP/nope RELAY_DATA_DIR=$TMP/data-untouched
	run "$RELAY" health
	assert_status 0
	[ ! -e "$TMP/data-untouched" ] || fail "health created the data directory"
}

test_valgrind_clean() {
	[ -x "$RELAY_PLAIN" ] || fail "$RELAY_PLAIN not built (make all)"
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT
	run valgrind --leak-check=full --error-exitcode=1 --errors-for-leak-kinds=definite,possible "$RELAY_PLAIN" health
	assert_status 0
	assert_err_contains "ERROR SUMMARY: 0 errors"
	# The failure paths too.
	export DOCKER_HOST=unix:///nonexistent
	run valgrind --leak-check=full --error-exitcode=99 --errors-for-leak-kinds=definite,possible "$RELAY_PLAIN" health
	assert_status 1
	export REDIS_URI=redis://alice:bad@127.0.0.1:$REDIS_PORT
	run valgrind --leak-check=full --error-exitcode=99 --errors-for-leak-kinds=definite,possible "$RELAY_PLAIN" health
	assert_status 1
}

test_valgrind_clean_tls() {
	make_certs "$TMP/pki" "IP:127.0.0.1"
	start_tls_redis "$TMP/pki"
	export SSL_CERT_FILE=$TMP/pki/ca.pem REDIS_URI="rediss://127.0.0.1:$REDIS_PORT"
	run valgrind --leak-check=full --error-exitcode=1 --errors-for-leak-kinds=definite,possible "$RELAY_PLAIN" health
	assert_status 0
}
