# The leak suppression files hide the libraries' own leaks and nothing of
# Relay's. tests/fuzz/lsan.supp (every fuzz target), tests/it/libgit2.supp
# (LeakSanitizer in git.sh) and tests/it/libgit2.valgrind.supp (valgrind in
# git.sh) are each checked both ways with small programs that use libfyaml
# and libgit2 the way Relay does: every entry is still needed (take it out
# and the library's known leak is reported), and a leak of the caller's own
# in the same code paths is reported with the file in use. One limit stays,
# written down in libgit2.supp: LeakSanitizer cannot see below
# git_remote_connect_ext (Debian's libgit2 names none of its own frames
# there), so a leak in Relay's credential or certificate callback, or of an
# object the connection points to, is valgrind's to find.

# A C program built from stdin: cc_prog NAME [cc flags...] -> $TMP/bin/NAME.
cc_prog() {
	local name=$1
	shift
	mkdir -p "$TMP/bin"
	cat >"$TMP/bin/$name.c"
	cc -std=c11 -D_GNU_SOURCE -g -Wall -Wextra -Werror -o "$TMP/bin/$name" "$TMP/bin/$name.c" "$@" ||
		fail "cannot build $name"
}

# without FILE LINE: FILE's copy in $TMP without the line LINE.
without() {
	local out
	out=$TMP/without-$RANDOM.supp
	grep -vxF -- "$2" "$1" >"$out"
	echo "$out"
}

# The entries of a LeakSanitizer suppression file.
lsan_entries() { grep -E '^leak:' "$1"; }

# ---- libfyaml and tests/fuzz/lsan.supp ---------------------------------

# Parses a YAML file as template.c does (a quiet parser with its own
# diagnostics, the root scalar's text read), with the unwinding fuzz_template
# asks for. "forget" never destroys the document: Relay's kind of leak.
fyaml_prog() {
	cc_prog fyaml -fsanitize=address -fno-omit-frame-pointer $(pkg-config --cflags --libs libfyaml) <<'EOF'
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "fast_unwind_on_malloc=0:malloc_context_size=8";
}

static void quiet(struct fy_diag *d, void *user, const char *buf, size_t len)
{
	(void)d, (void)user, (void)buf, (void)len;
}

int main(int argc, char **argv)
{
	static char text[1 << 20];
	FILE *f = argc == 3 ? fopen(argv[2], "rb") : NULL;
	if (!f)
		return 2;
	size_t n = fread(text, 1, sizeof text, f);
	fclose(f);
	struct fy_diag_cfg dcfg;
	fy_diag_cfg_default(&dcfg);
	dcfg.fp = NULL;
	dcfg.output_fn = quiet;
	dcfg.colorize = false;
	struct fy_diag *diag = fy_diag_create(&dcfg);
	struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_DISABLE_RECYCLING, .diag = diag};
	struct fy_document *doc = fy_document_build_from_string(&pcfg, text, n);
	if (!doc)
		return 3;
	struct fy_node *root = fy_document_root(doc);
	size_t len = 0;
	if (root && fy_node_is_scalar(root))
		fy_node_get_scalar(root, &len);
	printf("parsed, root scalar of %zu bytes\n", len);
	if (strcmp(argv[1], "forget") != 0)
		fy_document_destroy(doc);
	fy_diag_destroy(diag);
	return 0;
}
EOF
}

# fuzz_env SUPP CMD...: the sanitizer environment tests/run gives a fuzz
# target, with SUPP as its suppression file.
fuzz_env() {
	local supp=$1
	shift
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:use_sigaltstack=0 \
		LSAN_OPTIONS=suppressions=$supp:print_suppressions=0 "$@"
}

test_no_suppression_names_a_whole_library() {
	local f bad
	for f in "$ROOT/tests/fuzz/lsan.supp" "$ROOT/tests/it/libgit2.supp"; do
		bad=$(lsan_entries "$f" | grep -E '\.so|^leak:\*?$|^leak:lib[a-z0-9]*$' || true)
		[ -z "$bad" ] || fail "$(basename "$f") suppresses a whole library: $bad"
	done
	# valgrind entries end at a named frame, never at "..." (any frames).
	! grep -qE '^ *\.\.\. *$' "$ROOT/tests/it/libgit2.valgrind.supp" ||
		fail "libgit2.valgrind.supp lets '...' match any frames, Relay's callbacks included"
}

test_fuzz_supp_still_reports_a_forgotten_yaml_document() {
	fyaml_prog
	printf 'runtime: python3.14\nevents:\n  - handler: a.b\n    pattern: {}\n' >"$TMP/t.yaml"
	fuzz_env "$ROOT/tests/fuzz/lsan.supp" "$TMP/bin/fyaml" destroy "$TMP/t.yaml" >"$TMP/ok.txt" 2>&1 ||
		fail "a clean parse is not clean: $(cat "$TMP/ok.txt")"
	fuzz_env "$ROOT/tests/fuzz/lsan.supp" "$TMP/bin/fyaml" forget "$TMP/t.yaml" >"$TMP/leak.txt" 2>&1 &&
		fail "a document never destroyed passed LeakSanitizer with lsan.supp"
	grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$TMP/leak.txt" ||
		fail "no leak report for a document never destroyed: $(head -c 2000 "$TMP/leak.txt")"
	grep -q 'libfyaml.so' "$TMP/leak.txt" || fail "the report does not show libfyaml's frames"
}

test_fuzz_supp_entries_are_each_still_needed() {
	fyaml_prog
	local seed=$ROOT/tests/fuzz/corpus/template/regress-libfyaml-leak entry n=0
	[ -f "$seed" ] || fail "missing $seed"
	fuzz_env "$ROOT/tests/fuzz/lsan.supp" "$TMP/bin/fyaml" destroy "$seed" >"$TMP/ok.txt" 2>&1 ||
		fail "libfyaml's known leak is not suppressed: $(head -c 3000 "$TMP/ok.txt")"
	while read -r entry; do
		n=$((n + 1))
		fuzz_env "$(without "$ROOT/tests/fuzz/lsan.supp" "$entry")" "$TMP/bin/fyaml" destroy "$seed" \
			>"$TMP/leak.txt" 2>&1 && fail "$entry is dead: nothing leaks without it"
		grep -q 'ERROR: LeakSanitizer' "$TMP/leak.txt" || fail "no leak report without $entry"
		grep -qF -- "${entry#leak:}" "$TMP/leak.txt" ||
			fail "the leak without $entry does not pass through ${entry#leak:}"
	done < <(lsan_entries "$ROOT/tests/fuzz/lsan.supp")
	[ "$n" -ge 1 ] || fail "lsan.supp has no entries to check"
}

# ---- libgit2 and tests/it/libgit2{,.valgrind}.supp --------------------

# Fetches URL with key KEY into a new bare repository through libgit2, as
# Relay's git sync does (git_remote_fetch with credentials, certificate-check
# and update-tips callbacks), then frees everything. MODE "callback" leaks an
# allocation made in the certificate-check callback (below
# git_remote_connect_ext, like Relay's credential and certificate callbacks);
# "tips" leaks one made in the update-tips callback (after the download);
# "remote" never frees the remote.
git_prog() { # NAME cc-flags...
	local name=$1
	shift
	cc_prog "$name" "$@" $(pkg-config --cflags --libs libgit2) <<'EOF'
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "fast_unwind_on_malloc=0"; /* as git.sh runs relay */
}

static const char *mode, *key;
static int tips_calls;
void *volatile sink;

static void leak(const char *why, const char *what)
{
	char *note = malloc(77);
	snprintf(note, 77, "%s %s", why, what);
	sink = note;
	sink = NULL; /* the last reference is gone */
}

static int credentials(git_credential **out, const char *url, const char *user, unsigned int types,
		       void *payload)
{
	(void)url, (void)types, (void)payload;
	return git_credential_ssh_key_new(out, user ? user : "root", NULL, key, NULL);
}

static int certificate_check(git_cert *cert, int valid, const char *host, void *payload)
{
	(void)cert, (void)valid, (void)payload;
	if (strcmp(mode, "callback") == 0)
		leak("trusted", host);
	return 0;
}

static int update_tips(const char *ref, const git_oid *a, const git_oid *b, void *payload)
{
	(void)a, (void)b, (void)payload;
	if (strcmp(mode, "tips") == 0 && tips_calls == 0)
		leak("updated", ref);
	tips_calls++;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	mode = argv[1];
	key = argv[3];
	git_libgit2_init();
	git_repository *repo = NULL;
	git_remote *remote = NULL;
	git_fetch_options fo;
	git_fetch_options_init(&fo, GIT_FETCH_OPTIONS_VERSION);
	fo.callbacks.credentials = credentials;
	fo.callbacks.certificate_check = certificate_check;
	fo.callbacks.update_tips = update_tips;
	/* As Relay makes its remote: libgit2 1.5.1's insteadOf scan leaks
	 * (see make_remote in src/git/gitsync_fetch.c). */
	git_remote_create_options ro;
	git_remote_create_options_init(&ro, GIT_REMOTE_CREATE_OPTIONS_VERSION);
	ro.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF | GIT_REMOTE_CREATE_SKIP_DEFAULT_FETCHSPEC;
	char *spec = "+refs/heads/*:refs/remotes/origin/*";
	git_strarray specs = {&spec, 1};
	int rc = 1;
	if (git_repository_init(&repo, argv[4], 1) == 0 && (ro.repository = repo) &&
	    git_remote_create_with_opts(&remote, argv[2], &ro) == 0 &&
	    git_remote_fetch(remote, &specs, &fo, NULL) == 0)
		rc = 0;
	const git_error *e = git_error_last();
	printf("%s\n", rc ? (e ? e->message : "failed") : tips_calls ? "fetched" : "no refs updated");
	if (strcmp(mode, "remote") != 0)
		git_remote_free(remote);
	git_repository_free(repo);
	git_libgit2_shutdown();
	return rc;
}
EOF
}

# An SSH server with a repository, Relay's deploy key authorized ($KEY) and
# another key it does not know ($BAD_KEY); git.sh's helpers.
git_server() {
	source "$ROOT/tests/it/git.sh"
	mkdir -p "$TMP/sshd"
	start_sshd hostkey
	keygen_and_authorize
	make_repo
	KEY=$RELAY_DATA_DIR/ssh/id_ed25519
	BAD_KEY=$TMP/unknown_key
	ssh-keygen -q -t ed25519 -N '' -C '' -f "$BAD_KEY"
	export HOME=$TMP
}

# lsan_git SUPP MODE KEY OUT: the ASan program under git.sh's sanitizer
# options with SUPP; status of the program.
lsan_git() {
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:use_sigaltstack=0 \
		LSAN_OPTIONS=suppressions=$1:print_suppressions=0 "$TMP/bin/git_asan" "$2" "$URL" "$3" \
		"$(mktemp -d "$TMP/clone.XXXXXX")" >"$4" 2>&1
}

# LeakSanitizer cannot tell libgit2's unnamed frames from Relay's callbacks
# (see libgit2.supp): it still reports a callback's leak outside the
# connection; the connection itself is valgrind's (the test below).
test_libgit2_supp_is_needed_and_still_reports_an_update_tips_leak() {
	git_server
	git_prog git_asan -fsanitize=address -fno-omit-frame-pointer
	local supp=$ROOT/tests/it/libgit2.supp entry n=0
	lsan_git "$supp" clean "$KEY" "$TMP/ok.txt" || fail "a clean connection is not clean: $(head -c 3000 "$TMP/ok.txt")"
	grep -qx 'fetched' "$TMP/ok.txt" || fail "did not fetch: $(cat "$TMP/ok.txt")"
	lsan_git "$supp" clean "$BAD_KEY" "$TMP/ok.txt"
	grep -q 'ERROR: LeakSanitizer' "$TMP/ok.txt" && fail "a rejected key leaks: $(head -c 3000 "$TMP/ok.txt")"
	grep -qx 'fetched' "$TMP/ok.txt" && fail "an unknown key was accepted"
	while read -r entry; do
		n=$((n + 1))
		lsan_git "$(without "$supp" "$entry")" clean "$KEY" "$TMP/leak.txt" &&
			fail "$entry is dead: nothing leaks without it"
		grep -qF -- "${entry#leak:}" "$TMP/leak.txt" ||
			fail "the leak without $entry does not pass through ${entry#leak:}"
	done < <(lsan_entries "$supp")
	[ "$n" -ge 1 ] || fail "libgit2.supp has no entries to check"
	lsan_git "$supp" tips "$KEY" "$TMP/leak.txt" &&
		fail "a leak in the update-tips callback passed LeakSanitizer"
	grep -A3 'Direct leak of 77 byte' "$TMP/leak.txt" | grep -q 'update_tips' ||
		fail "the report does not name the callback: $(head -c 3000 "$TMP/leak.txt")"
}

# valgrind_git SUPP MODE KEY OUT: the plain program under valgrind as git.sh
# runs relay, with SUPP; status 99 when valgrind reports an error.
valgrind_git() {
	valgrind --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=99 \
		--suppressions="$1" "$TMP/bin/git_plain" "$2" "$URL" "$3" "$(mktemp -d "$TMP/clone.XXXXXX")" \
		>"$4" 2>&1
}

# Under valgrind the suppressions name whole frame sequences, so a leak in
# Relay's kind of certificate callback, or a remote Relay forgets to free,
# is reported while libgit2's own leaks are not.
test_libgit2_valgrind_supp_reports_a_callback_leak_and_a_forgotten_remote() {
	git_server
	git_prog git_plain -O1
	local supp=$ROOT/tests/it/libgit2.valgrind.supp name n=0 st st2
	valgrind_git "$supp" clean "$KEY" "$TMP/ok.txt" ||
		fail "valgrind finds errors in a clean connection: $(grep -A12 'lost in' "$TMP/ok.txt" | head -60)"
	grep -qx 'fetched' "$TMP/ok.txt" || fail "did not fetch: $(tail -n 20 "$TMP/ok.txt")"
	valgrind_git "$supp" clean "$BAD_KEY" "$TMP/bad.txt"
	[ $? -ne 99 ] || fail "valgrind finds errors after a rejected key: $(grep -A12 'lost in' "$TMP/bad.txt" | head -60)"

	valgrind_git "$supp" callback "$KEY" "$TMP/cb.txt"
	st=$?
	[ "$st" -eq 99 ] || fail "a leak in the certificate callback passed valgrind (status $st)"
	grep -A3 'definitely lost in' "$TMP/cb.txt" | grep -q 'certificate_check' ||
		fail "the report does not name the callback: $(grep -A8 'lost in' "$TMP/cb.txt" | head -40)"
	valgrind_git "$supp" remote "$KEY" "$TMP/remote.txt"
	st=$?
	[ "$st" -eq 99 ] || fail "a remote never freed passed valgrind (status $st)"
	grep -A8 'definitely lost in' "$TMP/remote.txt" | grep -q 'git_remote_create' ||
		fail "the report does not show the remote: $(grep -A8 'lost in' "$TMP/remote.txt" | head -40)"

	# Each entry is needed: without it, the connection (or the rejected
	# key) it is for is reported.
	while read -r name; do
		n=$((n + 1))
		awk -v n="$name" '/^\{/ {buf = $0; next} buf != "" {buf = buf "\n" $0; if ($0 ~ /^\}/) {if (buf !~ "\n *" n "\n") print buf; buf = ""}; next} {print}' \
			"$supp" >"$TMP/less.supp"
		! grep -q "$name" "$TMP/less.supp" || fail "could not take $name out"
		valgrind_git "$TMP/less.supp" clean "$KEY" "$TMP/v1.txt"
		st=$?
		valgrind_git "$TMP/less.supp" clean "$BAD_KEY" "$TMP/v2.txt"
		st2=$?
		[ "$st" -eq 99 ] || [ "$st2" -eq 99 ] || fail "valgrind entry $name is dead: nothing reported without it"
	done < <(awk '/^\{/ {getline; gsub(/^ +| +$/, ""); print}' "$supp")
	[ "$n" -ge 1 ] || fail "libgit2.valgrind.supp has no entries to check"
}
