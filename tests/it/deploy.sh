# Deployment files: the systemd unit as `make install` installs it
# (systemd-analyze verify, and the sandbox as systemd-analyze security scores
# it), the installed file list, the man page (rendered without warnings,
# listing every command of `relay --help` as its usage line says and every
# variable Relay reads, with its default) and the Prometheus alerting rules
# (promtool check and unit tests). Static checks: no Redis or Docker.

# need TOOL...: scripts/install-deps installs each of them.
need() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || fail "$t is not installed (scripts/install-deps installs it)"
	done
}

# install_to DESTDIR [make variables...]: `make install` from the tree into
# DESTDIR with the tested build's binary (-o: never rebuilt here).
install_to() {
	local dest=$1
	shift
	[ -x "$ROOT/$BUILD/relay" ] || fail "$BUILD/relay is not built"
	make -s -C "$ROOT" -o "$BUILD/relay" BUILD="$BUILD" DESTDIR="$dest" "$@" install \
		>"$TMP/make.log" 2>&1 || fail "make install $*: $(cat "$TMP/make.log")"
}

# The files under DIR as "mode path", sorted.
file_list() { (cd "$1" && find . -type f -printf '%m %P\n' | LC_ALL=C sort -k2); }

test_make_install_installs_binary_unit_and_man_page() {
	install_to "$TMP/root" PREFIX=/usr
	[ "$(file_list "$TMP/root")" = "755 usr/bin/relay
644 usr/lib/systemd/system/relay.service
644 usr/share/man/man1/relay.1" ] || fail "installed files differ: $(file_list "$TMP/root")"
	cmp -s "$ROOT/$BUILD/relay" "$TMP/root/usr/bin/relay" || fail "installed binary differs from $BUILD/relay"
	cmp -s "$ROOT/docs/relay.1" "$TMP/root/usr/share/man/man1/relay.1" || fail "installed man page differs"
	# The unit as shipped, but for ExecStart= pointing at PREFIX.
	diff <(sed 's|^ExecStart=/usr/local/bin/relay |ExecStart=/usr/bin/relay |' "$ROOT/deploy/relay.service") \
		"$TMP/root/usr/lib/systemd/system/relay.service" >"$TMP/diff" ||
		fail "installed unit differs: $(cat "$TMP/diff")"
	grep -qx 'ExecStart=/usr/bin/relay start' "$TMP/root/usr/lib/systemd/system/relay.service" ||
		fail "ExecStart= does not follow PREFIX=/usr"

	# The default PREFIX is /usr/local, where the shipped unit points.
	install_to "$TMP/local"
	[ "$(file_list "$TMP/local")" = "755 usr/local/bin/relay
644 usr/local/lib/systemd/system/relay.service
644 usr/local/share/man/man1/relay.1" ] || fail "installed files differ: $(file_list "$TMP/local")"
	cmp -s "$ROOT/deploy/relay.service" "$TMP/local/usr/local/lib/systemd/system/relay.service" ||
		fail "with the default PREFIX the unit should be installed unchanged"
	install_to "$TMP/opt" PREFIX=/opt/relay
	grep -qx 'ExecStart=/opt/relay/bin/relay start' "$TMP/opt/opt/relay/lib/systemd/system/relay.service" ||
		fail "ExecStart= does not follow PREFIX=/opt/relay"
}

test_make_install_into_destdir_needs_no_root() {
	[ "$(id -u)" -eq 0 ] || {
		install_to "$TMP/user" PREFIX=/usr
		[ -x "$TMP/user/usr/bin/relay" ] || fail "nothing installed"
		return 0
	}
	# As root, install as nobody into a directory nobody owns.
	chmod 0711 "$TMP"
	mkdir "$TMP/nobody" && chown nobody: "$TMP/nobody"
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		make -s -C "$ROOT" -o "$BUILD/relay" BUILD="$BUILD" DESTDIR="$TMP/nobody/root" PREFIX=/usr install \
		>"$TMP/make.log" 2>&1 || fail "make install as nobody: $(cat "$TMP/make.log")"
	[ "$(file_list "$TMP/nobody/root")" = "755 usr/bin/relay
644 usr/lib/systemd/system/relay.service
644 usr/share/man/man1/relay.1" ] || fail "installed files differ: $(file_list "$TMP/nobody/root")"
	[ "$(stat -c %U "$TMP/nobody/root/usr/bin/relay")" = nobody ] || fail "installed files should belong to the installing user"
}

# verify_copy: the unit installed with PREFIX=/usr, with ExecStart= moved
# into DESTDIR so that systemd-analyze finds the binary it names (it checks
# that ExecStart= is executable on this machine, and --root would look for
# every unit it pulls in, sysinit.target..., inside DESTDIR as well).
verify_copy() {
	install_to "$TMP/root" PREFIX=/usr
	mkdir -p "$TMP/verify"
	sed "s|^ExecStart=/usr/bin/relay |ExecStart=$TMP/root/usr/bin/relay |" \
		"$TMP/root/usr/lib/systemd/system/relay.service" >"$TMP/verify/relay.service"
	grep -q "^ExecStart=$TMP/root/usr/bin/relay start\$" "$TMP/verify/relay.service" || fail "ExecStart= not rewritten"
}

test_unit_passes_systemd_analyze_verify() {
	need systemd-analyze man
	verify_copy
	# systemd-analyze reports an unknown key or a value it cannot parse and
	# still exits 0: any output at all is a failure. MANPATH: it also runs
	# man for Documentation=man:relay(1), which must be the installed page.
	MANPATH=$TMP/root/usr/share/man systemd-analyze verify "$TMP/verify/relay.service" >"$TMP/verify.log" 2>&1
	STATUS=$?
	[ "$STATUS" -eq 0 ] && [ ! -s "$TMP/verify.log" ] ||
		fail "systemd-analyze verify (exit status $STATUS): $(cat "$TMP/verify.log")"
}

# The sandbox as systemd itself scores it (systemd-analyze security, 81
# checks on systemd 252): every check passes but those Relay needs to fail,
# namely the network, Unix and Internet sockets, the docker group, the host's
# root, its users and the device ACL that ProtectClock= adds; overall
# exposure 1.3 (0 is fully isolated, 10 not at all). Dropping any other
# protection, even one too light to move the score (MemoryDenyWriteExecute=,
# LockPersonality=, ProcSubset=), fails a check.
test_unit_sandbox_fails_only_the_checks_relay_needs() {
	need systemd-analyze
	verify_copy
	# A UTF-8 locale: under LC_ALL=C the marks are + and - instead.
	(cd "$TMP/verify" && LC_ALL=C.UTF-8 systemd-analyze security --offline=yes --no-pager relay.service) >"$TMP/security" 2>&1
	grep -q 'Overall exposure level for relay.service: ' "$TMP/security" || fail "no exposure level: $(cat "$TMP/security")"
	[ "$(grep -c '✓' "$TMP/security")" -ge 70 ] || fail "fewer checks passed than expected: $(cat "$TMP/security")"
	grep '✗' "$TMP/security" | awk '{print $2}' | LC_ALL=C sort >"$TMP/failed"
	LC_ALL=C sort >"$TMP/needed" <<'EOF_NEEDED'
DeviceAllow=
IPAddressDeny=
PrivateNetwork=
PrivateUsers=
RestrictAddressFamilies=~AF_(INET|INET6)
RestrictAddressFamilies=~AF_UNIX
RootDirectory=/RootImage=
SupplementaryGroups=
EOF_NEEDED
	diff "$TMP/needed" "$TMP/failed" >"$TMP/diff" ||
		fail "sandbox checks failed differ from those Relay needs (> newly failing): $(cat "$TMP/diff")"
	(cd "$TMP/verify" && systemd-analyze security --offline=yes --threshold=13 relay.service) >/dev/null 2>&1 ||
		fail "exposure above 1.3: $(grep -E 'Overall' "$TMP/security")"
}

test_man_page_renders_without_warnings() {
	need man groff
	MANWIDTH=80 man --warnings -l "$ROOT/docs/relay.1" >"$TMP/page" 2>"$TMP/err"
	STATUS=$?
	assert_status 0
	[ ! -s "$TMP/err" ] || fail "man --warnings: $(cat "$TMP/err")"
	# --warnings alone enables groff's macro warnings only; all of them
	# also catch unknown escapes, bad numbers and lines that cannot break.
	MANWIDTH=80 man --warnings=all -l "$ROOT/docs/relay.1" >/dev/null 2>"$TMP/err"
	STATUS=$?
	assert_status 0
	[ ! -s "$TMP/err" ] || fail "man --warnings=all: $(cat "$TMP/err")"
	[ "$(wc -l <"$TMP/page")" -ge 300 ] || fail "the page renders to $(wc -l <"$TMP/page") lines"
	local s
	for s in NAME SYNOPSIS DESCRIPTION COMMANDS ENVIRONMENT FILES "EXIT STATUS" SIGNALS EXAMPLES "SEE ALSO"; do
		grep -qx "$s" "$TMP/page" || fail "no $s section"
	done
}

# section NAME: the lines of one section of the page rendered 200 wide (no
# wrapped tags), from its heading to the next.
render_wide() { MANWIDTH=200 man -l "$ROOT/docs/relay.1" 2>/dev/null | col -b >"$TMP/wide"; }
section() { awk -v s="$1" '/^[A-Z]/ { on = ($0 == s); next } on' "$TMP/wide"; }

# Each command of `relay --help` as its own usage line writes it
# ("relay function inspect <name>", placeholders without the brackets):
# COMMANDS has exactly these entries, and SYNOPSIS each of them.
test_man_page_lists_every_command_as_its_usage_says() {
	need man col
	render_wide
	run_expect 0 "$RELAY" --help
	# Entries are indented 2, the summary after two spaces or more (or on
	# the next line, indented more, after a long synopsis); a command's words
	# are the synopsis's leading lowercase words.
	awk '/^Commands:/ { on = 1; next } /^$/ { on = 0 } on && /^  [a-z]/' "$TMP/out" |
		sed 's/^  //; s/   *.*//' |
		awk '{ w = ""; for (i = 1; i <= NF && $i ~ /^[a-z]+$/; i++) w = w (w ? " " : "") $i; print w }' >"$TMP/commands"
	[ "$(wc -l <"$TMP/commands")" -ge 16 ] || fail "too few commands in --help: $(cat "$TMP/commands")"
	local words usage want=()
	while IFS= read -r words; do
		# shellcheck disable=SC2086
		run_expect 0 "$RELAY" $words --help
		usage=$(head -n1 "$TMP/out")
		[[ "$usage" == "usage: relay $words"* ]] || fail "relay $words --help: $usage"
		want+=("$(sed 's/^usage: //; s/[<>]//g' <<<"$usage")")
	done <"$TMP/commands"
	printf '%s\n' "${want[@]}" | LC_ALL=C sort >"$TMP/want"
	# COMMANDS entries: the tag lines (indented 7; bodies are indented 14).
	section COMMANDS | grep -E '^ {7}relay ' | sed 's/^ *//; s/ *$//' | LC_ALL=C sort >"$TMP/have"
	diff "$TMP/want" "$TMP/have" >"$TMP/diff" ||
		fail "COMMANDS entries differ from the usage lines (< --help, > man page): $(cat "$TMP/diff")"
	section SYNOPSIS | sed 's/^ *//; s/ *$//' >"$TMP/synopsis"
	local u
	for u in "${want[@]}"; do
		grep -qxF -- "$u" "$TMP/synopsis" || fail "SYNOPSIS lacks: $u"
	done
}

# The names in config.c's table of variables, and "NAME DEFAULT" for those
# with a default: the DEFAULT_* constant an entry names, as config.h
# defines it (quotes dropped; DEFAULT_LOG_LEVEL's LOG_INFO is INFO, the
# name config.c's messages show).
config_vars() { sed -nE 's/^[[:space:]]*\{"([A-Z][A-Z0-9_]*)", K_.*/\1/p' "$ROOT/src/model/config.c"; }
config_defaults() {
	awk 'FNR == NR { if ($1 == "#define" && $2 ~ /^DEFAULT_/) { v = $3; gsub(/"/, "", v); sub(/^LOG_/, "", v); def[$2] = v }; next }
		/^static const struct var vars\[\] = \{/ { on = 1; next }
		on && /^\};/ { on = 0 }
		on && /^\t\{"[A-Z]/ { match($0, /"[A-Z][A-Z0-9_]*"/); n = substr($0, RSTART + 1, RLENGTH - 2) }
		on && n && match($0, /DEFAULT_[A-Z0-9_]+/) { c = substr($0, RSTART, RLENGTH); if (c in def) print n, def[c]; n = "" }' \
		"$ROOT/src/model/config.h" "$ROOT/src/model/config.c"
}

# Every variable Relay reads (config.c's table and every getenv in src/) is
# an ENVIRONMENT entry, and every entry is one Relay reads; config.c's
# documented defaults are the page's.
test_man_page_documents_every_variable_and_default() {
	need man col
	render_wide
	{
		config_vars
		grep -rhoE 'getenv\("[A-Z][A-Z0-9_]*"\)' "$ROOT/src" | grep -oE '"[A-Z0-9_]+"' | tr -d '"'
	} | LC_ALL=C sort -u >"$TMP/want"
	grep -q '^REDIS_URI$' "$TMP/want" && grep -q '^DOCKER_HOST$' "$TMP/want" ||
		fail "could not read the variables from src/: $(cat "$TMP/want")"
	# Entries: the first word of the lines indented 7 that is a variable name.
	section ENVIRONMENT | grep -E '^ {7}[A-Z][A-Z0-9_]+( |$)' | awk '{print $1}' | LC_ALL=C sort -u >"$TMP/have"
	diff "$TMP/want" "$TMP/have" >"$TMP/diff" ||
		fail "ENVIRONMENT entries differ from what src/ reads (< src, > man page): $(cat "$TMP/diff")"
	# An entry: its tag line and the body lines under it.
	local name def body
	while IFS= read -r name; do
		body=$(section ENVIRONMENT | awk -v n="$name" '/^       [^ ]/ { on = ($1 == n) } on')
		grep -qE 'Default|default' <<<"$body" || fail "$name: no default stated"
	done < <(config_vars)
	# config.c's own defaults: "(default X)" or "; default X)" in the
	# accepted text.
	[ "$(config_defaults | wc -l)" -ge 5 ] || fail "could not read the defaults from src/model/config.c"
	while IFS=' ' read -r name def; do
		body=$(section ENVIRONMENT | awk -v n="$name" '/^       [^ ]/ { on = ($1 == n) } on' | tr -s ' \n' '  ')
		grep -qF "Default: $def" <<<"$body" || fail "$name: config.c says default $def, the page: $body"
	done < <(config_defaults)
}

test_prometheus_rules_check_and_unit_tests_pass() {
	need promtool
	local rules=$ROOT/deploy/prometheus/relay-rules.yml tests=$ROOT/deploy/prometheus/relay-rules.test.yml a n
	n=$(grep -cE '^ *- alert: ' "$rules")
	[ "$n" -ge 6 ] || fail "only $n alerts in $rules"
	run_expect 0 promtool check rules "$rules"
	assert_out_contains "SUCCESS: $n rules found"
	# Every alert has a case where it fires and one where it does not.
	for a in $(grep -oE '^ *- alert: [A-Za-z]+' "$rules" | awk '{print $3}'); do
		awk -v a="$a" '$1 == "alertname:" { on = ($2 == a); next }
			on && /exp_labels:/ { found = 1 } END { exit !found }' "$tests" ||
			fail "alert $a never fires in relay-rules.test.yml"
		awk -v a="$a" '$1 == "alertname:" { on = ($2 == a); next }
			on && /exp_alerts: \[\]/ { found = 1 } END { exit !found }' "$tests" ||
			fail "alert $a has no case where it must not fire in relay-rules.test.yml"
	done
	run_expect 0 promtool test rules "$tests"
	assert_out_contains "SUCCESS"
}
