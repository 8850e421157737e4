# The function author's loop: relay function new, relay event send (and
# the two together under a real relay start). Redis is a private
# redis-server (start_redis); Docker only for the end-to-end run.

SAMPLE='{"event_name":"hello","name":"world"}'

# new_expected DIR NAME HANDLER MANIFEST: the exact stdout of
# `relay function new` writing into the functions directory DIR.
new_expected() {
	printf 'created %s/%s/template.yaml\ncreated %s/%s/%s\ncreated %s/%s/%s\nnext: relay function invoke %s --event '\''%s'\''' \
		"$1" "$2" "$1" "$2" "$3" "$1" "$2" "$4" "$2" "$SAMPLE"
}

test_new_each_runtime_then_validate() {
	run "$RELAY" function new hello-py --runtime python3.14
	assert_status 0
	assert_err_empty
	assert_out_eq "$(new_expected "$RELAY_FUNCTIONS_DIR" hello-py handler.py requirements.txt)"
	run "$RELAY" function new hello-js --runtime node24 --dir "$RELAY_FUNCTIONS_DIR"
	assert_status 0
	assert_err_empty
	assert_out_eq "$(new_expected "$RELAY_FUNCTIONS_DIR" hello-js handler.js package.json)"
	[ "$(cd "$RELAY_FUNCTIONS_DIR" && find . | LC_ALL=C sort | tr '\n' ' ')" = ". ./hello-js ./hello-js/handler.js ./hello-js/package.json ./hello-js/template.yaml ./hello-py ./hello-py/handler.py ./hello-py/requirements.txt ./hello-py/template.yaml " ] ||
		fail "unexpected files: $(cd "$RELAY_FUNCTIONS_DIR" && find . | LC_ALL=C sort)"
	run "$RELAY" function validate
	assert_status 0
	assert_out_eq "hello-js: ok
hello-py: ok"
	assert_err_empty
	# The sample event of the printed next step matches each one rule.
	run "$RELAY" function match "$SAMPLE"
	assert_status 0
	assert_out_eq "$(printf 'hello-js\thandler.handler\nhello-py\thandler.handler')"
	# The empty manifests are the same bytes for every function (one
	# dependency image per runtime, shared): no name in them.
	run "$RELAY" function new other-py --runtime python3.14
	assert_status 0
	cmp -s "$RELAY_FUNCTIONS_DIR/hello-py/requirements.txt" "$RELAY_FUNCTIONS_DIR/other-py/requirements.txt" ||
		fail "requirements.txt differs between functions"
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d == {"private": True, "type": "module", "dependencies": {}}, d' \
		"$RELAY_FUNCTIONS_DIR/hello-js/package.json" || fail "package.json is not the stub"
}

test_new_into_another_dir_names_it_in_the_next_step() {
	local d="$TMP/my fns"
	run "$RELAY" function new x1 --runtime node24 --dir "$d"
	assert_status 0
	assert_out_eq "created $d/x1/template.yaml
created $d/x1/handler.js
created $d/x1/package.json
next: RELAY_FUNCTIONS_DIR='$d' relay function invoke x1 --event '$SAMPLE'"
	run "$RELAY" function validate "$d"
	assert_status 0
	assert_out_eq "x1: ok"
}

test_new_refuses_invalid_name_existing_dir_unknown_runtime() {
	run "$RELAY" function new Hello --runtime python3.14
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = 'relay: function new: invalid function name "Hello": must start with a lowercase letter or a digit (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)' ] ||
		fail "invalid name: $(cat "$TMP/err")"
	run "$RELAY" function new "a/b" --runtime python3.14
	assert_status 1
	[ "$(cat "$TMP/err")" = "relay: function new: invalid function name \"a/b\": only lowercase letters, digits, '.', '_' and '-' are allowed (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)" ] ||
		fail "invalid name: $(cat "$TMP/err")"
	# The same rule and wording as discovery: validate says the same of a
	# directory so named.
	mkdir -p "$TMP/d/Hello" && printf 'runtime: node24\n' >"$TMP/d/Hello/template.yaml"
	run "$RELAY" function validate "$TMP/d"
	assert_out_contains "Hello: invalid function name: must start with a lowercase letter or a digit (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)"

	mkdir -p "$RELAY_FUNCTIONS_DIR/taken"
	echo keep >"$RELAY_FUNCTIONS_DIR/taken/mine"
	run "$RELAY" function new taken --runtime node24
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = "relay: function new: $RELAY_FUNCTIONS_DIR/taken already exists" ] ||
		fail "existing dir: $(cat "$TMP/err")"
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR/taken")" = mine ] || fail "the existing directory was changed"

	run "$RELAY" function new fresh --runtime python3
	assert_status 2
	assert_out_empty
	[ "$(cat "$TMP/err")" = 'relay function new: unsupported runtime "python3" (supported: python3.14, node24)' ] ||
		fail "unknown runtime: $(cat "$TMP/err")"
	run "$RELAY" function new fresh
	assert_status 2
	[ "$(cat "$TMP/err")" = 'relay function new: --runtime is required (one of python3.14, node24)' ] ||
		fail "no runtime: $(cat "$TMP/err")"
	run "$RELAY" function new --runtime node24
	assert_status 2
	assert_err_contains "relay function new: missing argument"
	# Nothing was written by any refusal: no directory, no staging left.
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR")" = taken ] || fail "left behind: $(ls -A "$RELAY_FUNCTIONS_DIR")"
}

test_new_failure_leaves_nothing() {
	# A functions directory that cannot be written: no function, no staging
	# directory, one line.
	[ "$(id -u)" -ne 0 ] || command -v setpriv >/dev/null || skip "needs setpriv to drop root"
	local d=$TMP/ro
	mkdir -p "$d" && chmod 0555 "$d" && chmod 0711 "$TMP"
	if [ "$(id -u)" -eq 0 ]; then
		run setpriv --reuid=65534 --regid=65534 --clear-groups "$RELAY" function new nope --runtime node24 --dir "$d"
	else
		run "$RELAY" function new nope --runtime node24 --dir "$d"
	fi
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: function new: cannot create a temporary directory in $d: Permission denied"
	[ -z "$(ls -A "$d")" ] || fail "left behind: $(ls -A "$d")"
}

test_new_write_failure_leaves_nothing() {
	# The functions directory fills up after the staging directory is made
	# (a tmpfs of three inodes): the files written so far and the staging
	# directory are removed, no DIR/NAME appears, one line says why.
	local d=$TMP/full
	mkdir -p "$d"
	unshare -m sh -c "mount -t tmpfs -o nr_inodes=3 none '$d' && touch '$d/.ok'" 2>/dev/null ||
		skip "cannot mount a tmpfs in a private mount namespace"
	unshare -m sh -c "mount -t tmpfs -o nr_inodes=3 none '$d' && '$RELAY' function new abc --runtime node24 --dir '$d' >'$TMP/out' 2>'$TMP/err'; echo \$? >'$TMP/status'; ls -A '$d' >'$TMP/left'"
	STATUS=$(cat "$TMP/status")
	sanitizer_clean "$TMP/out" "$TMP/err" || fail "sanitizer report"
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	grep -qE "^relay: function new: cannot create a file in $d/\.relay-sync-new-abc\.tmp-[A-Za-z0-9]{6}: No space left on device\$" "$TMP/err" ||
		fail "stderr: $(cat "$TMP/err")"
	[ ! -s "$TMP/left" ] || fail "left behind: $(cat "$TMP/left")"
}

test_help_lists_the_author_commands() {
	run "$RELAY" --help
	assert_status 0
	assert_out_contains "  function new <name> --runtime RUNTIME [--dir DIR]"
	run "$RELAY" function new --help
	assert_status 0
	assert_out_contains "usage: relay function new <name> --runtime RUNTIME [--dir DIR]"
	assert_out_contains "Creates one directory in the functions directory (or DIR); touches no"
	assert_err_empty
}
