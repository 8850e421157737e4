# The user documentation in docs/ keeps up with the code: every environment
# variable src/ reads is in docs/configuration.md, every pattern operator of
# src/model/pattern.c's table is in docs/template.md, and every relative link in
# README.md and docs/*.md reaches an existing file (and heading, for a
# #anchor into Markdown). Text checks only: no binary, Redis or Docker.
# Each check takes the tree it reads, so the test_*_catches_* cases run it
# on a copy broken on purpose and prove that it fails, naming what is
# wrong.
# shellcheck disable=SC2016 # the backquotes here are Markdown's, not commands

# docs_env_vars TREE: the environment variables src/ reads, one per line.
# A literal getenv("NAME") anywhere, plus the names of config.c's table,
# which it reads through getenv(v->name). Any other getenv call with a
# computed name is reported (status 1): this check could not tell which
# variable it reads.
docs_env_vars() {
	local tree=$1 other
	other=$(grep -rnE --include='*.[ch]' '(^|[^A-Za-z0-9_]|secure_)getenv[[:space:]]*\(' "$tree/src" |
		grep -vE 'getenv[[:space:]]*\("[A-Za-z_][A-Za-z0-9_]*"\)' |
		grep -vE '^[^:]*/src/model/config\.c:[0-9]+:.*getenv\(v->name\)')
	if [ -n "$other" ]; then
		echo "getenv with a name this check cannot read (name the variable literally, or add it to config.c's table):"
		echo "${other//"$tree"\//}"
		return 1
	fi
	{
		grep -rhoE --include='*.[ch]' 'getenv[[:space:]]*\("[A-Za-z_][A-Za-z0-9_]*"\)' "$tree/src" |
			sed -E 's/.*"([^"]*)".*/\1/'
		awk '/^static const struct var vars\[\] = \{/ { on = 1; next }
		     on && /^\};/ { on = 0 }
		     on' "$tree/src/model/config.c" |
			grep -oE '^[[:space:]]*\{"[A-Za-z_][A-Za-z0-9_]*"' | grep -oE '[A-Za-z_][A-Za-z0-9_]*'
	} | sort -u
}

# check_env_documented TREE: each variable appears as `NAME` in
# docs/configuration.md.
check_env_documented() {
	local tree=$1 vars v bad=0
	vars=$(docs_env_vars "$tree") || { echo "$vars"; return 1; }
	grep -qx REDIS_URI <<<"$vars" || { echo "config.c's table was not found"; return 1; }
	for v in $vars; do
		if ! grep -qF -- "\`$v\`" "$tree/docs/configuration.md"; then
			echo "docs/configuration.md does not document \`$v\` (read in src/)"
			bad=1
		fi
	done
	return $bad
}

# docs_operators TREE: the entries of `operators[] = {...};` in pattern.c.
docs_operators() {
	awk '/operators\[\] = \{/ { on = 1 }
	     on { print }
	     on && /\};/ { on = 0 }' "$1/src/model/pattern.c" | grep -oE '"[^"]+"' | tr -d '"'
}

# check_operators_documented TREE: each operator appears as `op` in
# docs/template.md.
check_operators_documented() {
	local tree=$1 ops op bad=0
	ops=$(docs_operators "$tree")
	[ -n "$ops" ] || { echo "no operators[] table found in src/model/pattern.c"; return 1; }
	for op in $ops; do
		if ! grep -qF -- "\`$op\`" "$tree/docs/template.md"; then
			echo "docs/template.md does not document the pattern operator \`$op\`"
			bad=1
		fi
	done
	return $bad
}

# md_links FILE: the link targets of a Markdown file, one per line: inline
# [text](target "title") and reference definitions [x]: target, outside
# fenced code blocks and code spans.
md_links() {
	awk '/^[[:space:]]*```/ { fence = !fence; next }
	     fence { next }
	     {
		line = $0
		gsub(/`[^`]*`/, "", line)
		if (match(line, /^[[:space:]]*\[[^]]+\]:[[:space:]]*[^[:space:]]+/)) {
			def = substr(line, RSTART, RLENGTH)
			sub(/^[[:space:]]*\[[^]]+\]:[[:space:]]*/, "", def)
			print def
		}
		while (match(line, /\]\([^) \t]+/)) {
			print substr(line, RSTART + 2, RLENGTH - 2)
			line = substr(line, RSTART + RLENGTH)
		}
	     }' "$1"
}

# md_anchors FILE: the anchors GitHub makes of the file's ATX headings
# (lower case, punctuation dropped, spaces as '-', repeats numbered).
md_anchors() {
	awk '/^[[:space:]]*```/ { fence = !fence; next }
	     fence { next }
	     /^#+[ \t]/ {
		h = $0
		sub(/^#+[ \t]+/, "", h)
		sub(/[ \t]+#+[ \t]*$/, "", h)
		sub(/[ \t]+$/, "", h)
		s = tolower(h)
		gsub(/[^a-z0-9 _-]/, "", s)
		gsub(/ /, "-", s)
		if (s in seen) { n = seen[s]++; print s "-" n } else { seen[s] = 1; print s }
	     }' "$1"
}

# check_links TREE: every relative link of README.md and docs/*.md names an
# existing file, and a #anchor into a Markdown file (or the file itself)
# names a heading.
check_links() {
	local tree=$1 md target path anchor dest bad=0 n=0
	for md in "$tree"/README.md "$tree"/docs/*.md; do
		while IFS= read -r target; do
			case $target in
			[A-Za-z]*:*) continue ;; # https:, mailto:, ...
			esac
			n=$((n + 1))
			path=${target%%#*}
			anchor=
			[ "$path" != "$target" ] && anchor=${target#*#}
			if [ -z "$path" ]; then
				dest=$md
			else
				dest=$(dirname "$md")/$path
			fi
			if [ ! -e "$dest" ]; then
				echo "${md#"$tree"/}: broken link $target (no such file)"
				bad=1
			elif [ -n "$anchor" ] && [ "${dest%.md}" != "$dest" ] &&
				! md_anchors "$dest" | grep -qxF -- "$anchor"; then
				echo "${md#"$tree"/}: broken link $target (no such heading)"
				bad=1
			fi
		done < <(md_links "$md")
	done
	[ "$n" -gt 0 ] || { echo "no relative links found in README.md and docs/*.md"; return 1; }
	return $bad
}

# docs_tree: a copy of what the checks read, in $TMP/tree, to break.
docs_tree() {
	mkdir -p "$TMP/tree"
	cp -r "$ROOT/src" "$ROOT/docs" "$ROOT/deploy" "$ROOT/README.md" "$TMP/tree/"
}

test_every_variable_src_reads_is_documented() {
	run check_env_documented "$ROOT"
	assert_status 0
	# The extraction sees both kinds of reads.
	run docs_env_vars "$ROOT"
	assert_status 0
	assert_out_contains "MAX_BUFFERED_EVENTS" # config.c's table
	assert_out_contains "DOCKER_HOST"         # a literal getenv
}

test_every_pattern_operator_is_documented() {
	run check_operators_documented "$ROOT"
	assert_status 0
	run docs_operators "$ROOT"
	[ "$(wc -l <"$TMP/out")" -ge 8 ] || fail "operators found: $(cat "$TMP/out")"
}

test_relative_links_in_docs_resolve() {
	run check_links "$ROOT"
	assert_status 0
}

test_env_check_catches_an_undocumented_variable() {
	docs_tree
	# A new literal getenv in any file.
	sed -i 's/getenv("DOCKER_API_VERSION")/getenv("RELAY_NEW_KNOB")/' "$TMP/tree/src/io/docker.c"
	run check_env_documented "$TMP/tree"
	assert_status 1
	assert_out_contains 'does not document `RELAY_NEW_KNOB`'
	# A new entry in config.c's table.
	docs_tree
	sed -i 's/^\t{"REDIS_GROUP", K_STRING,/\t{"RELAY_OTHER_KNOB", K_STRING, 0, "x", OFF(redis_group), 0, NULL},\n&/' \
		"$TMP/tree/src/model/config.c"
	grep -q RELAY_OTHER_KNOB "$TMP/tree/src/model/config.c" || fail "the table edit did not apply"
	run check_env_documented "$TMP/tree"
	assert_status 1
	assert_out_contains 'does not document `RELAY_OTHER_KNOB`'
	# A variable whose documentation was dropped.
	docs_tree
	sed -i 's/`METRICS_ADDR`/METRICS_ADDR/g' "$TMP/tree/docs/configuration.md"
	run check_env_documented "$TMP/tree"
	assert_status 1
	assert_out_contains 'does not document `METRICS_ADDR`'
	# A computed name it cannot read.
	docs_tree
	printf 'const char *f(const char *n) { return getenv(n); }\n' >>"$TMP/tree/src/base/util.c"
	run check_env_documented "$TMP/tree"
	assert_status 1
	assert_out_contains "src/base/util.c"
}

test_operator_check_catches_an_undocumented_operator() {
	docs_tree
	sed -i 's/"gt",/"between", "gt",/' "$TMP/tree/src/model/pattern.c"
	grep -q '"between"' "$TMP/tree/src/model/pattern.c" || fail "the table edit did not apply"
	run check_operators_documented "$TMP/tree"
	assert_status 1
	assert_out_contains 'does not document the pattern operator `between`'
	docs_tree
	sed -i 's/`suffix`/suffix/g' "$TMP/tree/docs/template.md"
	run check_operators_documented "$TMP/tree"
	assert_status 1
	assert_out_contains 'operator `suffix`'
}

test_link_check_catches_broken_links() {
	docs_tree
	printf '\nSee [the guide](guide.md) and [limits](limits.md#limitz).\n' >>"$TMP/tree/docs/operations.md"
	printf '\nRead [the map](docs/nowhere.md) and [try it](#try-itt).\n' >>"$TMP/tree/README.md"
	printf '\n[ref]: missing/file.txt\nBack to [top](#no-such-heading).\n' >>"$TMP/tree/docs/template.md"
	run check_links "$TMP/tree"
	assert_status 1
	assert_out_contains "docs/operations.md: broken link guide.md (no such file)"
	assert_out_contains "docs/operations.md: broken link limits.md#limitz (no such heading)"
	assert_out_contains "README.md: broken link docs/nowhere.md (no such file)"
	assert_out_contains "README.md: broken link #try-itt (no such heading)"
	assert_out_contains "docs/template.md: broken link missing/file.txt (no such file)"
	assert_out_contains "docs/template.md: broken link #no-such-heading (no such heading)"
	# What a code span or block shows is not a link.
	docs_tree
	printf '\n`[x](nowhere.md)`\n\n```\n[y](nowhere.md)\n```\n' >>"$TMP/tree/docs/template.md"
	run check_links "$TMP/tree"
	assert_status 0
}
