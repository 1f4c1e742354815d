#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Ends `s` (a string snprintf may have cut at n - 1 bytes) before a UTF-8
 * character the cut split, so messages stay valid UTF-8 (JSON needs it). */
static void err_utf8_trim(char *s, size_t n)
{
    size_t len = strlen(s);
    if (len + 1 < n)
        return;   /* not cut */
    size_t start = len;
    while (start > 0 && ((unsigned char)s[start - 1] & 0xC0) == 0x80)
        start--;
    if (start == 0)
        return;
    unsigned char lead = (unsigned char)s[start - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (len - (start - 1) < want)
        s[start - 1] = '\0';
}

int err_set(struct shoal_err *err, int status, const char *code,
            const char *field, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->status = status;
    snprintf(err->code, sizeof err->code, "%s", code ? code : "error");
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err_utf8_trim(err->field, sizeof err->field);
    err_utf8_trim(err->message, sizeof err->message);
    return -1;
}

void err_clear(struct shoal_err *err)
{
    if (!err)
        return;
    memset(err, 0, sizeof *err);
}
