# relay function validate / match as processes against fixture directories.
# Neither touches Redis, Docker or the state database: no REDIS_URI is set
# and DOCKER_HOST points nowhere.

fixture() { # dir name template-text
	mkdir -p "$1/$2"
	printf '%s' "$3" >"$1/$2/template.yaml"
}

GOOD_PY='runtime: python3.14
events:
  - handler: events.created.handler
    pattern:
      event_name: [INSERT]
      table_name: [users]
  - handler: events.any.handler
    pattern: {}
'

test_validate_examples() {
	export DOCKER_HOST=unix:///nonexistent
	run_expect 0 "$RELAY" function validate "$ROOT/examples/functions"
	assert_out_eq "user-events-python: ok
welcome-email-node: ok"
	assert_err_empty
	[ ! -e "$RELAY_DATA_DIR" ] || fail "validate created the data directory"
}

test_validate_defaults_to_functions_dir() {
	fixture "$RELAY_FUNCTIONS_DIR" good "$GOOD_PY"
	run_expect 0 "$RELAY" function validate
	assert_out_eq "good: ok"
}

test_validate_reports_every_error_and_exits_1() {
	local d=$TMP/fx
	fixture "$d" a-good "$GOOD_PY"
	fixture "$d" b-bad 'runtime: ruby
concurrency: 0
events:
  - handler: nodot
    pattern: {a: {gt: now-5m}}
    timeout: 6m
'
	fixture "$d" "Bad Name" "$GOOD_PY"
	fixture "$d" c-typo 'runtime: node24
events:
  - handler: h.h
    pattern: {}
    retires: 3
'
	mkdir -p "$d/d-no-template"
	run_expect 1 "$RELAY" function validate "$d"
	assert_out_eq "Bad Name: invalid function name: must start with a lowercase letter or a digit (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)
a-good: ok
b-bad: runtime: unsupported runtime \"ruby\" (supported: python3.14, node24)
b-bad: concurrency: 0 is not positive; must be a positive integer
b-bad: events[0].handler: \"nodot\" is not of the form module.function (split at the last dot, no empty part)
b-bad: events[0].timeout: 6m exceeds the maximum of 5m
b-bad: events[0].pattern.a.gt: invalid temporal operand \"now-5m\" (use now() or now()±<Go duration>)
c-typo: warning: events[0].\"retires\": unknown key, ignored
c-typo: ok"
	fixture "$d" "bad name" "$GOOD_PY"
	run_expect 1 "$RELAY" function validate "$d"
	assert_out_contains "bad name: invalid function name: only lowercase letters, digits, '.', '_' and '-' are allowed"
}

test_validate_symlink_outside() {
	local d=$TMP/fx
	fixture "$d" leaky "$GOOD_PY"
	ln -s /etc/shadow "$d/leaky/secrets.txt"
	run_expect 1 "$RELAY" function validate "$d"
	assert_out_eq "leaky: secrets.txt: symlink points outside the function directory"
}

test_validate_missing_dir() {
	run_expect 1 "$RELAY" function validate "$TMP/nope"
	assert_err_contains "relay: function validate: cannot read functions directory $TMP/nope"
}

EVENT='{"event_id":"evt_123","event_name":"INSERT","table_name":"users","new_image":{"id":"user_123","name":"John Doe","email":"john@example.com"}}'

test_match_examples_in_order() {
	run_expect 0 "$RELAY" function match --dir "$ROOT/examples/functions" "$EVENT"
	assert_out_eq "$(printf 'user-events-python\tevents.created.handler\nwelcome-email-node\thandler.handler')"
	assert_err_empty
}

test_match_sources_and_no_match() {
	local d=$TMP/fx
	fixture "$d" b "$GOOD_PY"
	fixture "$d" a 'runtime: node24
events:
  - handler: x.first
    pattern: {table_name: [users]}
  - handler: x.second
    pattern: {table_name: {prefix: [use]}}
  - handler: x.never
    pattern: {table_name: [orders]}
'
	printf '%s' "$EVENT" >"$TMP/event.json"
	run_expect 0 "$RELAY" function match --dir "$d" "@$TMP/event.json"
	assert_out_eq "$(printf 'a\tx.first\na\tx.second\nb\tevents.created.handler\nb\tevents.any.handler')"
	cp "$TMP/out" "$TMP/out-arg"
	run_expect_from "$TMP/event.json" 0 "$RELAY" function match --dir "$d" -
	cmp -s "$TMP/out-arg" "$TMP/out" || fail "stdin gave a different answer"
	run_expect 0 "$RELAY" function match --dir "$d" '{"table_name":"orders","event_name":"X"}'
	assert_out_eq "$(printf 'a\tx.never\nb\tevents.any.handler')"
	rm -rf "$d/b"
	run_expect 0 "$RELAY" function match --dir "$d" '{"nothing":1}'
	assert_out_empty
}

test_match_now_fixes_the_instant() {
	local d=$TMP/fx
	fixture "$d" t 'runtime: python3.14
events:
  - handler: m.recent
    pattern: {created_at: {gt: "now()-5m"}}
'
	local ev='{"created_at":"2026-09-13T22:45:00+02:00"}'
	run_expect 0 "$RELAY" function match --dir "$d" --now 2026-09-13T20:47:41Z "$ev"
	assert_out_eq "$(printf 't\tm.recent')"
	run_expect 0 "$RELAY" function match --dir "$d" --now=2026-09-13T20:51:00Z "$ev"
	assert_out_empty
	run_expect 2 "$RELAY" function match --dir "$d" --now yesterday "$ev"
	assert_err_contains "--now yesterday is not an RFC 3339 time"
}

# The EventBridge operators, $or and match_arrays through the CLI: each
# event below is matched by exactly the rules listed (docs/template.md
# "Operators"), in rule order, and validate names the rule and operator.
test_match_eventbridge_operators() {
	local d=$TMP/fx
	fixture "$d" ops 'runtime: node24
events:
  - handler: h.not_stopped
    pattern: {state: {anything-but: [stopped, overloaded]}}
  - handler: h.internal
    pattern: {source_ip: {cidr: [10.0.0.0/24, "2001:db8::/32"]}}
  - handler: h.small_or_image
    pattern:
      $or:
        - count: {numeric: [">", 0, "<=", 5]}
        - file: {wildcard: "*.png"}
  - handler: h.alice
    pattern: {name: {equals-ignore-case: alice}, region: {anything-but: {prefix: us-}}}
'
	fixture "$d" arrays 'runtime: node24
match_arrays: elements
events:
  - handler: h.urgent_a1
    pattern:
      tags: [urgent]
      items: {sku: [A-1], qty: {numeric: [">", 1]}}
'
	run_expect 0 "$RELAY" function match --dir "$d" '{"state":"running","source_ip":"10.0.0.7","count":5}'
	assert_out_eq "$(printf 'ops\th.not_stopped\nops\th.internal\nops\th.small_or_image')"
	run_expect 0 "$RELAY" function match --dir "$d" '{"state":"stopped","source_ip":"::ffff:10.0.0.9","count":6,"file":"a/b.png"}'
	assert_out_eq "$(printf 'ops\th.internal\nops\th.small_or_image')"
	run_expect 0 "$RELAY" function match --dir "$d" '{"name":"ALICE","region":"eu-west-1","source_ip":"2001:DB8::1"}'
	assert_out_eq "$(printf 'ops\th.internal\nops\th.alice')"
	run_expect 0 "$RELAY" function match --dir "$d" '{"name":"ALICE","region":"us-east-1","count":"3","source_ip":"10.0.1.1"}'
	assert_out_empty
	run_expect 0 "$RELAY" function match --dir "$d" '{"tags":["b","urgent"],"items":[{"sku":"B","qty":5},{"sku":"A-1","qty":2}]}'
	assert_out_eq "$(printf 'arrays\th.urgent_a1')"
	run_expect 0 "$RELAY" function match --dir "$d" '{"tags":["urgent"],"items":[{"sku":"A-1","qty":1},{"sku":"B","qty":5}]}'
	assert_out_empty
	fixture "$d" bad 'runtime: node24
match_arrays: element
events:
  - handler: h.f
    pattern:
      ip: {cidr: 10.0.0.0/33}
      f: {wildcard: "a**"}
      n: {numeric: ["=>", 0]}
      s: {anything-but: {prefx: a}}
      $or: [{a: [1]}]
'
	run_expect 1 "$RELAY" function validate "$d"
	assert_out_eq "arrays: ok
bad: match_arrays: must be values or elements, not \"element\"
bad: events[0].pattern.ip.cidr: \"10.0.0.0/33\" has a prefix length that is not a number from 0 to 32
bad: events[0].pattern.f.wildcard: \"a**\" has two stars in a row at byte 1 (one star already matches any run of characters)
bad: events[0].pattern.n.numeric[0]: unknown operator: must be one of =, <, <=, >, >=, got string \"=>\"
bad: events[0].pattern.s.anything-but.prefx: unknown operator \"prefx\" (anything-but takes a list of values or one of prefix, suffix, equals-ignore-case, wildcard)
bad: events[0].pattern.\$or: needs at least 2 branches, got 1
ops: ok"
}

test_match_invalid_events_exit_2() {
	local bad
	for bad in '[1,2]' '"str"' '42' 'null' '{"a":' 'not json' ''; do
		run_expect 2 "$RELAY" function match --dir "$ROOT/examples/functions" "$bad"
		assert_out_empty
		assert_err_contains "relay function match: "
	done
	run_expect 2 "$RELAY" function match --dir "$ROOT/examples/functions" "@$TMP/missing.json"
	assert_err_contains "cannot open $TMP/missing.json"
}

test_match_skips_invalid_functions_with_a_warning() {
	local d=$TMP/fx
	fixture "$d" good "$GOOD_PY"
	fixture "$d" bad 'runtime: ruby
events: []
'
	run_expect 0 "$RELAY" function match --dir "$d" "$EVENT"
	assert_out_eq "$(printf 'good\tevents.created.handler\ngood\tevents.any.handler')"
	assert_err_contains "relay function match: skipping invalid function bad: runtime: unsupported runtime"
}

test_match_usage() {
	run_expect 2 "$RELAY" function match
	assert_err_contains "usage: relay function match"
	run_expect 2 "$RELAY" function match --dir
	assert_err_contains "option '--dir' needs a value"
}
