/* control.h - the agent's HTTP client for the control plane (libcurl).
 *
 * One call = one fresh easy handle, so any thread may call at any time.
 * JSON in, JSON out; files streamed to and from disk for checkpoints.
 * Calls that may be retried take a deadline and retry network errors and
 * 5xx answers with exponential backoff and jitter, and 429 answers after
 * their Retry-After; other 4xx answers are final. */
#ifndef SHOAL_AGENT_CONTROL_H
#define SHOAL_AGENT_CONTROL_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "../../common/err.h"
#include "../../common/token.h"

#define CTL_BODY_MAX (16u << 20)   /* bytes of a JSON answer we accept */

struct ctl {
    char url[512];                 /* server base URL, no trailing slash */
    char token[TOKEN_MAX];         /* bearer: join token until registered, then the node token */
    char ca_file[4096];            /* PEM CA bundle to verify an https server with; "" = the system's */
    const atomic_int *stop;        /* non-zero: give up retrying at once (may be NULL) */
};

/* Calls the server once: `method` `path` with `body` (borrowed, may be NULL)
 * within timeout_s seconds.  On an answer, *status gets the HTTP status and
 * *out the parsed JSON body (new reference, NULL if empty or not JSON) and 0
 * is returned even for 4xx/5xx; err is then set from the answer's error
 * object when status >= 400.  -1 only when no answer came (err: 503
 * "server_unreachable" and curl's reason). */
int ctl_call(const struct ctl *c, const char *method, const char *path, json_t *body,
             long timeout_s, long *status, json_t **out, struct shoal_err *err);

/* ctl_call, retried until it gets an answer below 500 (other than 429) or `deadline_s`
 * seconds pass (0: retry until c->stop).  Returns 0 with a 2xx answer
 * (*out as above, may be NULL to discard), else -1 with err set. */
int ctl_call_retry(const struct ctl *c, const char *method, const char *path, json_t *body,
                   long timeout_s, double deadline_s, json_t **out, struct shoal_err *err);

/* PUTs the file at `file` as application/octet-stream with header
 * X-Shoal-SHA256: sha256_hex, retried like ctl_call_retry.  *out as above. */
int ctl_put_file(const struct ctl *c, const char *path, const char *file, const char *sha256_hex,
                 double deadline_s, json_t **out, struct shoal_err *err);

/* GETs `path` into the file `file` (created 0600, replaced) and checks the
 * body's SHA-256 against the X-Shoal-SHA256 answer header, which must be
 * present.  A mismatch removes the file and fails (422 "checksum_mismatch"). */
int ctl_get_file(const struct ctl *c, const char *path, const char *file, double deadline_s,
                 struct shoal_err *err);

/* Copies `token` into out, or when it is "" reads the first line of
 * `file` ("" too: fails with 401 "no_token" and `missing_hint` as the
 * message).  The result must look like a token (token_well_formed). */
int ctl_token_load(const char *token, const char *file, const char *missing_hint, char out[TOKEN_MAX],
                   struct shoal_err *err);

/* Monotonic seconds. */
double ctl_now(void);

/* The CLOCK_REALTIME instant `seconds` from now, for pthread_cond_timedwait. */
struct timespec ctl_abstime(double seconds);

/* Sleeps up to `s` seconds, returning early when c->stop becomes non-zero. */
void ctl_sleep(const struct ctl *c, double s);

#endif
