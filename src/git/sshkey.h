/*
 * The SSH deploy key and Relay's own known_hosts (docs/commands.md, "relay git":
 * authentication and host verification).
 *
 * Key: <ssh_dir>/id_ed25519, an ed25519 private key in OpenSSH's
 * "openssh-key-v1" format (unencrypted, base64 wrapped at 70 columns,
 * "-----BEGIN OPENSSH PRIVATE KEY-----"), generated with OpenSSL's EVP API.
 * ssh_dir is created 0700, the file 0600, written atomically (temporary
 * file in ssh_dir, fsync, rename, fsync dir). The public half is also
 * written to <ssh_dir>/id_ed25519.pub (0644) for convenience; the private
 * file is the source of truth. The key comment is "relay".
 *
 * ssh_dir itself is refused when it is a symbolic link, not owned by the
 * effective uid, or writable by group or others.
 *
 * known_hosts: <ssh_dir>/known_hosts (0600), OpenSSH's format, one
 * "[marker] <hosts> <keytype> <base64 blob>" per line, where the name
 * looked up is "host" for port 22 and "[host]:port" otherwise (lowercased).
 * Trust On First Use: an unknown host is appended as a plain line; a known
 * host must present exactly a pinned key. <hosts> is a comma-separated list
 * of patterns ('*', '?', '!' negation; case-insensitive) or one hashed
 * entry "|1|salt|hash" (HMAC-SHA1, as ssh-keygen -H / ssh-keyscan -H write
 * it). "@revoked" lines refuse their key for the hosts they name, whatever
 * else pins it; "@cert-authority" lines are not supported (certificates
 * are never checked) and refuse a host they name unless the presented key
 * is also pinned by a plain line (then they are ignored with a WARN).
 * Comments, malformed lines and unknown markers are skipped; an unreadable
 * key on a @revoked/@cert-authority line for the host refuses it. The
 * exact order of these rules is at the top of sshkey.c's known_hosts part.
 *
 * Bounds: the file is refused when it is a symbolic link, not owned by the
 * effective uid, writable by group or others, larger than 1 MiB
 * (KNOWN_HOSTS_MAX), longer than 16384 lines (KNOWN_HOSTS_MAX_LINES) or
 * has a line over 32 KiB (KNOWN_HOSTS_LINE_MAX); enforced in sshkey.c
 * (read_bounded, scan). A verification is linear in the file: a few word
 * operations per byte of host patterns (no backtracking matcher) and one
 * HMAC-SHA1 per hashed entry.
 */
#ifndef RELAY_SSHKEY_H
#define RELAY_SSHKEY_H

#include <errno.h> /* EEXIST, ENOENT: the results named below */
#include <stdbool.h>
#include <stddef.h>

#define SSHKEY_FILE "id_ed25519"
#define SSHKEY_KNOWN_HOSTS "known_hosts"
/* The known_hosts bounds above. */
#define KNOWN_HOSTS_MAX (1024 * 1024)
#define KNOWN_HOSTS_MAX_LINES 16384
#define KNOWN_HOSTS_LINE_MAX (32 * 1024)

/*
 * Generates a new key into ssh_dir. When a key already exists and force is
 * false, nothing is written and -EEXIST is returned (err names the path).
 * On success returns 0 and sets *public_line ("ssh-ed25519 AAAA... relay",
 * no newline) and *fingerprint ("SHA256:..."), both malloc'd. -1 on any
 * other error. err: malloc'd one-line message.
 */
int sshkey_generate(const char *ssh_dir, bool force, char **public_line, char **fingerprint,
		    char **err);

/* Reads <ssh_dir>/id_ed25519 and derives its public line and fingerprint
 * (both malloc'd on success). -ENOENT when there is no key file; -1 when
 * it is unreadable, malformed (the whole file is checked, including that
 * the private half derives the public half), larger than 64 KiB, a
 * symbolic link, or its permissions are looser than 0600 / owner not the
 * effective uid. On -1 and -ENOENT err is a malloc'd message naming the
 * path. */
int sshkey_public(const char *ssh_dir, char **public_line, char **fingerprint, char **err);

/* Path of the private key file (malloc'd). Thread-safe, as are the two
 * functions above (each works on its own descriptors). */
char *sshkey_path(const char *ssh_dir);

/* "SHA256:" + unpadded base64 of SHA-256(blob): OpenSSH's fingerprint of a
 * public key blob (string keytype, then key data). malloc'd. */
char *sshkey_fingerprint(const unsigned char *blob, size_t len);

enum known_hosts_result {
	KNOWN_HOSTS_MATCH,    /* pinned and equal */
	KNOWN_HOSTS_NEW,      /* first contact: pinned now (line appended) */
	KNOWN_HOSTS_MISMATCH, /* refused key: pinned to another key (possible
				 MITM), or listed @revoked for the host */
	KNOWN_HOSTS_ERROR,    /* file unreadable/unwritable/over a bound, blob
				 malformed, host under @cert-authority or an
				 unreadable @revoked/@cert-authority entry */
};

/*
 * The TOFU decision for host:port presenting the raw key blob (as libgit2's
 * certificate callback hands it, GIT_CERT_SSH_RAW). The key type is read
 * from the blob itself, whose structure is validated (a type string, then
 * strings that exactly fill it). On MISMATCH and ERROR *err is a malloc'd
 * message (MISMATCH: a clear man-in-the-middle warning naming the host,
 * both fingerprints and the known_hosts path to edit, or, for a revoked
 * key, its fingerprint, the path and the @revoked line's number; ERROR
 * names the path and, where one line is at fault, its number); on MATCH
 * and NEW it is left untouched. Serialized by a process-local mutex and, across
 * processes, by flock on the file; the new line is appended with O_APPEND.
 */
enum known_hosts_result sshkey_known_hosts_verify(const char *ssh_dir, const char *host, int port,
						  const unsigned char *blob, size_t len,
						  char **err);

/* The decision sshkey_known_hosts_verify makes, on the known_hosts text alone
 * (text[0..n), NULs allowed): no file access, nothing appended (NEW means
 * "would be pinned now"); path only names the file in messages. Same
 * results and messages as sshkey_known_hosts_verify, including the bounds on lines
 * (not on n: the caller bounds what it reads). Thread-safe; what the
 * fuzzer drives (tests/fuzz/fuzz_known_hosts.c). */
enum known_hosts_result sshkey_known_hosts_check(const char *text, size_t n, const char *path,
						 const char *host, int port,
						 const unsigned char *blob, size_t len, char **err);

#endif
