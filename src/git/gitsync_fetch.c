/*
 * Git sync's fetch (see gitsync.h): libgit2, initialized once per process
 * with its global, XDG and system configuration search paths emptied, so
 * an operator's ~/.gitconfig (insteadOf, sshCommand, ...) cannot change
 * what a sync does; the network bounds (a stream of Relay's own and the
 * watchdog that cuts a stalled, overlong or cancelled fetch); the fetch
 * over SSH into git/checkout; and the resolution of the configured ref
 * among what was fetched.
 *
 * The credentials callback hands out the deploy key file only (never
 * ssh-agent, never a password) and gives up after AUTH_ATTEMPTS offers,
 * since libgit2 would otherwise ask again forever; the certificate
 * callback takes the raw host key blob and makes the TOFU decision with
 * sshkey_known_hosts_verify (libgit2's own `valid`, from $HOME/.ssh/known_hosts,
 * is ignored). A callback's message is kept in struct remote_ctx and
 * preferred over libgit2's vaguer one ("user rejected certificate").
 */
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <git2/sys/stream.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/duration.h"
#include "git/gitsync.h"
#include "git/gitsync_internal.h"
#include "git/sshkey.h"
#include "base/util.h"

#define AUTH_ATTEMPTS 2

/* gitsync_cancel_all: Relay is shutting down (see "network bounds"). */
atomic_bool gitsync_cancelled;

/* ---- network bounds ---- */

/*
 * libgit2 1.5 has no network timeouts (GIT_OPT_SET_SERVER_TIMEOUT and
 * GIT_OPT_SET_SERVER_CONNECT_TIMEOUT came with 1.7), and its SSH transport
 * hands the socket to libssh2, whose blocking calls wait in poll() without
 * end: a server that accepted the connection and then said nothing held a
 * sync - the sync lock, the webhook's sync thread, relay start's shutdown -
 * forever. Progress callbacks cannot help: nothing calls them while nothing
 * arrives.
 *
 * So Relay supplies the socket: a stream registered as libgit2's standard
 * stream (git_stream_register), which the SSH transport creates for each
 * connection. Its connect is bounded (connect_ms). While a fetch runs, a
 * watchdog thread reads the socket's received-byte count (TCP_INFO) every
 * tick; when stall_ms pass without a new byte, or on gitsync_cancel_all, it
 * shuts the socket down. libssh2 then sees the end of the stream, libgit2
 * fails the fetch on its own thread and cleans up as after any network
 * error, and fetch() reports the watchdog's reason instead of libgit2's.
 *
 * libgit2's libssh2 transport (1.5, and the later 1.x seen so far) takes
 * the descriptor straight out of its private git_socket_stream {parent,
 * host, port, s}, past the stream's read and write: struct net_stream
 * starts with exactly those members. (Were that ever wrong, no SSH sync
 * could connect at all, which every sync test would show.)
 */
#if LIBGIT2_VER_MAJOR != 1
#error "check that libgit2's git_socket_stream still starts as struct net_stream does"
#endif

/* How often the watchdog looks, at most (and at least stall_ms / 10). */
#define WATCH_TICK_MS 1000

static atomic_int connect_ms_setting = GITSYNC_CONNECT_TIMEOUT_MS;
static atomic_int stall_ms_setting = GITSYNC_STALL_TIMEOUT_MS;
static atomic_int fetch_ms_setting = GITSYNC_FETCH_TIMEOUT_MS;

enum cut { CUT_NONE, CUT_STALLED, CUT_TOO_LONG, CUT_CANCELLED };

/* One fetch's watch: mu guards the members from fd to done. */
struct fetch_guard {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	int fd;		   /* the open connection's socket, else -1 */
	uint64_t seen;	   /* its received bytes at the last look */
	int64_t last_ns;   /* monotonic time of the last byte (or phase) */
	const char *phase; /* for the message */
	enum cut cut;
	bool done; /* the fetch returned: the watchdog ends */
	int stall_ms;
	int fetch_ms;		  /* the whole fetch, however the server paces it */
	int64_t start_ns;	  /* monotonic time the fetch started */
	struct fetch_guard *next; /* in guards (guards_mu) */
	pthread_t thread;
};

/* Running fetches, for gitsync_cancel_all. Lock order: guards_mu, then a
 * guard's mu. */
static pthread_mutex_t guards_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fetch_guard *guards;
/* The fetch running on this thread: libgit2 creates its streams on the
 * thread that called git_remote_fetch. */
static _Thread_local struct fetch_guard *thread_guard;
/* net_stream is libgit2's standard stream (libgit2_init_once). */
static bool net_registered;

void gitsync_set_timeouts(int connect_ms, int stall_ms)
{
	atomic_store(&connect_ms_setting, connect_ms > 0 ? connect_ms : GITSYNC_CONNECT_TIMEOUT_MS);
	atomic_store(&stall_ms_setting, stall_ms > 0 ? stall_ms : GITSYNC_STALL_TIMEOUT_MS);
}

void gitsync_set_fetch_timeout(int fetch_ms)
{
	atomic_store(&fetch_ms_setting, fetch_ms > 0 ? fetch_ms : GITSYNC_FETCH_TIMEOUT_MS);
}

/* Under g->mu: cut the connection (now and any made later). */
static void guard_cut_locked(struct fetch_guard *g, enum cut why)
{
	if (g->cut == CUT_NONE)
		g->cut = why;
	if (g->fd >= 0)
		shutdown(g->fd, SHUT_RDWR);
}

void gitsync_cancel_all(bool on)
{
	pthread_mutex_lock(&guards_mu);
	atomic_store(&gitsync_cancelled, on);
	for (struct fetch_guard *g = on ? guards : NULL; g; g = g->next) {
		pthread_mutex_lock(&g->mu);
		guard_cut_locked(g, CUT_CANCELLED);
		pthread_cond_signal(&g->wake);
		pthread_mutex_unlock(&g->mu);
	}
	pthread_mutex_unlock(&guards_mu);
}

static bool received_bytes(int fd, uint64_t *out)
{
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	memset(&ti, 0, sizeof ti);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
		return false;
	*out = ti.tcpi_bytes_received;
	return true;
}

static void *watchdog_main(void *arg)
{
	struct fetch_guard *g = arg;
	int least = g->stall_ms < g->fetch_ms ? g->stall_ms : g->fetch_ms;
	int tick = least / 10 < WATCH_TICK_MS ? least / 10 : WATCH_TICK_MS;
	if (tick < 1)
		tick = 1;
	pthread_mutex_lock(&g->mu);
	while (!g->done) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += (long)tick * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&g->wake, &g->mu, &until);
		if (g->done)
			break;
		int64_t now = now_mono_ns();
		uint64_t b;
		if (g->fd >= 0 && received_bytes(g->fd, &b) && b != g->seen) {
			g->seen = b;
			g->last_ns = now;
		}
		if (atomic_load(&gitsync_cancelled))
			guard_cut_locked(g, CUT_CANCELLED);
		else if (now - g->start_ns >= (int64_t)g->fetch_ms * 1000000)
			guard_cut_locked(g, CUT_TOO_LONG);
		else if (g->cut != CUT_NONE || now - g->last_ns >= (int64_t)g->stall_ms * 1000000)
			guard_cut_locked(g, CUT_STALLED);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

/* Starts watching the fetch about to run on this thread: its guard (on
 * the heap: it outlives no fetch, but the watchdog and gitsync_cancel_all
 * reach it from other threads), or NULL with *err. */
static struct fetch_guard *guard_start(char **err)
{
	struct fetch_guard *g = xcalloc(1, sizeof *g);
	pthread_mutex_init(&g->mu, NULL);
	cond_init_monotonic(&g->wake);
	g->fd = -1;
	g->last_ns = now_mono_ns();
	g->phase = "connecting";
	g->stall_ms = atomic_load(&stall_ms_setting);
	g->fetch_ms = atomic_load(&fetch_ms_setting);
	g->start_ns = g->last_ns;
	int e = thread_start(&g->thread, "git-watchdog", watchdog_main, g);
	if (e) {
		/* No fetch without its bound. */
		*err = xasprintf("cannot start the fetch watchdog: %s", strerror(e));
		pthread_cond_destroy(&g->wake);
		pthread_mutex_destroy(&g->mu);
		free(g);
		return NULL;
	}
	/* Listed for gitsync_cancel_all, which may already have been called. */
	pthread_mutex_lock(&guards_mu);
	pthread_mutex_lock(&g->mu);
	if (atomic_load(&gitsync_cancelled))
		g->cut = CUT_CANCELLED;
	pthread_mutex_unlock(&g->mu);
	g->next = guards;
	guards = g;
	pthread_mutex_unlock(&guards_mu);
	thread_guard = g;
	return g;
}

/* Ends the watch and frees g. */
static void guard_stop(struct fetch_guard *g)
{
	thread_guard = NULL;
	pthread_mutex_lock(&guards_mu);
	for (struct fetch_guard **p = &guards; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	pthread_mutex_unlock(&guards_mu);
	pthread_mutex_lock(&g->mu);
	g->done = true;
	pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->thread, NULL);
	pthread_cond_destroy(&g->wake);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

/* Marks progress (a callback ran: data came) and names the phase; false
 * when the fetch is cut, so the callback fails it. g may be NULL. */
static bool guard_phase(struct fetch_guard *g, const char *phase)
{
	if (!g)
		return !atomic_load(&gitsync_cancelled);
	pthread_mutex_lock(&g->mu);
	if (phase)
		g->phase = phase;
	g->last_ns = now_mono_ns();
	if (atomic_load(&gitsync_cancelled))
		guard_cut_locked(g, CUT_CANCELLED);
	bool ok = g->cut == CUT_NONE;
	pthread_mutex_unlock(&g->mu);
	return ok;
}

static void guard_attach(struct fetch_guard *g, int fd)
{
	pthread_mutex_lock(&g->mu);
	g->fd = fd;
	g->seen = 0;
	g->last_ns = now_mono_ns();
	if (g->cut != CUT_NONE)
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&g->mu);
}

/* Before fd is closed: the watchdog must never touch a reused number. */
static void guard_detach(struct fetch_guard *g, int fd)
{
	pthread_mutex_lock(&g->mu);
	if (g->fd == fd)
		g->fd = -1;
	pthread_mutex_unlock(&g->mu);
}

/* The reason the fetch was cut, or NULL. */
static char *guard_reason(struct fetch_guard *g)
{
	char d[DURATION_STR_MAX];
	char *why = NULL;
	pthread_mutex_lock(&g->mu);
	if (g->cut == CUT_CANCELLED)
		why = xstrdup("interrupted: Relay is shutting down");
	else if (g->cut == CUT_STALLED)
		why = xasprintf("no data from the server for %s during %s; giving up",
				duration_format((int64_t)g->stall_ms * 1000000, d), g->phase);
	else if (g->cut == CUT_TOO_LONG)
		why = xasprintf("the fetch took longer than %s (still in %s); giving up",
				duration_format((int64_t)g->fetch_ms * 1000000, d), g->phase);
	pthread_mutex_unlock(&g->mu);
	return why;
}

/* A libgit2 stream: a TCP socket that connect() opens within connect_ms
 * and the fetch's guard watches. */
struct net_stream {
	git_stream parent; /* these four members: libgit2's git_socket_stream */
	char *host;
	char *port;
	int s;
	struct fetch_guard *guard; /* NULL outside a fetch */
};

static bool guard_is_cut(struct fetch_guard *g)
{
	if (!g)
		return atomic_load(&gitsync_cancelled);
	pthread_mutex_lock(&g->mu);
	bool cut = g->cut != CUT_NONE;
	pthread_mutex_unlock(&g->mu);
	return cut;
}

/* connect() on a non-blocking fd, waited for until deadline in slices, so
 * a cut is noticed. 0 or an errno value (ETIMEDOUT, ECANCELED). */
static int connect_bounded(struct net_stream *st, int fd, const struct addrinfo *p,
			   int64_t deadline)
{
	if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	for (;;) {
		if (guard_is_cut(st->guard))
			return ECANCELED;
		int64_t left = (deadline - now_mono_ns()) / 1000000;
		if (left <= 0)
			return ETIMEDOUT;
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int n = poll(&pfd, 1, left < 100 ? (int)left : 100);
		if (n < 0 && errno != EINTR)
			return errno;
		if (n > 0) {
			int soerr = 0;
			socklen_t len = sizeof soerr;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
				return errno;
			return soerr ? soerr : guard_is_cut(st->guard) ? ECANCELED : 0;
		}
	}
}

static int net_connect(git_stream *stream)
{
	struct net_stream *st = (struct net_stream *)stream;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	int connect_ms = atomic_load(&connect_ms_setting);
	/* Name resolution is bounded by the resolver's own timeouts
	 * (resolv.conf), not by connect_ms. */
	int gai = getaddrinfo(st->host, st->port, &hints, &ai);
	if (gai) {
		char *msg = xasprintf("cannot resolve %s: %s", st->host, gai_strerror(gai));
		git_error_set_str(GIT_ERROR_NET, msg);
		free(msg);
		return -1;
	}
	int64_t deadline = now_mono_ns() + (int64_t)connect_ms * 1000000;
	int fd = -1, e = ENOENT;
	for (const struct addrinfo *p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    p->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if (st->guard)
			guard_attach(st->guard, fd);
		e = connect_bounded(st, fd, p, deadline);
		if (e == 0)
			break;
		if (st->guard)
			guard_detach(st->guard, fd);
		close(fd);
		fd = -1;
		if (e == ETIMEDOUT || e == ECANCELED)
			break;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		char d[DURATION_STR_MAX];
		char *msg = e == ETIMEDOUT
				    ? xasprintf("cannot connect to %s port %s: no answer within %s",
						st->host, st->port,
						duration_format((int64_t)connect_ms * 1000000, d))
				    : xasprintf("cannot connect to %s port %s: %s", st->host,
						st->port, strerror(e));
		git_error_set_str(GIT_ERROR_NET, msg);
		free(msg);
		return -1;
	}
	/* Blocking, as libgit2's own socket is (libssh2 sets what it needs). */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	st->s = fd;
	if (st->guard)
		guard_phase(st->guard, "the SSH handshake");
	return 0;
}

static ssize_t net_read(git_stream *stream, void *data, size_t len)
{
	struct net_stream *st = (struct net_stream *)stream;
	ssize_t n;
	while ((n = recv(st->s, data, len, 0)) < 0 && errno == EINTR)
		;
	if (n < 0)
		git_error_set_str(GIT_ERROR_NET, "cannot read from the server");
	return n;
}

static ssize_t net_write(git_stream *stream, const char *data, size_t len, int flags)
{
	struct net_stream *st = (struct net_stream *)stream;
	ssize_t n;
	(void)flags;
	while ((n = send(st->s, data, len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n < 0)
		git_error_set_str(GIT_ERROR_NET, "cannot write to the server");
	return n;
}

static int net_close(git_stream *stream)
{
	struct net_stream *st = (struct net_stream *)stream;
	if (st->s >= 0) {
		if (st->guard)
			guard_detach(st->guard, st->s);
		close(st->s);
		st->s = -1;
	}
	return 0;
}

static void net_free(git_stream *stream)
{
	struct net_stream *st = (struct net_stream *)stream;
	net_close(stream);
	free(st->host);
	free(st->port);
	free(st);
}

static int net_stream_new(git_stream **out, const char *host, const char *port)
{
	struct net_stream *st = xcalloc(1, sizeof *st);
	st->parent.version = GIT_STREAM_VERSION;
	st->parent.connect = net_connect;
	st->parent.read = net_read;
	st->parent.write = net_write;
	st->parent.close = net_close;
	st->parent.free = net_free;
	st->host = xstrdup(host);
	st->port = xstrdup(port && *port ? port : "22");
	st->s = -1;
	st->guard = thread_guard;
	*out = &st->parent;
	return 0;
}

/* ---- libgit2 ---- */

static pthread_once_t libgit2_once = PTHREAD_ONCE_INIT;

static void libgit2_init_once(void)
{
	git_libgit2_init();
	/* No ~/.gitconfig, XDG or /etc/gitconfig: only the checkout's own. */
	static const int levels[] = {GIT_CONFIG_LEVEL_SYSTEM, GIT_CONFIG_LEVEL_XDG,
				     GIT_CONFIG_LEVEL_GLOBAL, GIT_CONFIG_LEVEL_PROGRAMDATA};
	for (size_t i = 0; i < ARRAY_LEN(levels); i++)
		git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], "");
	/* Every connection through net_stream (see "network bounds"). */
	git_stream_registration reg = {.version = GIT_STREAM_VERSION, .init = net_stream_new};
	net_registered = git_stream_register(GIT_STREAM_STANDARD, &reg) == 0;
}

void gitsync_libgit2_init(void)
{
	pthread_once(&libgit2_once, libgit2_init_once);
}

const char *gitsync_libgit2_error(void)
{
	const git_error *e = git_error_last();
	return e && e->message ? e->message : "unknown libgit2 error";
}

/* ---- the fetch ---- */

/* One fetch, as its callbacks see it. */
struct remote_ctx {
	const struct gitsync_remote *remote;
	int auth_offers;
	struct fetch_guard *guard;
	char *err; /* the first callback failure, preferred over libgit2's */
};

static int cb_credentials(git_credential **out, const char *url, const char *username_from_url,
			  unsigned int allowed, void *payload)
{
	struct remote_ctx *c = payload;
	const char *user = username_from_url && *username_from_url ? username_from_url : "git";
	(void)url;
	if (!guard_phase(c->guard, "authentication and ref negotiation"))
		return GIT_EUSER;
	if (allowed & GIT_CREDENTIAL_USERNAME)
		return git_credential_username_new(out, user);
	if (!(allowed & GIT_CREDENTIAL_SSH_KEY)) {
		if (!c->err)
			c->err = xstrdup("SSH authentication failed: the server does not offer "
					 "public-key authentication");
		return GIT_EUSER;
	}
	/* libgit2 asks again after every rejected key, without end. */
	if (++c->auth_offers > AUTH_ATTEMPTS) {
		if (!c->err)
			c->err = xstrdup("SSH authentication failed: is the deploy key (relay git "
					 "keygen) registered with the server?");
		return GIT_EUSER;
	}
	return git_credential_ssh_key_new(out, user, NULL, c->remote->key_path, NULL);
}

static int cb_certificate(git_cert *cert, int valid, const char *host, void *payload)
{
	struct remote_ctx *c = payload;
	(void)valid; /* from $HOME/.ssh/known_hosts: not Relay's decision */
	const git_cert_hostkey *hk = (const git_cert_hostkey *)cert;
	if (!guard_phase(c->guard, "authentication and ref negotiation"))
		return GIT_EUSER;
	if (cert->cert_type != GIT_CERT_HOSTKEY_LIBSSH2 || !(hk->type & GIT_CERT_SSH_RAW) ||
	    !hk->hostkey || hk->hostkey_len == 0) {
		if (!c->err)
			c->err = xasprintf("host %s: no SSH host key to verify", host);
		return GIT_ECERTIFICATE;
	}
	char *kerr = NULL;
	const unsigned char *blob = (const unsigned char *)hk->hostkey;
	switch (sshkey_known_hosts_verify(c->remote->ssh_dir, host, c->remote->port, blob,
					  hk->hostkey_len, &kerr)) {
	case KNOWN_HOSTS_MATCH: return 0;
	case KNOWN_HOSTS_NEW: {
		if (c->remote->notice) {
			char *fp = sshkey_fingerprint(blob, hk->hostkey_len);
			char *token = c->remote->port == 22
					      ? xstrdup(host)
					      : xasprintf("[%s]:%d", host, c->remote->port);
			char *msg = xasprintf("Trusted new host %s (fingerprint %s)", token, fp);
			c->remote->notice(c->remote->notice_arg, msg);
			free(msg);
			free(token);
			free(fp);
		}
		return 0;
	}
	case KNOWN_HOSTS_MISMATCH:
	case KNOWN_HOSTS_ERROR: break;
	}
	if (!c->err)
		c->err = kerr ? kerr : xasprintf("host %s: cannot verify the host key", host);
	else
		free(kerr);
	return GIT_ECERTIFICATE;
}

/* The checkout's remote.origin.url, read straight from its config (see
 * make_remote for why not git_remote_lookup). */
static bool origin_is(git_repository *repo, const char *url)
{
	git_config *cfg = NULL;
	git_buf b = {0};
	bool same = git_repository_config(&cfg, repo) == 0 &&
		    git_config_get_string_buf(&b, cfg, "remote.origin.url") == 0 &&
		    strcmp(b.ptr, url) == 0;
	git_buf_dispose(&b);
	git_config_free(cfg);
	return same;
}

/*
 * A remote for url (name NULL: anonymous). url.<base>.insteadOf is never
 * applied: it is not Relay's configuration, and libgit2 1.5.1 leaks a PCRE2
 * match block (~20 KiB) for every config entry its insteadOf scan (and
 * git_remote_lookup's) does not match - fixed upstream after 1.5 (libgit2
 * PR #6382) - which a long-running worker syncing on webhooks would feel.
 */
static int make_remote(git_remote **out, git_repository *repo, const char *name, const char *url)
{
	git_remote_create_options ro;
	git_remote_create_options_init(&ro, GIT_REMOTE_CREATE_OPTIONS_VERSION);
	ro.repository = repo;
	ro.name = name;
	ro.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF;
	if (!name)
		ro.flags |= GIT_REMOTE_CREATE_SKIP_DEFAULT_FETCHSPEC;
	return git_remote_create_with_opts(out, url, &ro);
}

int gitsync_open_checkout(const char *path, const char *url, git_repository **out, char **err)
{
	git_repository *repo = NULL;
	git_remote *remote = NULL;
	struct stat st;
	*out = NULL;
	if (lstat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode) &&
		    git_repository_open_ext(&repo, path, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) ==
			    0 &&
		    origin_is(repo, url)) {
			*out = repo;
			return 0;
		}
		git_repository_free(repo);
		repo = NULL;
		if (gitsync_rm_tree(path, err) < 0)
			return -1;
	}
	git_repository_init_options io;
	git_repository_init_options_init(&io, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
	io.flags = GIT_REPOSITORY_INIT_NO_REINIT | GIT_REPOSITORY_INIT_MKPATH;
	if (git_repository_init_ext(&repo, path, &io) < 0) {
		*err = xasprintf("cannot create the checkout %s: %s", path,
				 gitsync_libgit2_error());
		return -1;
	}
	/* "origin" is what tells the next sync which repository this is. */
	if (make_remote(&remote, repo, "origin", url) < 0) {
		*err = xasprintf("cannot configure the checkout %s: %s", path,
				 gitsync_libgit2_error());
		git_repository_free(repo);
		return -1;
	}
	git_remote_free(remote);
	*out = repo;
	return 0;
}

/* Data is coming: the stall bound restarts; a cut fetch stops here. */
static int cb_sideband(const char *str, int len, void *payload)
{
	struct remote_ctx *c = payload;
	(void)str;
	(void)len;
	return guard_phase(c->guard, "the pack transfer") ? 0 : GIT_EUSER;
}

static int cb_transfer(const git_indexer_progress *stats, void *payload)
{
	struct remote_ctx *c = payload;
	if (stats->received_bytes > GITSYNC_PACK_MAX_BYTES) {
		if (!c->err)
			c->err = xstrdup("the server sent more than 1 GiB; giving up");
		return GIT_EUSER;
	}
	return guard_phase(c->guard, "the pack transfer") ? 0 : GIT_EUSER;
}

static int fetch(git_repository *repo, const char *url, struct remote_ctx *ctx, char **err)
{
	static char *specs[] = {"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"};
	git_strarray refspecs = {specs, ARRAY_LEN(specs)};
	git_remote *remote = NULL;
	git_fetch_options fo;
	struct fetch_guard *guard;
	if (!net_registered) {
		*err = xstrdup("cannot fetch: libgit2 refused Relay's bounded network stream");
		return -1;
	}
	if (!(guard = guard_start(err)))
		return -1;
	ctx->guard = guard;
	git_fetch_options_init(&fo, GIT_FETCH_OPTIONS_VERSION);
	fo.callbacks.credentials = cb_credentials;
	fo.callbacks.certificate_check = cb_certificate;
	fo.callbacks.sideband_progress = cb_sideband;
	fo.callbacks.transfer_progress = cb_transfer;
	fo.callbacks.payload = ctx;
	fo.prune = GIT_FETCH_PRUNE;
	fo.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_NONE;
	int rc = make_remote(&remote, repo, NULL, url);
	if (rc == 0)
		rc = git_remote_fetch(remote, &refspecs, &fo, "relay git sync");
	git_remote_free(remote);
	char *cut = guard_reason(guard);
	guard_stop(guard);
	ctx->guard = NULL;
	if (rc == 0 && !cut)
		return 0;
	/* The watchdog's reason first: libgit2 only saw the connection end. */
	char *s = gitsync_shown(url);
	const char *why = cut ? cut : ctx->err ? ctx->err : gitsync_libgit2_error();
	*err = xasprintf("cannot fetch %s: %s", s, why);
	free(s);
	free(cut);
	return -1;
}

int gitsync_fetch(git_repository *repo, const char *url, const struct gitsync_remote *remote,
		  char **err)
{
	struct remote_ctx ctx = {.remote = remote};
	int rc = fetch(repo, url, &ctx, err);
	free(ctx.err);
	return rc;
}

/* ---- refs ---- */

/* The commit a fetched ref points to: refs/heads/NAME is looked up as
 * origin's branch. 0 found, 1 no such ref, -1 error (*err). */
static int lookup_ref(git_repository *repo, const char *full, git_object **out, char **err)
{
	const char *branch =
		str_has_prefix(full, "refs/heads/") ? full + strlen("refs/heads/") : NULL;
	char *local = branch ? xasprintf("refs/remotes/origin/%s", branch) : xstrdup(full);
	git_reference *r = NULL;
	int rc = git_reference_lookup(&r, repo, local);
	free(local);
	if (rc == GIT_ENOTFOUND || rc == GIT_EINVALIDSPEC)
		return 1;
	if (rc == 0)
		rc = git_reference_peel(out, r, GIT_OBJECT_COMMIT);
	git_reference_free(r);
	if (rc == 0)
		return 0;
	char *s = gitsync_shown(full);
	*err = xasprintf("ref '%s' does not point to a commit: %s", s, gitsync_libgit2_error());
	free(s);
	return -1;
}

/* The message for a ref that names n (2 or 3) things, e.g.: ref "v1" is
 * ambiguous: both refs/heads/v1 and refs/tags/v1 exist; use --ref
 * refs/heads/v1 or refs/tags/v1. malloc'd. */
static char *ambiguous_ref(const char *ref, char *const *names, size_t n)
{
	char *s = gitsync_shown(ref);
	char *what = n == 2 ? xasprintf("both %s and %s", names[0], names[1])
			    : xasprintf("%s, %s and %s", names[0], names[1], names[2]);
	const char *last =
		str_has_prefix(names[n - 1], "commit ") ? "the full commit id" : names[n - 1];
	char *hint = n == 2 ? xasprintf("%s or %s", names[0], last)
			    : xasprintf("%s, %s or %s", names[0], names[1], last);
	char *msg = xasprintf("ref \"%s\" is ambiguous: %s exist; use --ref %s", s, what, hint);
	free(hint);
	free(what);
	free(s);
	return msg;
}

int gitsync_resolve_ref(git_repository *repo, const char *url, const char *ref, git_object **out,
			char **resolved, char **err)
{
	git_object *found[3] = {NULL, NULL, NULL};
	char *names[3] = {NULL, NULL, NULL};
	size_t n = 0;
	int rc = -1;
	*out = NULL;
	*resolved = NULL;
	git_oid oid;
	size_t len = strlen(ref);
	if (gitsync_is_hex(ref, 40, 40)) {
		/* A full id is that commit, whatever branches are named. */
		if (git_oid_fromstrn(&oid, ref, len) == 0 &&
		    git_object_lookup(&found[0], repo, &oid, GIT_OBJECT_COMMIT) == 0)
			names[n++] = xstrdup(git_oid_tostr_s(&oid));
	} else if (gitsync_explicit_name(ref)) {
		if ((rc = lookup_ref(repo, ref, &found[0], err)) < 0)
			goto out;
		if (rc == 0)
			names[n++] = xstrdup(ref);
	} else {
		static const char *const forms[] = {"refs/heads/%s", "refs/tags/%s"};
		for (size_t i = 0; i < ARRAY_LEN(forms); i++) {
			char *full = xasprintf(forms[i], ref);
			if ((rc = lookup_ref(repo, full, &found[n], err)) < 0) {
				free(full);
				goto out;
			}
			if (rc == 0)
				names[n++] = full;
			else
				free(full);
		}
		/* An abbreviated id, which a branch or tag must not shadow. */
		if (gitsync_is_hex(ref, 4, 39) && git_oid_fromstrn(&oid, ref, len) == 0) {
			rc = git_object_lookup_prefix(&found[n], repo, &oid, len,
						      GIT_OBJECT_COMMIT);
			if (rc == GIT_EAMBIGUOUS) {
				char *s = gitsync_shown(ref);
				*err = xasprintf("ref \"%s\" is ambiguous: more than one commit id "
						 "starts with it; use the full commit id",
						 s);
				free(s);
				rc = -1;
				goto out;
			}
			if (rc == 0) {
				names[n] = xasprintf("commit %s",
						     git_oid_tostr_s(git_object_id(found[n])));
				n++;
			}
		}
	}
	rc = -1;
	if (n == 0) {
		char *s = gitsync_shown(ref), *u = gitsync_shown(url);
		*err = xasprintf("ref '%s' not found in %s", s, u);
		free(s);
		free(u);
	} else if (n > 1) {
		*err = ambiguous_ref(ref, names, n);
	} else {
		*out = found[0];
		found[0] = NULL;
		if (str_has_prefix(names[0], "commit "))
			*resolved = xstrdup(names[0] + strlen("commit "));
		else
			*resolved = xstrdup(names[0]);
		rc = 0;
	}
out:
	for (size_t i = 0; i < ARRAY_LEN(found); i++) {
		git_object_free(found[i]);
		free(names[i]);
	}
	return rc;
}
