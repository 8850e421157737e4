# The layers of src/ (src/README.md) and the names of its functions
# (docs/conventions.md, "Names"): scripts/check-layers and
# scripts/check-names pass on this tree, and fail, naming the file and the
# line, on a copy broken on purpose: an include from a later layer, a
# Relay header named without its folder, a source file outside the
# layers' folders, a folder without its README, a declared function
# without its module's prefix. Text checks only: no binary, Redis or
# Docker.

# layers_tree: a copy of src/ in $TMP/tree, to break.
layers_tree() {
	rm -rf "$TMP/tree"
	mkdir -p "$TMP/tree"
	cp -r "$ROOT/src" "$TMP/tree/"
}

# clean_here SCRIPT: scripts/SCRIPT passes on this tree, saying nothing.
clean_here() {
	run_expect 0 "$ROOT/scripts/$1" "$ROOT"
	[ ! -s "$TMP/out" ] || fail "violations on this tree: $(cat "$TMP/out")"
}

test_every_include_goes_up_the_layers() {
	clean_here check-layers
}

test_layer_check_catches_a_downward_include() {
	layers_tree
	# io/ reaching up into engine/, at a known line.
	printf '#include "engine/metrics.h"\n' >>"$TMP/tree/src/io/redis.c"
	local line
	line=$(wc -l <"$TMP/tree/src/io/redis.c")
	run_expect 1 "$ROOT/scripts/check-layers" "$TMP/tree"
	assert_out_contains "src/io/redis.c:$line: includes \"engine/metrics.h\": io/ may include only from its own folder and earlier layers, and engine/ comes after it"
	[ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "more than the one violation: $(cat "$TMP/out")"
	# The same folder and an earlier layer are fine.
	layers_tree
	printf '#include "engine/runner.h"\n#include "model/template.h"\n' >>"$TMP/tree/src/engine/warm.c"
	run_expect 0 "$ROOT/scripts/check-layers" "$TMP/tree"
}

test_layer_check_catches_a_header_without_its_folder() {
	layers_tree
	printf '#include "util.h"\n' >>"$TMP/tree/src/model/cron.c"
	run_expect 1 "$ROOT/scripts/check-layers" "$TMP/tree"
	assert_out_contains 'src/model/cron.c:'
	assert_out_contains 'includes "util.h" without its folder (write "FOLDER/util.h")'
	layers_tree
	printf '#include "engine/nosuch.h"\n' >>"$TMP/tree/src/cmd/cmd.c"
	run_expect 1 "$ROOT/scripts/check-layers" "$TMP/tree"
	assert_out_contains 'includes "engine/nosuch.h", which is not a header of src/'
}

test_layer_check_catches_a_file_or_folder_outside_the_layers() {
	layers_tree
	mkdir "$TMP/tree/src/misc"
	printf 'int x;\n' >"$TMP/tree/src/misc/x.c"
	rm "$TMP/tree/src/git/README.md"
	run_expect 1 "$ROOT/scripts/check-layers" "$TMP/tree"
	assert_out_contains 'src/misc/x.c: not in a layer'"'"'s folder (base io model engine git cmd) nor at the top'
	assert_out_contains 'src/git/ has no README.md'
}

test_every_declared_function_has_its_modules_prefix() {
	clean_here check-names
}

test_name_check_catches_a_function_without_its_prefix() {
	layers_tree
	# A declaration named for another module, at a known line; a cmd_ name
	# in src/cmd/ (allowed there) and the same in src/model/ (not).
	printf 'int frob_connect(const char *uri);\n' >>"$TMP/tree/src/io/redis.h"
	local line
	line=$(wc -l <"$TMP/tree/src/io/redis.h")
	printf 'int cmd_frob(void);\n' >>"$TMP/tree/src/cmd/render.h"
	printf 'int cmd_frob(void);\n' >>"$TMP/tree/src/model/cron.h"
	run_expect 1 "$ROOT/scripts/check-names" "$TMP/tree"
	assert_out_contains "src/io/redis.h:$line: frob_connect() does not start with the module's prefix \"redis\""
	assert_out_contains "src/model/cron.h:"
	assert_out_contains 'cmd_frob() does not start with the module'"'"'s prefix "cron"'
	[ "$(wc -l <"$TMP/out")" -eq 2 ] || fail "want the two violations: $(cat "$TMP/out")"
	# An internal header shares its module's prefix; a comment or a
	# typedef is no declaration.
	layers_tree
	printf '/* frob_x(void) in a comment */\ntypedef int (*frob_fn)(void);\nint runner_frob(void);\n' \
		>>"$TMP/tree/src/engine/runner_internal.h"
	run_expect 0 "$ROOT/scripts/check-names" "$TMP/tree"
}
