#include "prom.h"

#include <math.h>
#include <stdio.h>

/* Appends `s`, escaping backslash and newline, and double quotes too when
 * `quotes` is set (label values need it, HELP text does not). */
static int prom_escaped(struct buf *b, const char *s, int quotes)
{
    for (; *s; s++) {
        int rc;
        if (*s == '\\')
            rc = buf_append(b, "\\\\", 2);
        else if (*s == '\n')
            rc = buf_append(b, "\\n", 2);
        else if (*s == '"' && quotes)
            rc = buf_append(b, "\\\"", 2);
        else
            rc = buf_append(b, s, 1);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int prom_family(struct buf *b, const char *name, const char *type, const char *help)
{
    if (buf_printf(b, "# HELP %s ", name) != 0 || prom_escaped(b, help, 0) != 0)
        return -1;
    return buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

int prom_sample(struct buf *b, const char *name, const char *const *labels, double value)
{
    if (buf_printf(b, "%s", name) != 0)
        return -1;
    if (labels && labels[0]) {
        for (int i = 0; labels[i]; i += 2) {
            if (buf_printf(b, "%s%s=\"", i ? "," : "{", labels[i]) != 0 ||
                prom_escaped(b, labels[i + 1] ? labels[i + 1] : "", 1) != 0 ||
                buf_append(b, "\"", 1) != 0)
                return -1;
        }
        if (buf_append(b, "}", 1) != 0)
            return -1;
    }
    if (isinf(value))
        return buf_printf(b, " %s\n", value > 0 ? "+Inf" : "-Inf");
    if (isnan(value))
        return buf_printf(b, " NaN\n");
    return buf_printf(b, " %.17g\n", value);
}
