#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

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
    utf8_trim_partial(err->field, sizeof err->field);
    utf8_trim_partial(err->message, sizeof err->message);
    return -1;
}

void err_clear(struct shoal_err *err)
{
    if (!err)
        return;
    memset(err, 0, sizeof *err);
}
