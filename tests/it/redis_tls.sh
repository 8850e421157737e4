# Whom rediss:// trusts: a configured CA file replaces the
# system's CAs, the server's name is checked on every connection, and
# rediss-sentinel:// speaks TLS to the sentinels too. Real redis-server
# processes (Debian's 7.0, tls-port) with certificates made here.

# tls_ca DIR: a CA (DIR/ca.pem, DIR/ca.key).
tls_ca() {
	mkdir -p "$1"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=Relay Test CA $(basename "$1")" -keyout "$1/ca.key" -out "$1/ca.pem" 2>/dev/null ||
		fail "openssl could not make a CA"
}

# tls_leaf CA_DIR DIR SAN: DIR/server.pem and DIR/server.key signed by
# CA_DIR's CA for SAN, with DIR/ca.pem the CA that signed it (the layout
# start_tls_redis reads).
tls_leaf() {
	local ca=$1 d=$2 san=$3
	mkdir -p "$d"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=redis-test" \
		-keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null || fail "openssl req"
	printf 'subjectAltName=%s\n' "$san" >"$d/ext.cnf"
	openssl x509 -req -in "$d/server.csr" -CA "$ca/ca.pem" -CAkey "$ca/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/ext.cnf" -out "$d/server.pem" 2>/dev/null || fail "openssl x509"
	cp "$ca/ca.pem" "$d/ca.pem"
	chmod 644 "$d"/*
}

# A stand-in for the system's CA store: OpenSSL's default directory is
# what SSL_CERT_DIR names, so a hashed directory holding CA DIR is a
# "system" CA for this process.
tls_system_store() { # ca dir, store dir
	mkdir -p "$2"
	cp "$1/ca.pem" "$2/"
	openssl rehash "$2" 2>/dev/null || c_rehash "$2" >/dev/null 2>&1 || fail "cannot hash $2"
}

test_a_configured_ca_replaces_the_system_store() {
	tls_ca "$TMP/sys"
	tls_ca "$TMP/mine"
	tls_leaf "$TMP/sys" "$TMP/srv" "IP:127.0.0.1"
	start_tls_redis "$TMP/srv"
	tls_system_store "$TMP/sys" "$TMP/store"
	unset SSL_CERT_FILE
	export SSL_CERT_DIR=$TMP/store REDIS_URI="rediss://127.0.0.1:$REDIS_PORT"

	# No CA configured: the system store (here the stand-in) is trusted.
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok (rediss://127.0.0.1:$REDIS_PORT)"

	# A CA configured that did not sign the server's certificate: refused,
	# though a "system" CA did sign it.
	export SSL_CERT_FILE=$TMP/mine/ca.pem
	run "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: redis rediss://127.0.0.1:$REDIS_PORT: TLS handshake: certificate verify failed"

	# The CA that signed it, configured: trusted (the store not needed).
	export SSL_CERT_FILE=$TMP/sys/ca.pem SSL_CERT_DIR=$TMP/empty
	mkdir -p "$TMP/empty"
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok (rediss://127.0.0.1:$REDIS_PORT)"

	# A file that holds no certificate is an error, not "trust nothing".
	: >"$TMP/none.pem"
	export SSL_CERT_FILE=$TMP/none.pem
	run "$RELAY" health
	assert_status 1
	assert_err_contains "cannot load CA certificates from SSL_CERT_FILE $TMP/none.pem"
}

test_the_server_name_is_checked() {
	tls_ca "$TMP/ca"
	tls_leaf "$TMP/ca" "$TMP/srv" "DNS:localhost,IP:127.0.0.2"
	start_tls_redis "$TMP/srv"
	export SSL_CERT_FILE=$TMP/ca/ca.pem
	# A name in the certificate: accepted.
	export REDIS_URI="rediss://localhost:$REDIS_PORT"
	run "$RELAY" health
	assert_status 0
	# An address the certificate does not name (its DNS name resolves to it,
	# and another address is in it): refused.
	export REDIS_URI="rediss://127.0.0.1:$REDIS_PORT"
	run "$RELAY" health
	assert_status 1
	assert_err_contains "relay: health: redis rediss://127.0.0.1:$REDIS_PORT: TLS handshake: certificate verify failed: IP address mismatch"
}

# tls_sentinel SRV_DIR MASTER_PORT: a sentinel on SENT_PORT (plain) and
# SENT_TLS_PORT (TLS, SRV_DIR's certificate) monitoring master m at
# 127.0.0.1:MASTER_PORT over TLS; returns once it names the master.
tls_sentinel() {
	local d=$1 m=$2 dir=$TMP/sentinel try
	for try in 1 2 3; do
		SENT_PORT=$(free_port)
		SENT_TLS_PORT=$(free_port)
		[ "$SENT_PORT" != "$SENT_TLS_PORT" ] || continue
		rm -rf "$dir"
		mkdir -p "$dir"
		cat >"$dir/sentinel.conf" <<EOF
bind 127.0.0.1
port $SENT_PORT
tls-port $SENT_TLS_PORT
tls-cert-file $d/server.pem
tls-key-file $d/server.key
tls-ca-cert-file $d/ca.pem
tls-auth-clients no
tls-replication yes
dir $dir
sentinel monitor m 127.0.0.1 $m 1
EOF
		redis-server "$dir/sentinel.conf" --sentinel >"$dir/log" 2>&1 &
		track $!
		wait_for 10 sh -c "redis-cli --tls --cacert '$d/ca.pem' -p $SENT_TLS_PORT SENTINEL get-master-addr-by-name m | grep -qx $m" &&
			return
		# Another process took a port between free_port and the bind.
		grep -q 'Address already in use' "$dir/log" || break
	done
	fail "the TLS sentinel did not start: $(cat "$dir/log")"
}

test_rediss_sentinel_speaks_tls_to_the_sentinels() {
	tls_ca "$TMP/ca"
	tls_leaf "$TMP/ca" "$TMP/srv" "IP:127.0.0.1"
	start_tls_redis "$TMP/srv"
	local master=$REDIS_PORT
	redis-cli --tls --cacert "$TMP/ca/ca.pem" -p "$master" CONFIG SET requirepass 'tls:s3cret' >/dev/null
	tls_sentinel "$TMP/srv" "$master"
	export SSL_CERT_FILE=$TMP/ca/ca.pem
	export REDIS_URI="rediss-sentinel://:tls:s3cret@127.0.0.1:$SENT_TLS_PORT/m"
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok (sentinel master m at 127.0.0.1:$master)"
	assert_err_lacks "s3cret"

	# The sentinels' plain port: a TLS client gets no TLS answer there.
	export REDIS_URI="rediss-sentinel://:tls:s3cret@127.0.0.1:$SENT_PORT/m"
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_contains "sentinel redis rediss://127.0.0.1:$SENT_PORT: TLS handshake"
	assert_err_lacks "s3cret"
	# Unless told the sentinels are plain (the data nodes still TLS).
	export REDIS_SENTINEL_TLS=no
	run "$RELAY" health
	assert_status 0
	assert_out_contains "redis: ok (sentinel master m at 127.0.0.1:$master)"
	# And told they are TLS, the TLS port again.
	export REDIS_SENTINEL_TLS=yes REDIS_URI="rediss-sentinel://:tls:s3cret@127.0.0.1:$SENT_TLS_PORT/m"
	run "$RELAY" health
	assert_status 0
	export REDIS_SENTINEL_TLS=maybe
	run "$RELAY" health
	assert_status 1
	assert_err_contains "REDIS_SENTINEL_TLS 'maybe' is invalid"
}

test_the_master_a_sentinel_names_is_checked_by_that_address() {
	tls_ca "$TMP/ca"
	# The sentinel's certificate names 127.0.0.1; the master's does not.
	tls_leaf "$TMP/ca" "$TMP/sent" "IP:127.0.0.1"
	tls_leaf "$TMP/ca" "$TMP/srv" "DNS:redis.example"
	start_tls_redis "$TMP/srv"
	local master=$REDIS_PORT
	tls_sentinel "$TMP/sent" "$master"
	export SSL_CERT_FILE=$TMP/ca/ca.pem
	export REDIS_URI="rediss-sentinel://127.0.0.1:$SENT_TLS_PORT/m"
	run timeout 30 "$RELAY" health
	assert_status 1
	assert_err_contains "redis rediss://127.0.0.1:$master: TLS handshake: certificate verify failed: IP address mismatch"
}
