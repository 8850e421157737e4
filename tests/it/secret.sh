# relay secret ls|set|rm against the real binary: the store under
# $RELAY_DATA_DIR/secrets, its permissions, binary values, the hidden prompt
# on a pseudo-terminal (util-linux script), and that a value is never shown.

SECRETS_DIR() { echo "$RELAY_DATA_DIR/secrets"; }

# run_with INPUT_FILE cmd...: like run, with stdin from INPUT_FILE
# (lib.sh's run_from: a sanitizer report or abort fails the test).
run_with() { run_from "$@"; }

# set_value NAME VALUE: stores VALUE (printf %s, so exactly those bytes).
set_value() {
	printf '%s' "$2" >"$TMP/value"
	run_with "$TMP/value" "$RELAY" secret set "$1"
	assert_status 0
	assert_out_empty
	assert_err_empty
}

# on_pty TRANSCRIPT KEYS COMMAND: runs COMMAND under a pseudo-terminal
# (script), types KEYS (printf format) once the prompt has appeared, and
# records everything the terminal showed in TRANSCRIPT.
on_pty() {
	local transcript=$1 keys=$2 command=$3
	: >"$transcript"
	{
		for _ in $(seq 100); do
			grep -q "Value for" "$transcript" 2>/dev/null && break
			sleep 0.1
		done
		# shellcheck disable=SC2059
		printf "$keys"
		sleep 0.5
	} | timeout 30 script -qefc "$command" /dev/null >"$transcript" 2>&1
	sanitizer_clean "$transcript" || fail "sanitizer report on the terminal: $command"
	! grep -q 'exit=134' "$transcript" || fail "exit status 134 (a sanitizer's abort) on the terminal: $command"
}

test_set_ls_rm_round_trip() {
	run "$RELAY" secret ls
	assert_status 0
	assert_out_eq "NAME"
	assert_err_empty
	[ ! -e "$RELAY_DATA_DIR" ] || fail "ls created the data directory"
	run "$RELAY" secret ls --json
	assert_status 0
	jq -e '. == []' "$TMP/out" >/dev/null || fail "secret ls --json (empty): $(cat "$TMP/out")"
	[ ! -e "$RELAY_DATA_DIR" ] || fail "ls --json created the data directory"

	set_value database-url 'postgres://app:pw@db/app'
	set_value api-key 'k-1'
	set_value b.c_d-0 'x'
	run "$RELAY" secret ls
	assert_status 0
	assert_out_eq "NAME
api-key
b.c_d-0
database-url"
	assert_err_empty
	# --json: the same names, as an array of {"name"} objects.
	run "$RELAY" secret ls --json
	assert_status 0
	assert_err_empty
	jq -e '. == [{name: "api-key"}, {name: "b.c_d-0"}, {name: "database-url"}]' "$TMP/out" >/dev/null ||
		fail "secret ls --json: $(cat "$TMP/out")"

	# Rotation: set again replaces the value.
	set_value api-key 'k-2'
	[ "$(cat "$(SECRETS_DIR)/api-key")" = "k-2" ] || fail "value not replaced"

	run "$RELAY" secret rm api-key
	assert_status 0
	assert_out_empty
	assert_err_empty
	run "$RELAY" secret ls
	assert_out_eq "NAME
b.c_d-0
database-url"
	run "$RELAY" secret rm b.c_d-0
	run "$RELAY" secret rm database-url
	run "$RELAY" secret ls
	assert_status 0
	assert_out_eq "NAME"

	# An empty stdin stores an empty value (as given).
	run "$RELAY" secret set empty
	assert_status 0
	[ -f "$(SECRETS_DIR)/empty" ] && [ ! -s "$(SECRETS_DIR)/empty" ] || fail "empty value not stored"
}

test_permissions_on_disk() {
	umask 000
	set_value one 'v1'
	set_value two 'v2'
	[ "$(stat -c %a "$(SECRETS_DIR)")" = 700 ] || fail "secrets dir mode $(stat -c %a "$(SECRETS_DIR)")"
	[ "$(stat -c %a "$(SECRETS_DIR)/one")" = 600 ] || fail "file mode $(stat -c %a "$(SECRETS_DIR)/one")"
	[ "$(stat -c %a "$(SECRETS_DIR)/two")" = 600 ] || fail "file mode $(stat -c %a "$(SECRETS_DIR)/two")"
	[ "$(stat -c %u "$(SECRETS_DIR)/one")" = "$(id -u)" ] || fail "file owner"
	# Missing parents of the data directory are created (0700).
	[ "$(stat -c %a "$RELAY_DATA_DIR")" = 700 ] || fail "data dir mode $(stat -c %a "$RELAY_DATA_DIR")"
	# Atomic writes leave no temporary file behind.
	for i in $(seq 20); do set_value one "v$i"; done
	[ "$(ls -A "$(SECRETS_DIR)" | tr '\n' ' ')" = "one two " ] || fail "stray files: $(ls -A "$(SECRETS_DIR)")"
}

test_binary_one_mib_round_trip() {
	local max=1048576
	printf 'line one\nline two\r\n\0\0nul inside\0\n' >"$TMP/v"
	head -c $((max - $(stat -c %s "$TMP/v") - 1)) /dev/urandom >>"$TMP/v"
	printf '\n' >>"$TMP/v" # trailing newline kept as given
	[ "$(stat -c %s "$TMP/v")" = $max ] || fail "test value is not 1 MiB"
	run_with "$TMP/v" "$RELAY" secret set blob
	assert_status 0
	assert_out_empty
	assert_err_empty
	cmp "$TMP/v" "$(SECRETS_DIR)/blob" || fail "1 MiB binary value changed"

	# Small values with NUL bytes and newlines, trailing newline included.
	printf '\0a\nb\n\n' >"$TMP/small"
	run_with "$TMP/small" "$RELAY" secret set small
	assert_status 0
	cmp "$TMP/small" "$(SECRETS_DIR)/small" || fail "small binary value changed"

	# One byte over the limit is refused and the old value is kept.
	cp "$TMP/v" "$TMP/big"
	printf 'x' >>"$TMP/big"
	run_with "$TMP/big" "$RELAY" secret set blob
	assert_status 1
	assert_out_empty
	assert_err_contains "relay: secret set: value exceeds the maximum of 1048576 bytes"
	cmp "$TMP/v" "$(SECRETS_DIR)/blob" || fail "refused value replaced the old one"
	[ "$(ls -A "$(SECRETS_DIR)" | tr '\n' ' ')" = "blob small " ] || fail "stray files: $(ls -A "$(SECRETS_DIR)")"
}

test_set_on_pty_does_not_echo() {
	local canary="CANARY-pty-$RANDOM$RANDOM"
	on_pty "$TMP/transcript" "$canary\\n" "'$RELAY' secret set tok; echo exit=\$?"
	grep -q "Value for tok: " "$TMP/transcript" || fail "no prompt: $(cat -A "$TMP/transcript")"
	grep -q "exit=0" "$TMP/transcript" || fail "set failed: $(cat -A "$TMP/transcript")"
	! grep -qF "$canary" "$TMP/transcript" || fail "the typed value was echoed: $(cat -A "$TMP/transcript")"
	# Only the newline typed at the terminal is stripped.
	printf '%s' "$canary" >"$TMP/want"
	cmp "$TMP/want" "$(SECRETS_DIR)/tok" || fail "stored value differs"
	[ "$(stat -c %a "$(SECRETS_DIR)/tok")" = 600 ] || fail "file mode"

	# An empty line saves nothing.
	on_pty "$TMP/transcript" "\\n" "'$RELAY' secret set empty; echo exit=\$?"
	grep -q "exit=1" "$TMP/transcript" || fail "empty value accepted: $(cat -A "$TMP/transcript")"
	grep -q "empty value; nothing saved" "$TMP/transcript" || fail "no message: $(cat -A "$TMP/transcript")"
	[ ! -e "$(SECRETS_DIR)/empty" ] || fail "empty value stored"
}

test_pty_interrupt_restores_echo() {
	# ^C while typing: nothing stored, terminal echo back on afterwards.
	on_pty "$TMP/transcript" "abc\\003" \
		"trap '' INT; '$RELAY' secret set tok; echo exit=\$?; stty -a | grep -o -- '-\\?echo ' | head -n1"
	grep -q "exit=130" "$TMP/transcript" || fail "not killed by SIGINT: $(cat -A "$TMP/transcript")"
	grep -qx "echo "$'\r' "$TMP/transcript" || fail "echo not restored: $(cat -A "$TMP/transcript")"
	! grep -q "abc" "$TMP/transcript" || fail "typed text echoed"
	[ ! -e "$(SECRETS_DIR)/tok" ] || fail "interrupted value stored"
}

test_rm_unknown_name() {
	run "$RELAY" secret rm nope
	assert_status 1
	assert_out_empty
	assert_err_eq_line 'relay: secret rm: secret "nope" not found'
	set_value other 'v'
	run "$RELAY" secret rm nope
	assert_status 1
	assert_err_contains 'secret "nope" not found'
	run "$RELAY" secret ls
	assert_out_eq "NAME
other"
}

assert_err_eq_line() { [ "$(cat "$TMP/err")" = "$1" ] || fail "stderr differs; want: $1"; }

test_invalid_names_rejected() {
	local n long
	long=$(printf 'a%.0s' $(seq 64))
	# The first character is a lowercase letter or a digit ("--" so that
	# "-lead" is the name, not an option).
	for n in _lead -lead Foo .hidden trailing. a/b ../x "a b" "$long" "" "caf$(printf '\303\251')"; do
		printf 'v' >"$TMP/v"
		run_with "$TMP/v" "$RELAY" secret set -- "$n"
		assert_status 1
		assert_out_empty
		assert_err_lines 1
		assert_err_contains "relay: secret set: invalid secret name \""
		assert_err_contains "\": a secret name starts with a lowercase letter or a digit, uses lowercase letters, digits, '.', '_' and '-', does not end with '.', and has at most 63 characters"
		run "$RELAY" secret rm -- "$n"
		assert_status 1
		assert_err_contains "relay: secret rm: invalid secret name"
	done
	[ ! -e "$RELAY_DATA_DIR" ] || fail "invalid names created files: $(find "$RELAY_DATA_DIR")"
	# 63 characters is the limit; a digit or a letter may lead, '_' and '-'
	# may follow.
	for n in "${long:1}" 0abc abc 9_-x; do
		set_value "$n" 'v'
	done
	run "$RELAY" secret ls
	assert_out_eq "NAME
0abc
9_-x
${long:1}
abc"
}

test_usage_errors() {
	run "$RELAY" secret set
	assert_status 2
	assert_err_contains "usage: relay secret set NAME"
	run "$RELAY" secret set a b
	assert_status 2
	run "$RELAY" secret rm
	assert_status 2
	run "$RELAY" secret ls extra
	assert_status 2
	run "$RELAY" secret set --bogus x
	assert_status 2
	run "$RELAY" secret set --help
	assert_status 0
	assert_out_contains "usage: relay secret set NAME"
	run "$RELAY" secret
	assert_status 2
	assert_err_contains "secret ls"
	[ ! -e "$RELAY_DATA_DIR" ] || fail "usage errors created files"
}

test_loose_permissions_refused() {
	set_value good 'v1'
	set_value loose 'CANARY-loose'
	chmod 644 "$(SECRETS_DIR)/loose"
	# ls reads no value: it still lists every name, and reports the file
	# the runner would refuse.
	run "$RELAY" secret ls
	assert_status 1
	assert_out_eq "NAME
good
loose"
	assert_err_lines 1
	assert_err_contains "relay: secret ls: secret file $(SECRETS_DIR)/loose: permissions 0644 are too open (want 0600)"
	assert_err_lacks "CANARY"
	# set replaces it with a private file again.
	set_value loose 'v2'
	[ "$(stat -c %a "$(SECRETS_DIR)/loose")" = 600 ] || fail "mode not restored"
	run "$RELAY" secret ls
	assert_status 0

	if [ "$(id -u)" = 0 ]; then
		chown 65534 "$(SECRETS_DIR)/good"
		run "$RELAY" secret ls
		assert_status 1
		assert_err_contains "secret file $(SECRETS_DIR)/good: owned by uid 65534, not by the current user (uid 0)"
		chown 0 "$(SECRETS_DIR)/good"
	fi

	# A loose directory refuses every command.
	chmod 755 "$(SECRETS_DIR)"
	run "$RELAY" secret ls
	assert_status 1
	assert_out_empty
	assert_err_contains "relay: secret ls: secrets directory $(SECRETS_DIR): permissions 0755 are too open (want 0700)"
	printf 'v' >"$TMP/v"
	run_with "$TMP/v" "$RELAY" secret set new
	assert_status 1
	assert_err_contains "permissions 0755 are too open"
	run "$RELAY" secret rm good
	assert_status 1
	assert_err_contains "permissions 0755 are too open"
	[ -e "$(SECRETS_DIR)/good" ] && [ ! -e "$(SECRETS_DIR)/new" ] || fail "store changed while refused"
	chmod 700 "$(SECRETS_DIR)"
	run "$RELAY" secret ls
	assert_status 0
	assert_out_eq "NAME
good
loose"
}

test_value_never_printed() {
	local canary="CANARY-$RANDOM-never-shown"
	local all="$TMP/all"
	: >"$all"
	collect() { cat "$TMP/out" "$TMP/err" >>"$all"; }
	printf '%s\n' "$canary" >"$TMP/v"
	run_with "$TMP/v" "$RELAY" secret set visible
	collect
	run "$RELAY" secret ls
	collect
	run "$RELAY" secret set --help
	collect
	# Error paths: too large, refused directory, refused file.
	{ cat "$TMP/v"; head -c 1048576 /dev/zero; } >"$TMP/big"
	run_with "$TMP/big" "$RELAY" secret set visible
	assert_status 1
	collect
	chmod 644 "$(SECRETS_DIR)/visible"
	run "$RELAY" secret ls
	assert_status 1
	collect
	chmod 755 "$(SECRETS_DIR)"
	run_with "$TMP/v" "$RELAY" secret set other
	assert_status 1
	collect
	chmod 700 "$(SECRETS_DIR)"
	run "$RELAY" secret rm visible
	collect
	run "$RELAY" secret rm visible
	collect
	[ -s "$all" ] || fail "nothing collected"
	! grep -qaF "$canary" "$all" || fail "the value was printed: $(cat "$all")"
}

test_needs_no_redis_configuration() {
	# Only RELAY_DATA_DIR is read: broken or missing REDIS_* do not matter.
	export REDIS_URI='::not a uri' LOG_LEVEL=bogus MAX_CONCURRENCY=-3
	set_value a 'v'
	run "$RELAY" secret ls
	assert_status 0
	assert_out_eq "NAME
a"
	run "$RELAY" secret rm a
	assert_status 0
}
