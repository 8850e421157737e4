# relay function ls, relay function inspect, relay stats against state
# databases on disk: none, one written with the sqlite3 CLI, a corrupt one.
# The commands read only the database file: no REDIS_* variables are set,
# DOCKER_HOST points nowhere and the functions directory does not exist.

# The schema of src/engine/state.c (tests/unit/test_state.c checks its columns).
STATE_SCHEMA="
PRAGMA journal_mode = WAL;
CREATE TABLE functions (name TEXT PRIMARY KEY NOT NULL, runtime TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ready', 'pending')), image TEXT, fingerprint TEXT,
  prepared_at TEXT, last_reconcile_at TEXT,
  last_reconcile_status TEXT CHECK (last_reconcile_status IN ('success', 'failed')),
  last_error TEXT, updated_at TEXT NOT NULL, env TEXT NOT NULL DEFAULT '{}',
  secrets TEXT NOT NULL DEFAULT '{}');
CREATE TABLE handlers (function_name TEXT NOT NULL, handler TEXT NOT NULL, timeout TEXT NOT NULL);
CREATE TABLE schedules (function_name TEXT NOT NULL, handler TEXT NOT NULL, cron TEXT NOT NULL,
  timezone TEXT NOT NULL DEFAULT 'UTC', timeout TEXT NOT NULL);
CREATE TABLE stats (events_received INTEGER NOT NULL DEFAULT 0,
  events_processed INTEGER NOT NULL DEFAULT 0, handler_success INTEGER NOT NULL DEFAULT 0,
  handler_failure INTEGER NOT NULL DEFAULT 0, retries INTEGER NOT NULL DEFAULT 0,
  dlq_entries INTEGER NOT NULL DEFAULT 0, pending_entries INTEGER NOT NULL DEFAULT 0,
  oldest_pending_age_seconds INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL);
CREATE TABLE function_stats (function_name TEXT PRIMARY KEY NOT NULL,
  events INTEGER NOT NULL DEFAULT 0, successes INTEGER NOT NULL DEFAULT 0,
  failures INTEGER NOT NULL DEFAULT 0, retries INTEGER NOT NULL DEFAULT 0,
  dlq_entries INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL);
PRAGMA user_version = 1;
"

FP=3f2a9c0d4b5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8

state_env() {
	export RELAY_FUNCTIONS_DIR=$TMP/no-functions DOCKER_HOST=unix:///nonexistent
	rmdir "$TMP/functions" 2>/dev/null
}

# ago N UNIT: an SQL expression for the RFC3339 UTC time N units ago.
ago() { echo "strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-$1 $2')"; }

populate() {
	mkdir -p "$RELAY_DATA_DIR"
	sqlite3 "$RELAY_DATA_DIR/db.sqlite3" >/dev/null <<EOF || fail "sqlite3 could not populate the database"
$STATE_SCHEMA
INSERT INTO functions VALUES ('user-events-python', 'python3.14', 'ready',
  'relay-fn-user-events-python:3f2a9c0d4b5e6f70', '$FP', $(ago 12 seconds), $(ago 3 minutes),
  'failed', 'events[1].timeout: 6m exceeds the maximum of 5m', $(ago 3 minutes),
  '{"API_URL":"https://api.example.com"}', '{"DATABASE_URL":"database-url"}');
INSERT INTO functions VALUES ('welcome-email-node', 'node24', 'ready',
  'relay-fn-welcome-email-node:0123456789abcdef', '$FP', $(ago 5 days), $(ago 5 days),
  'success', NULL, $(ago 5 days), '{}', '{}');
INSERT INTO functions (name, runtime, status, last_reconcile_at, last_reconcile_status, last_error, updated_at)
  VALUES ('billing', 'node24', 'pending', $(ago 2 hours), 'failed', 'image build failed: exit status 1', $(ago 2 hours));
INSERT INTO functions (name, runtime, status, image, fingerprint, prepared_at, last_reconcile_at,
  last_reconcile_status, updated_at)
  VALUES ('archive', 'python3.14', 'ready', 'relay-fn-archive:ffff', '$FP', $(ago 40 days),
  $(ago 40 days), 'success', $(ago 40 days));
INSERT INTO handlers VALUES ('user-events-python', 'events.created.handler', '6s');
INSERT INTO handlers VALUES ('user-events-python', 'events.updated.handler', '20s');
INSERT INTO handlers VALUES ('user-events-python', 'events.deleted.handler', '6s');
INSERT INTO handlers VALUES ('welcome-email-node', 'welcome.send', '1m30s');
INSERT INTO handlers VALUES ('billing', 'invoices.create', '6s');
INSERT INTO handlers VALUES ('billing', 'invoices.void', '6s');
INSERT INTO schedules VALUES ('user-events-python', 'jobs.cleanup.handler', '0 3 * * *', 'UTC', '6s');
INSERT INTO schedules VALUES ('user-events-python', 'jobs.report.handler', '0 8 * * 1-5', 'Europe/Rome', '20s');
INSERT INTO stats VALUES (152934, 152934, 152801, 133, 82, 4, 17, 134, $(ago 10 seconds));
INSERT INTO function_stats VALUES ('user-events-python', 12493, 12470, 23, 17, 2, $(ago 10 seconds));
EOF
}

# Relative ages vary with the clock: "12s ago" -> "Ns ago" etc.
normalise() { sed -E 's/[0-9]+([smhd]) ago/N\1 ago/g' "$TMP/out"; }

assert_norm_eq() { # expected text (ages as N<unit> ago)
	local got
	got=$(normalise)
	[ "$got" = "$1" ] || fail "stdout differs; got:
$got
want:
$1"
}

test_fresh_database() {
	state_env
	run "$RELAY" stats
	assert_status 0
	assert_err_empty
	assert_out_eq "Events processed:    0
Handler successes:   0
Handler failures:    0
Retries:             0
DLQ entries:         0
Pending entries:     0
Oldest pending age:  0s
Updated:             never"
	run "$RELAY" function ls
	assert_status 0
	assert_err_empty
	assert_out_eq "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED"
	run "$RELAY" function inspect user-events-python
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains 'relay: function inspect: no function named "user-events-python"'
	[ ! -e "$RELAY_DATA_DIR" ] || fail "a read-only command created the data directory"
}

test_empty_data_directory() {
	state_env
	mkdir -p "$RELAY_DATA_DIR"
	run "$RELAY" function ls
	assert_status 0
	assert_out_eq "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED"
	run "$RELAY" stats
	assert_status 0
	assert_out_contains "Updated:             never"
	[ -z "$(ls -A "$RELAY_DATA_DIR")" ] || fail "files created in the data directory: $(ls -A "$RELAY_DATA_DIR")"
}

test_populated_database() {
	state_env
	populate
	local old
	old=$(date -u -d '-40 days' +%F)

	run "$RELAY" function ls
	assert_status 0
	assert_err_empty
	assert_norm_eq "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED
archive               python3.14   ready     0          $old
billing               node24       pending   2          Nh ago
user-events-python    python3.14   ready     3          Ns ago
welcome-email-node    node24       ready     1          Nd ago"

	run "$RELAY" function inspect user-events-python
	assert_status 0
	assert_err_empty
	local prepared
	prepared=$(sqlite3 "$RELAY_DATA_DIR/db.sqlite3" "SELECT prepared_at FROM functions WHERE name = 'user-events-python'")
	assert_norm_eq "Name:              user-events-python
Runtime:           python3.14
Status:            ready
Image:             relay-fn-user-events-python:3f2a9c0d4b5e6f70
Fingerprint:       $FP
Prepared:          $prepared (Ns ago)
Last reconcile:    failed (Nm ago)
Last error:        events[1].timeout: 6m exceeds the maximum of 5m

Events:
  events.created.handler   timeout=6s
  events.updated.handler   timeout=20s
  events.deleted.handler   timeout=6s

Schedules:
  jobs.cleanup.handler                  cron=\"0 3 * * *\" (At 03:00) timezone=UTC
  jobs.report.handler                   cron=\"0 8 * * 1-5\" (At 08:00, Monday through Friday) timezone=Europe/Rome timeout=20s

Stats:
  Events processed:    12493
  Handler successes:   12470
  Handler failures:    23
  Retries:             17
  DLQ entries:         2

Environment:
  API_URL=https://api.example.com

Secrets:
  DATABASE_URL=database-url"

	# Pending: no Image/Fingerprint/Prepared; zero stats; no env blocks.
	run "$RELAY" function inspect billing
	assert_status 0
	assert_norm_eq "Name:              billing
Runtime:           node24
Status:            pending
Last reconcile:    failed (Nh ago)
Last error:        image build failed: exit status 1

Events:
  invoices.create   timeout=6s
  invoices.void     timeout=6s

Stats:
  Events processed:    0
  Handler successes:   0
  Handler failures:    0
  Retries:             0
  DLQ entries:         0"

	run "$RELAY" function inspect welcome-email-node
	assert_status 0
	assert_out_contains "Last reconcile:    success ("
	assert_out_lacks "Last error:"
	assert_out_contains "  welcome.send   timeout=1m30s"

	run "$RELAY" stats
	assert_status 0
	assert_err_empty
	assert_norm_eq "Events processed:    152934
Handler successes:   152801
Handler failures:    133
Retries:             82
DLQ entries:         4
Pending entries:     17
Oldest pending age:  2m14s
Updated:             Ns ago"

	run "$RELAY" function inspect nope
	assert_status 1
	assert_err_contains 'relay: function inspect: no function named "nope"'
}

# --json: one document each, the same data as the tables, times RFC 3339
# UTC, durations in seconds.
test_json_outputs() {
	state_env
	run "$RELAY" stats --json
	assert_status 0
	jq -e '. == {events_processed: 0, handler_successes: 0, handler_failures: 0, retries: 0,
		dlq_entries: 0, pending_entries: 0, oldest_pending_age_seconds: 0, updated_at: null}' "$TMP/out" >/dev/null ||
		fail "stats --json (fresh): $(cat "$TMP/out")"
	run "$RELAY" function ls --json
	assert_status 0
	jq -e '. == []' "$TMP/out" >/dev/null || fail "function ls --json (fresh): $(cat "$TMP/out")"
	[ ! -e "$RELAY_DATA_DIR" ] || fail "a read-only command created the data directory"

	populate
	local db=$RELAY_DATA_DIR/db.sqlite3 table
	# function ls: the table's cells, row by row, and each row's time.
	run "$RELAY" function ls
	table=$(awk 'NR > 1 { print $1, $2, $3, $4 }' "$TMP/out")
	run "$RELAY" function ls --json
	assert_status 0
	assert_err_empty
	[ "$(jq -r '.[] | "\(.name) \(.runtime) \(.status) \(.handlers)"' "$TMP/out")" = "$table" ] ||
		fail "function ls --json differs from the table: $(cat "$TMP/out")"
	[ "$(jq -r '.[] | .updated_at' "$TMP/out")" = "$(sqlite3 "$db" "SELECT coalesce(prepared_at, updated_at) FROM functions ORDER BY name")" ] ||
		fail "function ls --json: updated_at: $(cat "$TMP/out")"

	run "$RELAY" function inspect user-events-python --json
	assert_status 0
	assert_err_empty
	jq -e --arg fp "$FP" --arg p "$(sqlite3 "$db" "SELECT prepared_at FROM functions WHERE name = 'user-events-python'")" \
		--arg r "$(sqlite3 "$db" "SELECT last_reconcile_at FROM functions WHERE name = 'user-events-python'")" '. == {
		name: "user-events-python", runtime: "python3.14", status: "ready",
		image: "relay-fn-user-events-python:3f2a9c0d4b5e6f70", fingerprint: $fp, prepared_at: $p,
		last_reconcile: {status: "failed", at: $r},
		last_error: "events[1].timeout: 6m exceeds the maximum of 5m", match_arrays: "values",
		events: [{handler: "events.created.handler", timeout_seconds: 6},
			{handler: "events.updated.handler", timeout_seconds: 20},
			{handler: "events.deleted.handler", timeout_seconds: 6}],
		schedules: [{handler: "jobs.cleanup.handler", cron: "0 3 * * *", description: "At 03:00", timezone: "UTC", timeout_seconds: 6},
			{handler: "jobs.report.handler", cron: "0 8 * * 1-5", description: "At 08:00, Monday through Friday",
			 timezone: "Europe/Rome", timeout_seconds: 20}],
		standby: [],
		stats: {events_processed: 12493, handler_successes: 12470, handler_failures: 23, retries: 17, dlq_entries: 2},
		environment: [{name: "API_URL", value: "https://api.example.com"}],
		secrets: [{name: "DATABASE_URL", value: "database-url"}]}' "$TMP/out" >/dev/null ||
		fail "function inspect --json: $(cat "$TMP/out")"

	# Pending: no image, fingerprint or prepared time, as in the text.
	run "$RELAY" function inspect billing --json
	assert_status 0
	jq -e '.status == "pending" and .image == null and .fingerprint == null and .prepared_at == null and
		.last_reconcile.status == "failed" and .last_error == "image build failed: exit status 1" and
		.events == [{handler: "invoices.create", timeout_seconds: 6}, {handler: "invoices.void", timeout_seconds: 6}] and
		.schedules == [] and .environment == [] and .secrets == [] and .stats.events_processed == 0' "$TMP/out" >/dev/null ||
		fail "function inspect billing --json: $(cat "$TMP/out")"
	run "$RELAY" function inspect welcome-email-node --json
	jq -e '.events == [{handler: "welcome.send", timeout_seconds: 90}] and .last_error == null' "$TMP/out" >/dev/null ||
		fail "function inspect welcome-email-node --json: $(cat "$TMP/out")"
	run "$RELAY" function inspect nope --json
	assert_status 1
	assert_out_empty
	assert_err_contains 'relay: function inspect: no function named "nope"'

	run "$RELAY" stats --json
	assert_status 0
	assert_err_empty
	jq -e --arg u "$(sqlite3 "$db" "SELECT updated_at FROM stats")" '. == {events_processed: 152934,
		handler_successes: 152801, handler_failures: 133, retries: 82, dlq_entries: 4, pending_entries: 17,
		oldest_pending_age_seconds: 134, updated_at: $u}' "$TMP/out" >/dev/null ||
		fail "stats --json: $(cat "$TMP/out")"
}

# A function_options row saying elements (written since match_arrays
# exists) shows as one line and in --json; a function without a row (this
# version-1 file has no such table at first) reads as values, no line.
test_match_arrays_elements_shown() {
	state_env
	populate
	local db=$RELAY_DATA_DIR/db.sqlite3
	run "$RELAY" function inspect welcome-email-node
	assert_status 0
	[ "$(grep -c 'Match arrays' "$TMP/out")" = 0 ] || fail "a Match arrays line without the table: $(cat "$TMP/out")"
	sqlite3 "$db" "CREATE TABLE function_options (function_name TEXT PRIMARY KEY NOT NULL,
	  match_arrays TEXT NOT NULL CHECK (match_arrays IN ('values', 'elements')));
	  INSERT INTO function_options VALUES ('welcome-email-node', 'elements'), ('archive', 'values');" ||
		fail "sqlite3 could not add function_options"
	run "$RELAY" function inspect welcome-email-node
	assert_status 0
	assert_norm_eq "Name:              welcome-email-node
Runtime:           node24
Status:            ready
Image:             relay-fn-welcome-email-node:0123456789abcdef
Fingerprint:       $FP
Prepared:          $(sqlite3 "$db" "SELECT prepared_at FROM functions WHERE name = 'welcome-email-node'") (Nd ago)
Last reconcile:    success (Nd ago)
Match arrays:      elements

Events:
  welcome.send   timeout=1m30s

Stats:
  Events processed:    0
  Handler successes:   0
  Handler failures:    0
  Retries:             0
  DLQ entries:         0"
	run "$RELAY" function inspect welcome-email-node --json
	assert_status 0
	jq -e '.match_arrays == "elements"' "$TMP/out" >/dev/null || fail "inspect --json: $(cat "$TMP/out")"
	run "$RELAY" function inspect archive
	assert_status 0
	[ "$(grep -c 'Match arrays' "$TMP/out")" = 0 ] || fail "a Match arrays line for values: $(cat "$TMP/out")"
	run "$RELAY" function inspect archive --json
	jq -e '.match_arrays == "values"' "$TMP/out" >/dev/null || fail "inspect archive --json: $(cat "$TMP/out")"
}

test_reads_only_the_database() {
	state_env
	populate
	# Variables the runtime would reject are not even looked at.
	export REDIS_URI='::not a uri::' REDIS_STREAM= LOG_LEVEL=loud MAX_CONCURRENCY=0
	run "$RELAY" stats
	assert_status 0
	assert_out_contains "Events processed:    152934"
	run "$RELAY" function ls
	assert_status 0
	assert_out_contains "user-events-python"
	run "$RELAY" function inspect archive
	assert_status 0
	assert_out_contains "Status:            ready"
	[ ! -e "$TMP/no-functions" ] || fail "the functions directory was created"
}

test_corrupt_database() {
	state_env
	mkdir -p "$RELAY_DATA_DIR"
	head -c 8192 /dev/urandom >"$RELAY_DATA_DIR/db.sqlite3"
	local sum
	sum=$(md5sum <"$RELAY_DATA_DIR/db.sqlite3")
	run "$RELAY" stats
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: stats: state database $RELAY_DATA_DIR/db.sqlite3: "
	assert_err_contains "file is not a database"
	run "$RELAY" function ls
	assert_status 1
	assert_out_empty
	assert_err_contains "relay: function ls: state database $RELAY_DATA_DIR/db.sqlite3: "
	run "$RELAY" function inspect user-events-python
	assert_status 1
	assert_err_contains "relay: function inspect: state database $RELAY_DATA_DIR/db.sqlite3: "
	[ "$(md5sum <"$RELAY_DATA_DIR/db.sqlite3")" = "$sum" ] || fail "the corrupt file was modified"
}

test_usage_errors() {
	state_env
	run "$RELAY" function inspect
	assert_status 2
	assert_err_contains "usage: relay function inspect <name>"
	run "$RELAY" function ls extra
	assert_status 2
	run "$RELAY" stats --bogus
	assert_status 2
	run "$RELAY" stats --help
	assert_status 0
	assert_out_contains "Reads the state database only"
	[ ! -e "$RELAY_DATA_DIR" ] || fail "the data directory was created"
}
