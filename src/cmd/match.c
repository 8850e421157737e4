#include "cmd/match.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "io/event.h"
#include "model/function.h"
#include "model/pattern.h"
#include "base/util.h"

int cmd_match_event(const char *words, const char *dir, const struct event *ev, int64_t now,
		    struct cmd_match **out, size_t *nout, char **err)
{
	*out = NULL;
	*nout = 0;
	struct function_scan scan;
	if (function_scan_dir(dir, &scan, err) < 0)
		return -1;
	size_t total = 0;
	for (size_t i = 0; i < scan.n; i++) {
		struct function_entry *e = &scan.v[i];
		if (e->status == FUNCTION_INVALID)
			cmd_print_line(stderr, "relay %s: skipping invalid function %s: %s", words,
				       e->name, e->errors.n ? e->errors.v[0] : "invalid");
		if (e->fn)
			total += e->fn->tpl->nrules;
	}
	const struct pattern **pats = xcalloc(total + 1, sizeof *pats);
	const struct function **owner = xcalloc(total + 1, sizeof *owner);
	const struct rule **rules = xcalloc(total + 1, sizeof *rules);
	size_t k = 0;
	for (size_t i = 0; i < scan.n; i++) {
		const struct function *f = scan.v[i].fn;
		for (size_t r = 0; f && r < f->tpl->nrules; r++, k++) {
			pats[k] = f->tpl->rules[r].pattern;
			owner[k] = f;
			rules[k] = &f->tpl->rules[r];
		}
	}
	struct pattern_set *set = pattern_set_new(pats, total);
	uint32_t *ids = xcalloc(total + 1, sizeof *ids);
	size_t n = pattern_set_match(set, ev, now, ids);
	*out = xcalloc(n + 1, sizeof **out);
	for (size_t i = 0; i < n; i++) {
		(*out)[i].function = xstrdup(owner[ids[i]]->name);
		(*out)[i].handler = xstrdup(rules[ids[i]]->handler);
	}
	*nout = n;
	free(ids);
	pattern_set_free(set);
	free(pats);
	free(owner);
	free(rules);
	function_scan_free(&scan);
	return 0;
}

void cmd_match_free(struct cmd_match *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++) {
		free(m[i].function);
		free(m[i].handler);
	}
	free(m);
}

/* Reads the EVENT argument: JSON text, @file, or - for stdin. A file must
 * be a regular one: opened with O_NONBLOCK (opening a FIFO with no writer
 * would otherwise wait for one, and reading it wait for its data forever)
 * and checked with fstat on that descriptor, so nothing can swap the path
 * between the check and the read. O_NONBLOCK changes nothing for the read
 * of a regular file. */
int cmd_read_event(const char *arg, char **text, size_t *len, char **why)
{
	if (strcmp(arg, "-") != 0 && arg[0] != '@') {
		*text = xstrdup(arg);
		*len = strlen(arg);
		return 0;
	}
	bool std_in = strcmp(arg, "-") == 0;
	int fd = std_in ? 0 : open(arg + 1, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		*why = xasprintf("cannot open %s: %s", arg + 1, strerror(errno));
		return -1;
	}
	struct stat st;
	if (!std_in && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		*why = xasprintf("cannot read %s: not a regular file", arg + 1);
		close(fd);
		return -1;
	}
	int rc = read_fd_bounded(fd, EVENT_MAX_BYTES, 0, text, len);
	if (rc < 0)
		*why = errno == EFBIG ? xasprintf("event larger than %d bytes", EVENT_MAX_BYTES)
				      : xasprintf("read error on %s", std_in ? "stdin" : arg + 1);
	if (!std_in)
		close(fd);
	return rc < 0 ? -1 : 0;
}
