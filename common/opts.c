/* opts.c - table-driven settings (opts.h). */
#include "opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Stores `text` as the value of `o`; `source` names where it came from. */
static int opt_set(void *out, const struct opt *o, const char *text, const char *source, struct shoal_err *err)
{
    char *dst = (char *)out + o->offset;
    if (o->type == OPT_STR) {
        size_t n = strlen(text);
        if (n >= o->size)
            return err_set(err, 2, "invalid_config", o->flag, "%s: value for %s is too long (max %zu bytes)",
                           source, o->flag, o->size - 1);
        memcpy(dst, text, n + 1);
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < o->min || v > o->max)
        return err_set(err, 2, "invalid_config", o->flag, "%s: %s must be an integer from %ld to %ld, got '%s'",
                       source, o->flag, o->min, o->max, text);
    memcpy(dst, &v, sizeof v);
    return 0;
}

void opts_usage(const struct opt *opts, size_t n, FILE *out)
{
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "  %s VALUE  (%s)\n      %s", opts[i].flag, opts[i].env, opts[i].help);
        if (opts[i].def[0])
            fprintf(out, " [default: %s]", opts[i].def);
        fputc('\n', out);
    }
    fprintf(out, "  --help\n      print this text and exit\n");
}

int opts_load(const struct opt *opts, size_t n, void *out, int argc, char **argv, int first_arg,
              struct shoal_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (opt_set(out, &opts[i], opts[i].def, "default", err) != 0)
            return -1;
        const char *env = getenv(opts[i].env);
        if (env && opt_set(out, &opts[i], env, opts[i].env, err) != 0)
            return -1;
    }
    for (int a = first_arg; a < argc; a++) {
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0)
            return 1;
        const char *arg = argv[a];
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct opt *o = NULL;
        for (size_t i = 0; i < n; i++) {
            if (strlen(opts[i].flag) == name_len && strncmp(opts[i].flag, arg, name_len) == 0)
                o = &opts[i];
        }
        if (!o)
            return err_set(err, 2, "invalid_config", arg, "unknown option '%s'; see --help", arg);
        const char *value = eq ? eq + 1 : (a + 1 < argc ? argv[++a] : NULL);
        if (!value)
            return err_set(err, 2, "invalid_config", o->flag, "%s needs a value", o->flag);
        if (opt_set(out, o, value, "command line", err) != 0)
            return -1;
    }
    return 0;
}
