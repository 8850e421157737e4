/*
 * The frames of the warm protocol (docs/warm-protocol.md), pure and
 * bounded: the request header Relay writes to a warm container's stdin,
 * and the parser Relay runs on each line it reads from the container's
 * stdout and stderr.
 *
 * A request is "RELAY1 <token> <len>\n" followed by <len> bytes of event
 * JSON; <token> is WARM_TOKEN_LEN lowercase hex digits, new for every
 * invocation. After the handler the bootstrap writes, each in one write(),
 *   on stderr  "\x1eRELAY1 <token> end\n"
 *   on stdout  "\x1eRELAY1 <token> <status> <error>\n"
 * status 0 (returned) or 1 (raised), error a JSON string whose code points
 * (all <= U+00FF) are the bytes of the line the fresh bootstrap prints on
 * stderr ("" on success). A frame may follow text without a newline: that
 * text is forwarded as a line of its own. A frame with another token is
 * plain output.
 */
#ifndef RELAY_WARM_FRAME_H
#define RELAY_WARM_FRAME_H

#include <stdbool.h>
#include <stddef.h>

#define WARM_TOKEN_LEN 32
/* The magic that starts every frame: the record separator, then "RELAY1 ". */
#define WARM_MAGIC "\x1eRELAY1 "
#define WARM_MAGIC_LEN 8
/* A frame (magic to end of line) is shorter than this. */
#define WARM_FRAME_MAX 4096
/* Bytes of the error line a result carries at most (the fresh runner keeps
 * as much of the last stderr line). */
#define WARM_ERROR_MAX 512
/* "RELAY1 " + token + " " + up to 20 digits + "\n" + NUL */
#define WARM_HEADER_MAX 64

enum warm_frame_kind {
	WARM_PLAIN,  /* no frame of this token: the whole line is output */
	WARM_END,    /* the end of an invocation's stderr */
	WARM_RESULT, /* the end of its stdout, with the result */
	WARM_BAD,    /* a frame of this token that does not parse */
};

struct warm_frame {
	enum warm_frame_kind kind;
	/* Bytes of the line before the frame (the whole line for
	 * WARM_PLAIN): forwarded as a line when not empty. */
	size_t text_len;
	int status;			 /* WARM_RESULT: 0 or 1 */
	char error[WARM_ERROR_MAX + 1];	 /* WARM_RESULT: NUL-terminated, cut
					    at the first NUL byte */
	size_t error_len;
};

/* Classifies one line (without its '\n') for the invocation's token
 * (WARM_TOKEN_LEN characters). Looks only at the line's last
 * WARM_FRAME_MAX bytes for the frame, at the last occurrence of the magic
 * followed by the token and a space. */
void warm_frame_parse(const char *line, size_t len, const char *token, struct warm_frame *f);

/* For a piece of a line that was cut without a newline (too long): the
 * offset from which its bytes may be the start of a frame of token still
 * to be completed by the next piece (a magic byte within the last
 * WARM_FRAME_MAX bytes whose following bytes agree with the frame so far),
 * or len when none. */
size_t warm_frame_tail(const char *p, size_t len, const char *token);

/* Writes the request header for payload_len into out (WARM_HEADER_MAX
 * bytes); returns its length. */
size_t warm_frame_request_header(char *out, const char *token, size_t payload_len);

/* Fills token (WARM_TOKEN_LEN + 1 bytes) with fresh random hex digits. */
void warm_frame_token_new(char *token);

#endif
