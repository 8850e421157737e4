# The layers of src/ (src/README.md): scripts/check-layers passes on this
# tree, and fails, naming the file, the line and the header, on a copy
# broken on purpose: an include from a later layer, a Relay header named
# without its folder, a source file outside the layers' folders, a folder
# without its README. Text checks only: no binary, Redis or Docker.

# layers_tree: a copy of src/ in $TMP/tree, to break.
layers_tree() {
	rm -rf "$TMP/tree"
	mkdir -p "$TMP/tree"
	cp -r "$ROOT/src" "$TMP/tree/"
}

test_every_include_goes_up_the_layers() {
	run_expect 0 "$ROOT/scripts/check-layers" "$ROOT"
	[ ! -s "$TMP/out" ] || fail "violations on this tree: $(cat "$TMP/out")"
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
