/* err.h - one error value passed up from wherever a call fails.
 *
 * Functions that can fail take a `struct shoal_err *` and return an int
 * status (0 on success, -1 on failure).  On failure they fill the error with
 * an HTTP-ish status, a short machine-readable code, a human message and,
 * for input errors, the offending field.  The caller passes it up unchanged.
 */
#ifndef SHOAL_ERR_H
#define SHOAL_ERR_H

#include <stddef.h>

struct shoal_err {
    int status;         /* HTTP status the error maps to (400, 404, 503, ...) */
    char code[40];      /* machine-readable: "invalid_field", "not_found", ... */
    char field[128];    /* dotted path of the bad input field, "" if none */
    char message[384];  /* human-readable reason, says what to do */
};

/* Fills `err` (if non-NULL) and returns -1, so callers can write
 * `return err_set(err, 400, "invalid_json", NULL, "...")`.
 * `field` may be NULL.  The message is printf-formatted and truncated to fit. */
int err_set(struct shoal_err *err, int status, const char *code,
            const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Resets `err` to "no error" (status 0, empty strings). */
void err_clear(struct shoal_err *err);

#endif
