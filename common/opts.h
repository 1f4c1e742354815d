/* opts.h - settings from a table: built-in default < SHOAL_* environment
 * variable < command-line flag.  The table also prints --help, so the help
 * can never disagree with what is parsed.  Each program keeps its table
 * beside its settings struct. */
#ifndef SHOAL_OPTS_H
#define SHOAL_OPTS_H

#include <stddef.h>
#include <stdio.h>

#include "err.h"

enum opt_type { OPT_STR, OPT_LONG };

struct opt {
    const char *flag;     /* "--port" */
    const char *env;      /* "SHOAL_PORT" */
    enum opt_type type;
    size_t offset;        /* into the settings struct */
    size_t size;          /* OPT_STR: array size */
    long min, max;        /* OPT_LONG: inclusive bounds */
    const char *def;      /* default, as text */
    const char *help;
};

/* Table entries for a field of settings struct `type`. */
#define OPT_STR_FIELD(type, field) OPT_STR, offsetof(type, field), sizeof(((type *)0)->field), 0, 0
#define OPT_LONG_FIELD(type, field, lo, hi) OPT_LONG, offsetof(type, field), 0, lo, hi

/* Fills the fields of the struct at `out` named by the n entries of `opts`
 * the environment and argv[first_arg..].  Returns 0, 1 if --help was asked
 * for (the caller prints usage), or -1 with err naming the option. */
int opts_load(const struct opt *opts, size_t n, void *out, int argc, char **argv, int first_arg,
              struct shoal_err *err);

/* Prints one line per option: flag, variable, help and default. */
void opts_usage(const struct opt *opts, size_t n, FILE *out);

#endif
