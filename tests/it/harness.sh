# The test harness checks itself: what makes a green run mean something
# (exit statuses of every relay, sanitizer reports in every log, skips
# counted as skips, the runner's expected count) is proved to turn a run
# red. Each case runs a small scenario or a whole tests/run in a scratch
# tree, with a stand-in relay script where a sanitizer report is needed, and
# asserts that the harness fails it.

# fake_relay FILE [ON_TERM_SHELL]: a stand-in for `relay start` that logs
# the worker-started line and, on SIGTERM, runs ON_TERM_SHELL (default:
# exit 0).
fake_relay() {
	cat >"$1" <<EOF
#!/usr/bin/env bash
trap '${2:-exit 0}' TERM
echo 'level=INFO msg="worker started"'
while :; do sleep 0.1; done
EOF
	chmod +x "$1"
}

# nested BODY: runs BODY as a test of its own (its own it_setup and
# cleanup) with RELAY pointing at $TMP/fake; prints its output; STATUS.
# nested SCRIPT: SCRIPT as a scenario, with CI set only when NESTED_CI says
# so (this file's own run may be under CI=true, which turns skips into
# failures: the cases here say which they test).
nested() {
	CI=${NESTED_CI:-} bash -c "source '$ROOT/tests/it/lib.sh'; RELAY='$TMP/fake'; it_setup; $1" >"$TMP/nested.out" 2>&1
	STATUS=$?
}

test_a_sanitizer_report_in_a_relay_log_fails_the_test() {
	fake_relay "$TMP/fake" 'echo "==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x1"; exit 0'
	nested 'start_relay_as "$TMP/r.log" h1; stop_relay_pid "$RELAY_PID"; echo reached'
	[ "$STATUS" -ne 0 ] || fail "a use-after-free report passed: $(cat "$TMP/nested.out")"
	! grep -q reached "$TMP/nested.out" || fail "the test went on after the report"
	grep -q 'sanitizer report in r.log' "$TMP/nested.out" || fail "the report was not shown: $(cat "$TMP/nested.out")"
	# The same report from UBSan, in a relay the test never stopped itself.
	fake_relay "$TMP/fake" 'echo "src/x.c:1:2: runtime error: signed integer overflow"; exit 0'
	nested 'start_relay_as "$TMP/r.log" h1'
	[ "$STATUS" -ne 0 ] || fail "a UBSan report at cleanup passed: $(cat "$TMP/nested.out")"
}

test_a_relay_exit_status_is_always_checked() {
	fake_relay "$TMP/fake" 'exit 1'
	nested 'start_relay_as "$TMP/r.log" h1; stop_relay_pid "$RELAY_PID"'
	[ "$STATUS" -ne 0 ] || fail "exit 1 after SIGTERM passed"
	grep -q 'exited with 1, want 0' "$TMP/nested.out" || fail "no reason given: $(cat "$TMP/nested.out")"
	# Left running by the test: cleanup stops it and still checks.
	nested 'relay_bg "$TMP/r.log" "$RELAY"; sleep 0.3'
	[ "$STATUS" -ne 0 ] || fail "a relay left running that exits 1 passed"
	grep -q 'left running by the test' "$TMP/nested.out" || fail "no reason given: $(cat "$TMP/nested.out")"
	# SIGKILL: 137 expected, and a clean stop is not a kill.
	fake_relay "$TMP/fake"
	nested 'start_relay_as "$TMP/r.log" h1; kill9_relay_pid "$RELAY_PID"'
	[ "$STATUS" -eq 0 ] || fail "a killed relay failed the test: $(cat "$TMP/nested.out")"
	nested 'start_relay_as "$TMP/r.log" h1; kill -TERM "$RELAY_PID"; sleep 0.5; kill9_relay_pid "$RELAY_PID"'
	[ "$STATUS" -ne 0 ] || fail "a relay that exited 0 passed as killed"
	# And a clean run passes: the checks above are not always red.
	nested 'start_relay_as "$TMP/r.log" h1; stop_relay_pid "$RELAY_PID"'
	[ "$STATUS" -eq 0 ] || fail "a clean stop failed: $(cat "$TMP/nested.out")"
}

test_run_fails_on_a_sanitizer_report_of_a_cli_command() {
	printf '#!/bin/sh\necho "==2==ERROR: LeakSanitizer: detected memory leaks" >&2\nexit 0\n' >"$TMP/fake"
	chmod +x "$TMP/fake"
	nested 'run "$RELAY" stats; echo reached'
	[ "$STATUS" -ne 0 ] || fail "a leak report of a CLI command passed"
	! grep -q reached "$TMP/nested.out" || fail "the test went on after the report"
}

# run_expect is the one way a test runs a CLI command: the exact status,
# a report in either output, and a sanitizer's abort (134) whatever was
# printed, each fail the test at once.
test_run_expect_checks_the_exact_status_and_sanitizer_aborts() {
	# An ASan report on stderr and the abort that follows it.
	printf '#!/bin/sh\necho "==3==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x2" >&2\nkill -ABRT $$\n' >"$TMP/fake"
	chmod +x "$TMP/fake"
	nested 'run_expect 1 "$RELAY" start; echo reached'
	[ "$STATUS" -ne 0 ] || fail "an ASan abort passed run_expect: $(cat "$TMP/nested.out")"
	! grep -q reached "$TMP/nested.out" || fail "the test went on after the abort"
	grep -q 'sanitizer report in err' "$TMP/nested.out" || fail "the report was not shown: $(cat "$TMP/nested.out")"
	# The abort alone (the report went to a log the test does not read):
	# a check accepting any non-zero status would take it for a failure.
	printf '#!/bin/sh\nkill -ABRT $$\n' >"$TMP/fake"
	nested 'run_expect 1 "$RELAY" start; echo reached'
	[ "$STATUS" -ne 0 ] || fail "exit status 134 passed as a failure: $(cat "$TMP/nested.out")"
	grep -q 'exit status 134' "$TMP/nested.out" || fail "no reason given: $(cat "$TMP/nested.out")"
	nested 'run "$RELAY" start; echo reached'
	[ "$STATUS" -ne 0 ] && ! grep -q reached "$TMP/nested.out" || fail "run let exit status 134 through"
	# Another status than the one expected, and from stdin.
	printf '#!/bin/sh\ncat >/dev/null\nexit 2\n' >"$TMP/fake"
	echo input >"$TMP/in"
	nested "run_expect_from '$TMP/in' 1 \"\$RELAY\" secret set x; echo reached"
	[ "$STATUS" -ne 0 ] || fail "exit status 2 passed as 1"
	grep -q 'exit status 2, want 1' "$TMP/nested.out" || fail "no reason given: $(cat "$TMP/nested.out")"
	# And the right status with clean output passes: not always red.
	nested "run_expect_from '$TMP/in' 2 \"\$RELAY\" secret set x; echo reached"
	[ "$STATUS" -eq 0 ] && grep -q reached "$TMP/nested.out" || fail "a clean run failed: $(cat "$TMP/nested.out")"
	# A failure inside a polled command (wait_for hides its output) still
	# says why.
	nested 'wait_for 5 run_expect 1 "$RELAY" x'
	[ "$STATUS" -ne 0 ] && grep -q 'exit status 2, want 1' "$TMP/nested.out" ||
		fail "a failure inside wait_for was silent: $(cat "$TMP/nested.out")"
}

test_skips_are_counted_as_skips() {
	nested 'skip_part "no frobnicator here"; true'
	[ "$STATUS" -eq 77 ] || fail "a partial skip exited $STATUS, want 77"
	grep -qx 'SKIP: no frobnicator here' "$TMP/nested.out" || fail "no SKIP line"
	nested 'skip_part "no frobnicator here"; fail "broken"'
	[ "$STATUS" -eq 1 ] || fail "a failure after a partial skip exited $STATUS, want 1"
	# Under CI=true nothing may be skipped: a skip is a failure.
	NESTED_CI=true nested 'skip "no frobnicator here"'
	[ "$STATUS" -eq 1 ] && grep -q 'would skip under CI=true' "$TMP/nested.out" ||
		fail "a skip under CI=true exited $STATUS: $(cat "$TMP/nested.out")"
	NESTED_CI=true nested 'skip_part "no frobnicator here"; true'
	[ "$STATUS" -eq 1 ] || fail "a partial skip under CI=true exited $STATUS, want 1"
}

# runner_tree: a scratch copy of the runner and the scenario library, with
# no tests in it yet; RT is its root.
runner_tree() {
	RT=$TMP/tree
	rm -rf "$RT"
	mkdir -p "$RT/tests/it" "$RT/tests/unit" "$RT/tests/fuzz" "$RT/build-san/tests" "$RT/build-san/it" "$RT/build-fuzz"
	cp "$ROOT/tests/run" "$RT/tests/run"
	cp "$ROOT/tests/it/lib.sh" "$RT/tests/it/lib.sh"
}

# unit_prog NAME CASES OUTPUT...: a unit source declaring CASES T_CASEs and
# a built "binary" printing OUTPUT lines.
unit_prog() {
	local name=$1 n=$2 i
	shift 2
	: >"$RT/tests/unit/$name.c"
	for ((i = 0; i < n; i++)); do echo "T_CASE(c$i)," >>"$RT/tests/unit/$name.c"; done
	{
		echo '#!/bin/sh'
		printf 'echo "%s"\n' "$@"
	} >"$RT/build-san/tests/$name"
	chmod +x "$RT/build-san/tests/$name"
}

runner() {
	(unset BUILD CI; FUZZ_SECONDS=1 "$RT/tests/run" "$@") >"$TMP/runner.out" 2>&1
	STATUS=$?
	LAST=$(tail -n1 "$TMP/runner.out")
}

test_runner_counts_what_the_sources_declare() {
	runner_tree
	runner
	[ "$STATUS" -eq 1 ] || fail "zero tests passed the runner"
	grep -q '^no test ran' "$TMP/runner.out" || fail "zero tests not reported: $(cat "$TMP/runner.out")"

	unit_prog test_a 2 "ok test_a/c0" "ok test_a/c1"
	runner
	[ "$STATUS" -eq 0 ] && [ "$LAST" = "2 passed, 0 failed, 0 skipped of 2 expected" ] ||
		fail "a clean tree: $STATUS, $LAST"

	# A program that stops reporting half way (a crash) with exit 0.
	unit_prog test_a 2 "ok test_a/c0"
	runner
	[ "$STATUS" -eq 1 ] || fail "a missing case passed: $LAST"
	grep -q 'reported 1 of its 2 tests' "$TMP/runner.out" || fail "no reason: $(cat "$TMP/runner.out")"

	# A source without its binary.
	unit_prog test_a 2 "ok test_a/c0" "ok test_a/c1"
	echo 'T_CASE(x),' >"$RT/tests/unit/test_b.c"
	runner
	[ "$STATUS" -eq 1 ] || fail "a missing unit binary passed: $LAST"
	grep -q '^FAIL unit/test_b (not built' "$TMP/runner.out" || fail "no FAIL for the missing binary"
	rm "$RT/tests/unit/test_b.c"
	: >"$RT/tests/fuzz/fuzz_x.c"
	runner
	[ "$STATUS" -eq 1 ] && grep -q '^FAIL fuzz/fuzz_x (not built' "$TMP/runner.out" || fail "a missing fuzz target passed"
	rm "$RT/tests/fuzz/fuzz_x.c"

	# Skips: a unit SKIP line and a scenario's skip_part are skipped, not
	# passed; a fixture is not a test unless it fails.
	unit_prog test_a 2 "fixture test_a/setup" "ok test_a/c0" "SKIP test_a/c1: no IPv6 loopback"
	printf 'test_s() { skip_part "no promtool"; true; }\ntest_p() { true; }\n' >"$RT/tests/it/s.sh"
	runner
	[ "$STATUS" -eq 0 ] && [ "$LAST" = "2 passed, 0 failed, 2 skipped of 4 expected" ] ||
		fail "skips: $STATUS, $LAST"
	grep -q '^SKIP it/s/test_s: no promtool' "$TMP/runner.out" || fail "no SKIP line for the scenario"
	unit_prog test_a 1 "FAIL test_a/setup (fixture)" "ok test_a/c0"
	runner
	[ "$STATUS" -eq 1 ] || fail "a failed fixture passed: $LAST"

	# A scenario file that does not source, and one that defines a test twice.
	unit_prog test_a 1 "ok test_a/c0"
	printf 'test_s() { true; }\nif then\n' >"$RT/tests/it/s.sh"
	runner
	[ "$STATUS" -eq 1 ] && grep -q '^FAIL it/s (cannot be sourced' "$TMP/runner.out" || fail "a broken scenario file passed: $LAST"
	printf 'test_s() { true; }\ntest_s() { false; }\n' >"$RT/tests/it/s.sh"
	runner
	[ "$STATUS" -eq 1 ] || fail "a test defined twice passed: $LAST"
	rm "$RT/tests/it/s.sh"

	# A filter that matches nothing is not a green run.
	runner no-such-test
	[ "$STATUS" -eq 1 ] || fail "a filter matching nothing passed"
}

# Two lanes (IT_LANES=2): the slow lane's tests are run and counted, its
# failures and skips too, exactly as in one lane; so are those of a file
# of the early lane (reclaim.sh), which runs beside the unit tests.
test_runner_lanes_count_as_one() {
	runner_tree
	unit_prog test_a 1 "ok test_a/c0"
	printf 'test_d1() { true; }\ntest_d2() { skip_part "x"; true; }\n' >"$RT/tests/it/delivery.sh"
	printf 'test_f1() { fail "lane broke"; }\n' >"$RT/tests/it/faults.sh"
	printf 'test_o1() { true; }\n' >"$RT/tests/it/other.sh"
	printf 'test_r1() { true; }\n' >"$RT/tests/it/reclaim.sh"
	local lanes
	for lanes in 1 2; do
		IT_LANES=$lanes runner
		[ "$STATUS" -eq 1 ] && [ "$LAST" = "4 passed, 1 failed, 1 skipped of 6 expected" ] ||
			fail "IT_LANES=$lanes: $STATUS, $LAST"
		grep -q '^FAIL it/faults/test_f1$' "$TMP/runner.out" || fail "IT_LANES=$lanes: the slow lane's failure is not listed"
		grep -q '^  it/faults/test_f1$' "$TMP/runner.out" || fail "IT_LANES=$lanes: the failure is not in the summary"
		grep -qE '^ok it/reclaim/test_r1 \([0-9]+s\)$' "$TMP/runner.out" || fail "IT_LANES=$lanes: the early lane's test is not listed"
		grep -qE '^ +[0-9]+  it/reclaim +lane early$' "$TMP/runner.out" || fail "IT_LANES=$lanes: no early lane in the timing table"
	done
	printf 'test_f1() { true; }\n' >"$RT/tests/it/faults.sh"
	printf 'test_r1() { fail "early broke"; }\n' >"$RT/tests/it/reclaim.sh"
	IT_LANES=2 runner
	[ "$STATUS" -eq 1 ] && [ "$LAST" = "4 passed, 1 failed, 1 skipped of 6 expected" ] || fail "an early lane's failure: $STATUS, $LAST"
	grep -q '^  it/reclaim/test_r1$' "$TMP/runner.out" || fail "the early lane's failure is not in the summary"
	printf 'test_r1() { true; }\n' >"$RT/tests/it/reclaim.sh"
	IT_LANES=2 runner
	[ "$STATUS" -eq 0 ] && [ "$LAST" = "5 passed, 0 failed, 1 skipped of 6 expected" ] || fail "a green two-lane run: $STATUS, $LAST"
}

# The class cannot come back: no scenario starts `relay start` in the
# background except through relay_bg, which records it for reaping.
test_every_background_relay_is_reaped() {
	local bad
	bad=$(grep -nE '(\$RELAY|\$RELAY_PLAIN|relay)"? start\b.*&\s*$' "$ROOT"/tests/it/*.sh | grep -v 'tests/it/lib.sh:' || true)
	[ -z "$bad" ] || fail "relay started in the background without relay_bg:
$bad"
	bad=$(grep -nE '^\s*kill -(9|KILL) "?\$(RELAY_PID|pid|p[0-9])' "$ROOT"/tests/it/*.sh | grep -v 'tests/it/lib.sh:' || true)
	[ -z "$bad" ] || fail "a relay killed without kill9_relay_pid:
$bad"
}

# Checks that cannot fail by their construction stay out of the suite: a
# Docker label filter with "!=" (the daemon has no such operator: it
# matches nothing, so a "nothing left" check passes whatever is left), and
# an exit status accepted as "neither 0 nor 124" (a sanitizer's abort, 134,
# passes as the expected failure; run_expect STATUS names the one wanted).
test_no_check_that_cannot_fail_by_construction() {
	local bad
	bad=$(grep -rnE -- '(--filter[ =]|filters=)[^|]*label=[^ |]*!=' "$ROOT/tests" "$ROOT/bench" 2>/dev/null || true)
	[ -z "$bad" ] || fail "a Docker label filter with != (matches nothing):
$bad"
	bad=$(grep -nE '(STATUS|st|rc)"? -ne 124' "$ROOT"/tests/it/*.sh | grep -v 'tests/it/harness.sh:' || true)
	[ -z "$bad" ] || fail "an exit status checked as 'not 124' instead of exactly:
$bad"
}
