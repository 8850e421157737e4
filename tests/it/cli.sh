# The command line: help, usage errors and the command table.

test_help_goes_to_stdout() {
	run "$RELAY" --help
	assert_status 0
	assert_out_contains "usage: relay <command>"
	for c in "start" "health" "stats" "function ls" "function inspect <name>" \
		"function validate [DIR]" "function match" "secret ls" "secret set NAME" \
		"secret rm NAME" "git keygen" "git set" "git sync" "git status" "git remove" \
		"event status MESSAGE-ID [--json]"; do
		assert_out_contains "  $c"
	done
	assert_err_empty
}

test_every_command_has_help() {
	local c
	while IFS= read -r c; do
		# shellcheck disable=SC2086
		run "$RELAY" $c --help
		assert_status 0
		assert_out_contains "usage: relay $c"
		assert_err_empty
	done <<'LIST'
start
health
stats
function ls
function inspect
function validate
function match
secret ls
secret set
secret rm
git keygen
git set
git sync
git status
git remove
schedule next
event status
dlq ls
dlq show
dlq replay
dlq rm
LIST
}

test_family_help() {
	run "$RELAY" function --help
	assert_status 0
	assert_out_contains "usage: relay function <command>"
	assert_out_contains "function inspect <name>"
	assert_out_lacks "secret ls"
	run "$RELAY" git -h
	assert_status 0
	assert_out_contains "git keygen"
}

test_no_command_is_a_usage_error() {
	run "$RELAY"
	assert_status 2
	assert_out_empty
	assert_err_contains "usage: relay <command>"
}

test_unknown_command() {
	run "$RELAY" frobnicate
	assert_status 2
	assert_out_empty
	assert_err_contains "relay: unknown command 'frobnicate'"
	assert_err_contains "usage: relay <command>"
}

test_unknown_subcommand() {
	run "$RELAY" function frob
	assert_status 2
	assert_out_empty
	assert_err_contains "relay function: unknown command 'frob'"
	assert_err_contains "usage: relay function <command>"
	run "$RELAY" secret
	assert_status 2
	assert_err_contains "usage: relay secret <command>"
}

test_unknown_flag() {
	run "$RELAY" start --bogus
	assert_status 2
	assert_out_empty
	assert_err_contains "relay start: unknown option '--bogus'"
	assert_err_contains "usage: relay start"
	run "$RELAY" health -x
	assert_status 2
	assert_err_contains "relay health: unknown option '-x'"
}

test_unexpected_argument() {
	run "$RELAY" health extra
	assert_status 2
	assert_err_contains "relay health: unexpected argument 'extra'"
}

test_version() {
	run "$RELAY" --version
	assert_status 0
	assert_out_contains "relay "
}
