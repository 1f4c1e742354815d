#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum log_level log_threshold = LOG_LEVEL_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

int log_parse_level(const char *name, enum log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L, level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs per line so lines from different threads do not interleave. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
}
