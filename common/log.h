/* log.h - one logging macro family, skipped cheaply when the level is off.
 *
 * Lines go to stderr as `2026-11-22T04:07:00.123Z info message`, one line
 * per call; callers write key=value pairs so the output greps well. */
#ifndef SHOAL_LOG_H
#define SHOAL_LOG_H

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

extern enum log_level log_threshold;

/* Parses "debug", "info", "warn" or "error".  Returns 0, or -1 if unknown. */
int log_parse_level(const char *name, enum log_level *out);

void log_write(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define LOG_AT(lvl, ...) \
    do { if ((lvl) >= log_threshold) log_write((lvl), __VA_ARGS__); } while (0)
#define log_debug(...) LOG_AT(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  LOG_AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  LOG_AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) LOG_AT(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
