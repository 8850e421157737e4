# relay git keygen|set|sync|status|remove and the GitHub webhook against
# the real binary: a private OpenSSH server (Debian's sshd on a free port,
# its own host key, Relay's deploy key as the only authorized key) serving a
# bare repository made with the git CLI. Relay itself uses libgit2 only.

# libgit2's own per-connection leaks (see the file) are not Relay's.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0
export LSAN_OPTIONS=suppressions=$ROOT/tests/it/libgit2.supp:print_suppressions=0

# start_sshd HOSTKEY: sshd on 127.0.0.1:$SSHD_PORT with host key
# $TMP/sshd/HOSTKEY (made on first use). The port stays the same across
# restarts, so a restart with another key looks like a changed server.
start_sshd() {
	local d=$TMP/sshd
	SSHD_PORT=${SSHD_PORT:-$(free_port)}
	mkdir -p "$d" /run/sshd
	chmod 0755 /run/sshd
	[ -f "$d/$1" ] || ssh-keygen -q -t ed25519 -N '' -C '' -f "$d/$1"
	touch "$d/authorized_keys"
	cat >"$d/config" <<EOF
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $d/$1
AuthorizedKeysFile $d/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
EOF
	/usr/sbin/sshd -D -e -f "$d/config" >>"$TMP/sshd.log" 2>&1 &
	SSHD_PID=$!
	track "$SSHD_PID"
	wait_for 10 sshd_listening || fail "sshd did not start: $(cat "$TMP/sshd.log")"
}
sshd_listening() { [ -n "$(ss -Htln "( sport = :$SSHD_PORT )")" ]; }
stop_sshd() {
	kill "$SSHD_PID"
	wait "$SSHD_PID" 2>/dev/null
	wait_for 10 eval '! sshd_listening'
}

# keygen_and_authorize: relay git keygen; its public line becomes the
# server's only authorized key.
keygen_and_authorize() {
	run "$RELAY" git keygen
	assert_status 0
	tail -n 1 "$TMP/out" >"$TMP/sshd/authorized_keys"
}

g() { HOME=$TMP git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main "$@"; }

# make_repo: $TMP/remote.git with functions gt-hello/ and gt-other/, a directory
# without template.yaml (docs/), and gt-deep/ under services/; tag v1.
make_repo() {
	g init -q --bare "$TMP/remote.git"
	g init -q "$TMP/work"
	local w=$TMP/work f
	for f in gt-hello gt-other services/gt-deep; do
		mkdir -p "$w/$f"
		printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {fn: [%s]}\n' \
			"${f##*/}" >"$w/$f/template.yaml"
		printf 'def handler(event):\n    print("%s")\n' "$f" >"$w/$f/main.py"
	done
	mkdir -p "$w/gt-hello/lib" "$w/docs"
	echo "x = 1" >"$w/gt-hello/lib/util.py"
	echo "notes" >"$w/docs/README"
	g -C "$w" add -A
	g -C "$w" commit -q -m one
	g -C "$w" tag v1
	g -C "$w" push -q "$TMP/remote.git" main v1
	URL="ssh://root@127.0.0.1:$SSHD_PORT$TMP/remote.git"
}

# A ready source: sshd, key, repository, relay git set URL [args].
setup_source() {
	mkdir -p "$TMP/sshd"
	start_sshd hostkey
	keygen_and_authorize
	make_repo
	run "$RELAY" git set "$@" "$URL"
	assert_status 0
}

host_fp() { ssh-keygen -lf "$TMP/sshd/$1.pub" | awk '{print $2}'; }

test_keygen_writes_a_key_openssh_reads() {
	run "$RELAY" git keygen
	assert_status 0
	local key=$RELAY_DATA_DIR/ssh/id_ed25519
	[ "$(stat -c %a "$RELAY_DATA_DIR/ssh")" = 700 ] || fail "ssh dir mode"
	[ "$(stat -c %a "$key")" = 600 ] || fail "key mode $(stat -c %a "$key")"
	head -n 1 "$key" | grep -qx -- '-----BEGIN OPENSSH PRIVATE KEY-----' || fail "not an OpenSSH key"
	local pub
	pub=$(ssh-keygen -y -f "$key" | awk '{print $1" "$2}')
	[ "$(tail -n 1 "$TMP/out" | awk '{print $1" "$2}')" = "$pub" ] || fail "printed public key differs from ssh-keygen -y"
	assert_out_contains "Fingerprint: $(ssh-keygen -lf "$key" | awk '{print $2}')"
	# Never the private half.
	assert_out_lacks "PRIVATE"
	grep -v -- '-----' "$key" | while read -r l; do ! grep -qF -- "$l" "$TMP/out" || exit 1; done ||
		fail "private key material printed"
	local before
	before=$(md5sum <"$key")
	run "$RELAY" git keygen
	assert_status 1
	assert_err_contains "already exists"
	assert_err_contains "--force"
	[ "$(md5sum <"$key")" = "$before" ] || fail "existing key replaced without --force"
	run "$RELAY" git keygen --force
	assert_status 0
	[ "$(md5sum <"$key")" != "$before" ] || fail "--force kept the old key"
}

test_set_validates_and_status_reports() {
	run "$RELAY" git status
	assert_status 0
	assert_out_eq "No git source configured."
	run "$RELAY" git status --json
	assert_status 0
	jq -e '. == {configured: false}' "$TMP/out" >/dev/null || fail "git status --json: $(cat "$TMP/out")"
	for bad in https://github.com/acme/repo.git http://h/r.git file:///tmp/r.git /tmp/repo.git \
		'git@:org/repo.git' 'git@host:' 'ssh://git@host:99999/r.git'; do
		run "$RELAY" git set "$bad"
		assert_status 1
		assert_err_contains "$bad"
	done
	run "$RELAY" git set https://github.com/acme/repo.git
	assert_err_contains "SSH"
	run "$RELAY" git set --path ../up git@github.com:acme/repo.git
	assert_status 1
	assert_err_contains "--path"
	run "$RELAY" git set --webhook-secret Bad.Name git@github.com:acme/repo.git
	assert_status 1
	assert_err_contains "--webhook-secret"
	run "$RELAY" git set
	assert_status 2
	[ ! -e "$RELAY_DATA_DIR/git/source.json" ] || fail "a rejected set wrote the source"

	run "$RELAY" git set --ref v2 --path services --webhook-secret gh-hook git@github.com:acme/repo.git
	assert_status 0
	assert_err_contains "relay git keygen"
	assert_err_contains "relay secret set gh-hook"
	[ "$(stat -c %a "$RELAY_DATA_DIR/git/source.json")" = 600 ] || fail "source.json mode"
	python3 - "$RELAY_DATA_DIR/git/source.json" <<'EOF' || fail "source.json content"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["repository"] == "git@github.com:acme/repo.git", s
assert s["ref"] == "v2" and s["path"] == "services" and s["webhook_secret"] == "gh-hook", s
EOF
	run "$RELAY" git status
	assert_status 0
	assert_out_contains "git@github.com:acme/repo.git"
	assert_out_contains "v2"
	assert_out_contains "services"
	assert_out_contains "gh-hook"
	assert_out_contains "missing"
	assert_out_contains "Last sync:      never"
	run "$RELAY" git status --json
	assert_status 0
	jq -e --arg key "$RELAY_DATA_DIR/ssh/id_ed25519" '. == {configured: true,
		repository: "git@github.com:acme/repo.git", ref: "v2", path: "services", webhook_secret: "gh-hook",
		ssh_key: {state: "missing", path: $key, fingerprint: null, error: null},
		checkout: null, commit: null, resolved_as: null, last_sync: null}' "$TMP/out" >/dev/null ||
		fail "git status --json: $(cat "$TMP/out")"
	# Calling it again overwrites the source; the ref defaults to main.
	run "$RELAY" git set ssh://git@gitlab.example.com:2222/acme/other.git
	assert_status 0
	run "$RELAY" git status
	assert_out_contains "ssh://git@gitlab.example.com:2222/acme/other.git"
	assert_out_contains "Ref:            main"
	assert_out_contains "(repository root)"
	assert_out_lacks "gh-hook"
	echo '{not json' >"$RELAY_DATA_DIR/git/source.json"
	run "$RELAY" git status
	assert_status 1
	assert_err_contains "source.json"
}

test_sync_trusts_on_first_use_and_replaces_functions() {
	setup_source
	mkdir -p "$RELAY_FUNCTIONS_DIR/stray" && echo keep >"$RELAY_FUNCTIONS_DIR/notes.txt"
	run "$RELAY" git sync
	assert_status 0
	assert_out_contains "Trusted new host [127.0.0.1]:$SSHD_PORT (fingerprint $(host_fp hostkey))"
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR" | tr '\n' ' ')" = "gt-hello gt-other notes.txt " ] ||
		fail "functions dir holds: $(ls -A "$RELAY_FUNCTIONS_DIR")"
	diff -r "$TMP/work/gt-hello" "$RELAY_FUNCTIONS_DIR/gt-hello" || fail "hello differs from the repository"
	diff -r "$TMP/work/gt-other" "$RELAY_FUNCTIONS_DIR/gt-other" || fail "other differs from the repository"
	[ "$(stat -c %a "$RELAY_DATA_DIR/ssh/known_hosts")" = 600 ] || fail "known_hosts mode"
	grep -qF "[127.0.0.1]:$SSHD_PORT ssh-ed25519 $(awk '{print $2}' "$TMP/sshd/hostkey.pub")" \
		"$RELAY_DATA_DIR/ssh/known_hosts" || fail "host key not pinned: $(cat "$RELAY_DATA_DIR/ssh/known_hosts")"
	run "$RELAY" git status
	assert_out_contains "Commit:         $(g -C "$TMP/work" rev-parse HEAD)"
	assert_out_lacks "Last sync:      never"
	assert_out_contains "Checkout:       present"
	# --json: the same facts as the text.
	local sync kind
	sync=$(sed -n 's/^Last sync:      //p' "$TMP/out")
	kind=$(sed -n 's/^Resolved as:    //p' "$TMP/out")
	run "$RELAY" git status --json
	assert_status 0
	jq -e --arg c "$(g -C "$TMP/work" rev-parse HEAD)" --arg s "$sync" --arg k "$kind" \
		--arg co "$RELAY_DATA_DIR/git/checkout" '.configured and .commit == $c and .last_sync == $s and
		(.last_sync | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")) and
		.checkout == $co and .ssh_key.state == "present" and (.ssh_key.fingerprint | startswith("SHA256:")) and
		(.resolved_as.kind + " " + .resolved_as.ref) == $k' "$TMP/out" >/dev/null ||
		fail "git status --json after a sync: $(cat "$TMP/out")"

	# The remote is the source of truth: a commit removing other/ and
	# changing hello/ is mirrored; the pinned key is reused silently.
	g -C "$TMP/work" rm -q -r gt-other
	echo 'def handler(event): pass' >"$TMP/work/gt-hello/main.py"
	g -C "$TMP/work" commit -q -a -m two
	g -C "$TMP/work" push -q "$TMP/remote.git" main
	echo local-edit >>"$RELAY_DATA_DIR/git/checkout/gt-hello/main.py"
	run "$RELAY" git sync
	assert_status 0
	assert_out_lacks "Trusted new host"
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR" | tr '\n' ' ')" = "gt-hello notes.txt " ] || fail "other not removed"
	diff -r "$TMP/work/gt-hello" "$RELAY_FUNCTIONS_DIR/gt-hello" || fail "hello not refreshed"
	[ -z "$(g -C "$RELAY_DATA_DIR/git/checkout" status --porcelain)" ] || fail "checkout not hard-reset"
	g -C "$RELAY_DATA_DIR/git/checkout" symbolic-ref -q HEAD && fail "HEAD is not detached"
	true
}

test_sync_ref_and_path() {
	setup_source --ref v1 --path services
	run "$RELAY" git sync
	assert_status 0
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR")" = gt-deep ] || fail "path not honoured: $(ls "$RELAY_FUNCTIONS_DIR")"
	# A commit id works too, and an unknown ref fails without touching
	# the functions directory.
	run "$RELAY" git set --ref "$(g -C "$TMP/work" rev-parse HEAD)" "$URL"
	run "$RELAY" git sync
	assert_status 0
	[ "$(ls "$RELAY_FUNCTIONS_DIR" | tr '\n' ' ')" = "gt-hello gt-other " ] || fail "commit ref: $(ls "$RELAY_FUNCTIONS_DIR")"
	run "$RELAY" git set --ref no-such-branch "$URL"
	run "$RELAY" git sync
	assert_status 1
	assert_err_contains "no-such-branch"
	[ "$(ls "$RELAY_FUNCTIONS_DIR" | tr '\n' ' ')" = "gt-hello gt-other " ] || fail "failed sync changed functions"
	# A checkout with zero functions is a success that empties the directory.
	run "$RELAY" git set --path docs "$URL"
	run "$RELAY" git sync
	assert_status 0
	[ -z "$(ls -A "$RELAY_FUNCTIONS_DIR")" ] || fail "zero-function sync left: $(ls "$RELAY_FUNCTIONS_DIR")"
}

# Whoever can push a branch cannot deploy through a pinned tag or commit:
# gt-evil/ is pushed only under branch names that look like those pins.
test_ref_pins_are_exact_and_status_shows_the_kind() {
	setup_source
	local c1
	c1=$(g -C "$TMP/work" rev-parse HEAD)
	run "$RELAY" git sync
	assert_status 0
	run "$RELAY" git status
	assert_out_contains "Resolved as:    branch refs/heads/main"
	mkdir -p "$TMP/work/gt-evil"
	printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {}\n' >"$TMP/work/gt-evil/template.yaml"
	echo 'def handler(event): pass' >"$TMP/work/gt-evil/main.py"
	g -C "$TMP/work" add -A
	g -C "$TMP/work" commit -q -m unreviewed
	g -C "$TMP/work" push -q "$TMP/remote.git" HEAD:refs/heads/v1 "HEAD:refs/heads/$c1"

	run "$RELAY" git set --ref v1 "$URL"
	run "$RELAY" git sync
	assert_status 1
	assert_err_contains 'ref "v1" is ambiguous: both refs/heads/v1 and refs/tags/v1 exist; use --ref refs/heads/v1 or refs/tags/v1'
	[ ! -e "$RELAY_FUNCTIONS_DIR/gt-evil" ] || fail "an ambiguous ref deployed the branch"
	run "$RELAY" git set --ref refs/tags/v1 "$URL"
	run "$RELAY" git sync
	assert_status 0
	[ ! -e "$RELAY_FUNCTIONS_DIR/gt-evil" ] || fail "refs/tags/v1 deployed the branch"
	run "$RELAY" git status
	assert_out_contains "Resolved as:    tag refs/tags/v1"
	run "$RELAY" git set --ref "$c1" "$URL"
	run "$RELAY" git status
	assert_out_contains "Resolved as:    (not yet"
	run "$RELAY" git sync
	assert_status 0
	assert_out_contains "Synced commit $c1"
	[ ! -e "$RELAY_FUNCTIONS_DIR/gt-evil" ] || fail "a branch named like the pinned commit was deployed"
	run "$RELAY" git status
	assert_out_contains "Resolved as:    commit $c1"
	assert_out_contains "Commit:         $c1"
	run "$RELAY" git set --ref refs/heads/v1 "$URL"
	run "$RELAY" git sync
	assert_status 0
	[ -e "$RELAY_FUNCTIONS_DIR/gt-evil" ] || fail "refs/heads/v1 not deployed"
	run "$RELAY" git status
	assert_out_contains "Resolved as:    branch refs/heads/v1"
	run "$RELAY" git set --ref refs/remotes/origin/main "$URL"
	assert_status 1
	assert_err_contains "refs/heads/NAME"
}

test_changed_host_key_fails_and_is_never_replaced() {
	setup_source
	run "$RELAY" git sync
	assert_status 0
	cp "$RELAY_DATA_DIR/ssh/known_hosts" "$TMP/pins"
	stop_sshd
	start_sshd otherkey
	rm -rf "$RELAY_FUNCTIONS_DIR/gt-hello"
	run "$RELAY" git sync
	assert_status 1
	assert_err_contains "man-in-the-middle"
	assert_err_contains "known_hosts"
	cmp -s "$TMP/pins" "$RELAY_DATA_DIR/ssh/known_hosts" || fail "pinned key replaced"
	[ ! -e "$RELAY_FUNCTIONS_DIR/gt-hello" ] || fail "a refused sync wrote functions"
	# The operator resolves a genuine rotation by editing known_hosts.
	: >"$RELAY_DATA_DIR/ssh/known_hosts"
	run "$RELAY" git sync
	assert_status 0
	assert_out_contains "Trusted new host [127.0.0.1]:$SSHD_PORT (fingerprint $(host_fp otherkey))"
}

test_sync_failures_are_clear() {
	run "$RELAY" git sync
	assert_status 1
	assert_err_contains "no git source configured"
	mkdir -p "$TMP/sshd"
	start_sshd hostkey
	make_repo
	run "$RELAY" git set "$URL"
	run "$RELAY" git sync
	assert_status 1
	assert_err_contains "relay git keygen"
	# A key the server does not accept.
	run "$RELAY" git keygen
	run "$RELAY" git sync
	assert_status 1
	assert_err_contains "deploy key"
	[ -z "$(ls "$RELAY_FUNCTIONS_DIR")" ] || fail "failed sync wrote functions"
}

test_remove_keeps_functions_and_key() {
	setup_source
	run "$RELAY" git sync
	assert_status 0
	run "$RELAY" git remove
	assert_status 0
	[ ! -e "$RELAY_DATA_DIR/git/source.json" ] || fail "source.json kept"
	[ ! -e "$RELAY_DATA_DIR/git/checkout" ] || fail "checkout kept"
	[ -f "$RELAY_DATA_DIR/ssh/id_ed25519" ] || fail "key removed"
	[ -f "$RELAY_FUNCTIONS_DIR/gt-hello/template.yaml" ] || fail "functions touched"
	run "$RELAY" git remove
	assert_status 0
	assert_out_eq "No git source configured."
	run "$RELAY" git status
	assert_out_eq "No git source configured."
	mkdir -p "$RELAY_DATA_DIR/git"
	echo '[1,2' >"$RELAY_DATA_DIR/git/source.json"
	chmod 600 "$RELAY_DATA_DIR/git/source.json"
	run "$RELAY" git remove
	assert_status 1
	assert_err_contains "source.json"
	[ -f "$RELAY_DATA_DIR/git/source.json" ] || fail "corrupt config deleted"
}

# ---- the webhook, in relay start ------------------------------------------

# Functions synced while relay runs get built: their images go at the end.
remove_gt_images() {
	local imgs
	imgs=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^relay-fn-gt-' || true)
	[ -z "$imgs" ] || docker rmi $imgs >/dev/null 2>&1 || true
}

# start_relay_webhook [WRAPPER... BINARY]: relay start (default: the
# sanitizer build) with the webhook on a free port; output in relay.log.
start_relay_webhook() {
	local cmd=("$@")
	[ ${#cmd[@]} -gt 0 ] || cmd=("$RELAY")
	trap 'rc=$?; for p in "${!RELAY_LOGS[@]}"; do term_relay "$p" || rc=1; done; remove_gt_images; (exit $rc); it_cleanup' EXIT
	redis_up
	HOOK=127.0.0.1:$(free_port)
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay GIT_WEBHOOK_ADDR=$HOOK
	relay_bg "$TMP/relay.log" "${cmd[@]}" start
}
relay_log_has() { grep -qF -- "$1" "$TMP/relay.log"; }
wait_relay_log() { wait_for "$1" relay_log_has "$2" || fail "relay log lacks: $2
$(tail -n 40 "$TMP/relay.log")"; }

# post EVENT BODYFILE [SIGNATURE]: prints the HTTP status.
post() {
	local sig=()
	[ $# -ge 3 ] && sig=(-H "X-Hub-Signature-256: $3")
	curl -s -o /dev/null -w '%{http_code}\n' --max-time 10 -X POST -H "X-GitHub-Event: $1" \
		-H 'Content-Type: application/json' -H "X-GitHub-Delivery: ${DELIVERY:-d-1}" "${sig[@]}" \
		--data-binary "@$2" "http://$HOOK/github"
}
sign() { echo "sha256=$(openssl dgst -sha256 -hmac "$1" <"$2" | awk '{print $NF}')"; }

push_payload() { # ref > file
	printf '{"ref":"%s","deleted":false,"after":"abc","repository":{"full_name":"x/y","ssh_url":"%s","clone_url":"https://example.com/x/y.git"}}' \
		"$1" "$URL"
}

test_webhook_signed_push_syncs_and_everything_else_is_refused() {
	setup_source --webhook-secret gh-hook
	relay_secret_set gh-hook s3cret-value
	start_relay_webhook
	wait_relay_log 90 "Webhook http server listening on $HOOK"
	wait_relay_log 90 'msg="worker started"'
	push_payload refs/heads/main >"$TMP/push.json"
	push_payload refs/heads/other >"$TMP/other.json"
	echo '{"zen":"hi","hook_id":1}' >"$TMP/ping.json"
	[ "$(post push "$TMP/push.json")" = 401 ] || fail "unsigned push not refused"
	[ "$(post push "$TMP/push.json" "$(sign wrong-secret "$TMP/push.json")")" = 401 ] || fail "bad signature not refused"
	[ "$(post ping "$TMP/ping.json" "$(sign s3cret-value "$TMP/ping.json")")" = 200 ] || fail "ping not 200"
	[ "$(post push "$TMP/other.json" "$(sign s3cret-value "$TMP/other.json")")" = 200 ] || fail "other ref not 200"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$HOOK/github")" = 405 ] || fail "GET not 405"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$HOOK/nope")" = 404 ] || fail "other path not 404"
	sleep 1
	[ -z "$(ls "$RELAY_FUNCTIONS_DIR")" ] || fail "a refused delivery synced"
	relay_log_has "git sync started" && fail "a refused delivery started a sync"
	[ "$(post push "$TMP/push.json" "$(sign s3cret-value "$TMP/push.json")")" = 202 ] || fail "signed push not 202"
	wait_relay_log 60 'msg="git sync complete"'
	[ "$(ls "$RELAY_FUNCTIONS_DIR" | tr '\n' ' ')" = "gt-hello gt-other " ] || fail "webhook sync result: $(ls "$RELAY_FUNCTIONS_DIR")"
	wait_relay_log 60 "Trusted new host [127.0.0.1]:$SSHD_PORT"
	# The reconciler builds what the sync put in place, and never takes the
	# sync's staging directories for functions.
	wait_relay_log 120 'function=gt-hello'
	relay_log_has ".relay-sync-" && fail "a staging directory was seen as a function"
	# Rotation applies without a restart.
	relay_secret_set gh-hook rotated
	[ "$(post push "$TMP/push.json" "$(sign s3cret-value "$TMP/push.json")")" = 401 ] || fail "old secret still accepted"
	# A new delivery (the same one again would be a replay).
	sed 's/"after":"abc"/"after":"abd"/' "$TMP/push.json" >"$TMP/push2.json"
	[ "$(DELIVERY=d-2 post push "$TMP/push2.json" "$(sign rotated "$TMP/push2.json")")" = 202 ] ||
		fail "rotated secret refused"
	wait_for 60 eval '[ "$(grep -c "git sync complete" "$TMP/relay.log")" -ge 2 ]' || fail "second sync missing"
	relay_log_has "s3cret-value" && fail "secret value logged"
	relay_log_has "rotated" && fail "secret value logged"
	stop_relay_pid "$RELAY_PID"
}

test_webhook_burst_coalesces() {
	setup_source
	start_relay_webhook
	wait_relay_log 90 'msg="worker started"'
	push_payload refs/heads/main >"$TMP/push.json"
	# Ten deliveries at once: one sync, plus at most one follow-up.
	for i in $(seq 10); do post push "$TMP/push.json" >"$TMP/code.$i" & done
	wait_for 20 eval '[ "$(cat "$TMP"/code.* | grep -c 202)" -eq 10 ]' ||
		fail "unsigned pushes without a secret refused: $(cat "$TMP"/code.*)"
	# Every push was answered, so every trigger is set: the coalescer owes at
	# most one follow-up, which starts as soon as the first sync ends. Wait
	# until no sync is running (as many completions as starts) and the
	# count stays put for a second.
	started() { grep -c 'msg="git sync started' "$TMP/relay.log"; }
	idle() { [ "$(started)" -ge 1 ] && [ "$(started)" -eq "$(grep -c 'msg="git sync complete"' "$TMP/relay.log")" ]; }
	local n=-1
	quiet() { idle && [ "$(started)" -eq "$n" ] || { n=$(started); false; }; }
	wait_for 60 idle || fail "the burst's syncs did not finish: $(grep 'git sync' "$TMP/relay.log")"
	n=$(started)
	wait_for 60 eval 'sleep 1; quiet' || fail "syncs kept starting: $(grep 'git sync' "$TMP/relay.log")"
	[ "$n" -ge 1 ] && [ "$n" -le 2 ] || fail "$n syncs for a burst of 10 pushes (want 1 or 2)"
}

test_webhook_off_without_source_and_fatal_on_taken_port() {
	start_relay_webhook
	wait_relay_log 90 "webhook server disabled: no git source configured"
	wait_relay_log 90 'msg="worker started"'
	[ -z "$(ss -Htln "( sport = :${HOOK##*:} )")" ] || fail "disabled webhook bound its port"
	stop_relay_pid "$RELAY_PID"
	run "$RELAY" git set git@github.com:acme/repo.git
	socat TCP-LISTEN:"${HOOK##*:}",bind=127.0.0.1,reuseaddr,fork /dev/null &
	track $!
	wait_for 10 eval '[ -n "$(ss -Htln "( sport = :${HOOK##*:} )")" ]' || fail "socat did not listen"
	run timeout 60 "$RELAY" start
	assert_status 1
	grep -qF "cannot start the webhook server" "$TMP/out" "$TMP/err" || fail "no bind error logged"
}

# The webhook path of a long-running worker: start, a signed push, the sync,
# the build of what it brought, stop; valgrind finds nothing of Relay's.
test_valgrind_webhook_sync() {
	[ -x "$RELAY_PLAIN" ] || fail "$RELAY_PLAIN not built (make all)"
	setup_source --webhook-secret gh-hook
	relay_secret_set gh-hook s3cret-value
	start_relay_webhook valgrind --leak-check=full --errors-for-leak-kinds=definite,possible \
		--error-exitcode=99 --suppressions="$ROOT/tests/it/libgit2.valgrind.supp" "$RELAY_PLAIN"
	wait_relay_log 120 'msg="worker started"'
	push_payload refs/heads/main >"$TMP/push.json"
	[ "$(post push "$TMP/push.json" "$(sign s3cret-value "$TMP/push.json")")" = 202 ] || fail "signed push not 202"
	wait_relay_log 120 'msg="git sync complete"'
	wait_relay_log 120 'function=gt-other'
	[ "$(post push "$TMP/push.json" "$(sign wrong "$TMP/push.json")")" = 401 ] || fail "bad signature not refused"
	stop_relay_pid "$RELAY_PID"
	grep -q "ERROR SUMMARY: 0 errors" "$TMP/relay.log" || fail "valgrind found errors: $(grep -A30 'definitely lost\|Invalid' "$TMP/relay.log" | head -60)"
}

# The `relay git sync` command under valgrind with the precise libgit2
# suppressions: LeakSanitizer can only suppress libgit2's own per-connection
# leaks by the git_remote_connect_ext frame (Debian's libgit2 has no names
# for its inner frames), which would also hide a leak of Relay's callbacks
# below it; valgrind's entries name each leak's whole frame sequence.
# First sync (trust on first use), an unchanged second sync, a changed host
# key refused.
test_valgrind_git_sync_command() {
	[ -x "$RELAY_PLAIN" ] || fail "$RELAY_PLAIN not built (make all)"
	setup_source
	local vg=(valgrind --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=99
		--suppressions="$ROOT/tests/it/libgit2.valgrind.supp")
	run "${vg[@]}" "$RELAY_PLAIN" git sync
	[ "$STATUS" -eq 0 ] || fail "first sync under valgrind: $STATUS $(grep -A20 'definitely lost\|Invalid' "$TMP/err" | head -40)"
	assert_out_contains "Trusted new host [127.0.0.1]:$SSHD_PORT"
	grep -q "ERROR SUMMARY: 0 errors" "$TMP/err" || fail "valgrind found errors in the first sync"
	run "${vg[@]}" "$RELAY_PLAIN" git sync
	[ "$STATUS" -eq 0 ] || fail "second sync under valgrind: $STATUS"
	grep -q "ERROR SUMMARY: 0 errors" "$TMP/err" || fail "valgrind found errors in the second sync"
	stop_sshd
	start_sshd otherkey
	run "${vg[@]}" "$RELAY_PLAIN" git sync
	[ "$STATUS" -eq 1 ] || fail "changed host key under valgrind: $STATUS, want 1"
	assert_err_contains "man-in-the-middle"
	grep -q "ERROR SUMMARY: 0 errors" "$TMP/err" || fail "valgrind found errors in the refused sync"
}

# A server that accepts the connection and never says a word: relay start's
# SIGTERM ends the stalled webhook sync at once (the stall bound is a
# minute; relay must be gone long before) and exits 0.
test_sigterm_interrupts_a_stalled_webhook_sync() {
	run "$RELAY" git keygen
	assert_status 0
	local port
	port=$(free_port)
	python3 -c 'import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
time.sleep(3600)' "$port" &
	track $!
	wait_for 10 eval '[ -n "$(ss -Htln "( sport = :$port )")" ]' || fail "silent server did not listen"
	URL="ssh://git@127.0.0.1:$port/srv/repo.git"
	run "$RELAY" git set "$URL"
	assert_status 0
	start_relay_webhook
	wait_relay_log 90 'msg="worker started"'
	push_payload refs/heads/main >"$TMP/push.json"
	[ "$(post push "$TMP/push.json")" = 202 ] || fail "push not accepted"
	wait_relay_log 30 "git sync started"
	wait_for 30 eval '[ -n "$(ss -Htn state established "( dport = :$port )")" ]' ||
		fail "the sync never connected"
	kill -TERM "$RELAY_PID"
	wait_for 10 eval '! kill -0 "$RELAY_PID"' || fail "relay still running 10 s after SIGTERM with a stalled sync"
	reap_relay "$RELAY_PID" 0 || fail "relay did not exit cleanly"
	grep -F 'git sync failed' "$TMP/relay.log" | grep -qF 'interrupted: Relay is shutting down' ||
		fail "no interrupted sync logged: $(grep 'git sync' "$TMP/relay.log")"
	relay_log_has 'msg="Relay stopped"' || fail "relay did not log its stop"
}
