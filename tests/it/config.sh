# Configuration: every invalid value makes `relay start` exit 1 at
# once with one line naming the variable. No Redis or Docker is reachable
# here on purpose: a config error must be reported before any connection.

valid_env() {
	export REDIS_URI=127.0.0.1:1 REDIS_STREAM=events REDIS_GROUP=relay
	export DOCKER_HOST=unix:///nonexistent
}

# expect_config_error VAR VALUE|--unset WANT-SUBSTRING
expect_config_error() {
	local var=$1 value=$2 want=$3
	valid_env
	if [ "$value" = --unset ]; then unset "$var"; else export "$var=$value"; fi
	local t0=$SECONDS
	# Exit status 1 (docs/operations.md: a bad configuration); a hang would
	# be 124 from the timeout, which only keeps it from blocking the run.
	run_expect 1 timeout 10 "$RELAY" start
	[ $((SECONDS - t0)) -le 3 ] || fail "$var=$value: took $((SECONDS - t0))s"
	assert_err_lines 1
	assert_err_contains "level=ERROR"
	assert_err_contains "invalid configuration: $var"
	assert_err_contains "$want"
	assert_err_lacks "cannot reach"
	unset "$var"
}

test_missing_required() {
	local v
	for v in REDIS_URI REDIS_STREAM REDIS_GROUP; do
		expect_config_error "$v" --unset "$v is required and must not be empty"
		expect_config_error "$v" "" "$v is required and must not be empty"
	done
}

test_bad_max_values() {
	local v x
	for v in MAX_CONCURRENCY MAX_BUFFERED_EVENTS; do
		expect_config_error "$v" 0 "$v '0' is invalid (must be positive); accepted: a positive integer"
		expect_config_error "$v" -1 "$v '-1' is invalid (must be positive)"
		for x in 1.5 abc 2x "" " 3" 1e3 0x10 99999999999999999999; do
			expect_config_error "$v" "$x" "$v '$x' is invalid"
		done
	done
}

test_bad_log_level() {
	expect_config_error LOG_LEVEL WARNING "LOG_LEVEL 'WARNING' is invalid (unknown log level); accepted: DEBUG, INFO, WARN or ERROR"
	expect_config_error LOG_LEVEL verbose "LOG_LEVEL 'verbose' is invalid"
}

test_bad_retention() {
	expect_config_error REDIS_STREAM_RETENTION 0 "REDIS_STREAM_RETENTION '0' is invalid (must be positive)"
	expect_config_error REDIS_STREAM_RETENTION -6h "REDIS_STREAM_RETENTION '-6h' is invalid (must be positive)"
	expect_config_error REDIS_STREAM_RETENTION 6 "REDIS_STREAM_RETENTION '6' is invalid (not a Go duration)"
	expect_config_error REDIS_STREAM_RETENTION 1d "REDIS_STREAM_RETENTION '1d' is invalid (not a Go duration)"
	expect_config_error REDIS_STREAM_RETENTION "6 h" "not a Go duration"
}

test_bad_standby_values() {
	local x
	expect_config_error STANDBY_MAX -1 "STANDBY_MAX '-1' is invalid (must not be negative); accepted: an integer from 0 to 1000 (0 disables standby containers; default MAX_CONCURRENCY, at most 1000)"
	expect_config_error STANDBY_MAX 1001 "STANDBY_MAX '1001' is invalid (must be at most 1000)"
	expect_config_error STANDBY_MAX "" "STANDBY_MAX '' is invalid (empty)"
	for x in 1.5 abc +2 " 3" 0x10 99999999999999999999; do
		expect_config_error STANDBY_MAX "$x" "STANDBY_MAX '$x' is invalid (not an integer)"
	done
	expect_config_error STANDBY_IDLE 0s "STANDBY_IDLE '0s' is invalid (must be positive); accepted: a positive Go duration such as 30s, 10m or 1h (default 10m)"
	expect_config_error STANDBY_IDLE -1m "STANDBY_IDLE '-1m' is invalid (must be positive)"
	expect_config_error STANDBY_IDLE "" "STANDBY_IDLE '' is invalid (empty)"
	for x in 10 1d abc "1 m"; do
		expect_config_error STANDBY_IDLE "$x" "STANDBY_IDLE '$x' is invalid (not a Go duration)"
	done
}

test_bad_listen_addresses() {
	expect_config_error METRICS_ADDR 9090 "METRICS_ADDR '9090' is invalid (not a listen address)"
	expect_config_error METRICS_ADDR "::1:9090" "METRICS_ADDR '::1:9090' is invalid"
	expect_config_error GIT_WEBHOOK_ADDR "localhost:http" "GIT_WEBHOOK_ADDR 'localhost:http' is invalid"
}

test_bad_redis_uri_hides_password() {
	expect_config_error REDIS_URI "redis://bob:Sup3rSecret@h:0" "REDIS_URI 'redis://bob:xxxxx@h:0' is invalid"
	valid_env
	export REDIS_URI="redis://bob:Sup3rSecret@h:0"
	run "$RELAY" start
	assert_err_lacks Sup3rSecret
	# A password with an unescaped '?', '#' or '/' makes the URI invalid; the
	# error still names the URI without it. So does a URI without a scheme.
	local pw
	for pw in 'Sup3r?Secret' 'Sup3r#Secret' 'Sup3r/Secret'; do
		expect_config_error REDIS_URI "redis://bob:$pw@h:1" "REDIS_URI 'redis://bob:xxxxx@h:1' is invalid"
		assert_err_lacks Secret
	done
	expect_config_error REDIS_URI "bob:Sup3rSecret@h:1" "REDIS_URI 'bob:xxxxx@h:1' is invalid"
	assert_err_lacks Sup3rSecret
	expect_config_error REDIS_URI "http://h:1" "unsupported scheme 'http'"
}

test_all_errors_reported_together() {
	valid_env
	export MAX_CONCURRENCY=0 LOG_LEVEL=WARNING
	unset REDIS_GROUP
	run "$RELAY" start
	assert_status 1
	assert_err_lines 3
	assert_err_contains "REDIS_GROUP"
	assert_err_contains "MAX_CONCURRENCY"
	assert_err_contains "LOG_LEVEL"
}

test_valid_config_goes_on_to_dependencies() {
	valid_env
	export LOG_LEVEL=" warn " MAX_CONCURRENCY=4 MAX_BUFFERED_EVENTS=32 REDIS_STREAM_RETENTION=90m \
		METRICS_ADDR="[::1]:9090" GIT_WEBHOOK_ADDR=":8081" STANDBY_MAX=0 STANDBY_IDLE=1h30m
	run timeout 20 "$RELAY" start
	assert_status 1
	assert_err_lacks "invalid configuration"
	assert_err_contains "cannot reach Redis"
	assert_err_contains "connect: Connection refused"
}

# The OpenTelemetry variables (docs/configuration.md, "Tracing"): a bad
# value stops relay start like any other setting; a header value (maybe a
# secret) is never shown.
test_bad_otel_values() {
	expect_config_error OTEL_EXPORTER_OTLP_ENDPOINT collector:4318 \
		"OTEL_EXPORTER_OTLP_ENDPOINT 'collector:4318' is invalid (not an http:// or https:// URL)"
	expect_config_error OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ftp://c/v1/traces \
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT 'ftp://c/v1/traces' is invalid"
	expect_config_error OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf \
		"OTEL_EXPORTER_OTLP_PROTOCOL 'http/protobuf' is invalid (not supported by Relay); accepted: http/json"
	expect_config_error OTEL_EXPORTER_OTLP_TRACES_PROTOCOL grpc \
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL 'grpc' is invalid (not supported by Relay)"
	expect_config_error OTEL_EXPORTER_OTLP_TIMEOUT 10s \
		"OTEL_EXPORTER_OTLP_TIMEOUT '10s' is invalid (not a number of milliseconds from 1 to 600000)"
	expect_config_error OTEL_TRACES_SAMPLER sometimes "OTEL_TRACES_SAMPLER 'sometimes' is invalid (unknown sampler)"
	expect_config_error OTEL_TRACES_SAMPLER_ARG 2 "OTEL_TRACES_SAMPLER_ARG '2' is invalid (not a number from 0 to 1)"
	expect_config_error OTEL_SDK_DISABLED 1 "OTEL_SDK_DISABLED '1' is invalid (neither true nor false)"
	expect_config_error OTEL_BSP_MAX_QUEUE_SIZE 0 \
		"OTEL_BSP_MAX_QUEUE_SIZE '0' is invalid (not a number of spans from 1 to 65536)"
	expect_config_error OTEL_BSP_SCHEDULE_DELAY 2s \
		"OTEL_BSP_SCHEDULE_DELAY '2s' is invalid (not a number of milliseconds from 10 to 600000)"
	expect_config_error OTEL_RESOURCE_ATTRIBUTES novalue "OTEL_RESOURCE_ATTRIBUTES 'novalue' is invalid (entry 1 has no '=')"
	expect_config_error OTEL_EXPORTER_OTLP_HEADERS 'api-key=t0ps3cret,broken' \
		"OTEL_EXPORTER_OTLP_HEADERS is invalid (entry 2 has no '=')"
	assert_err_lacks t0ps3cret
}
