/* hf_json.c - the model files' JSON through jansson (hf_json.h). */
#include "hf_json.h"
#include "../kernels/stage.h"

#include <limits.h>
#include <math.h>
#include <string.h>

json_t *hj_parse_object(const char *text, size_t len, const char *what, struct kern_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        kern_fail(err, "%s: %s at byte %d (line %d, column %d)", what, je.text, je.position, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        kern_fail(err, "%s: the text is not a JSON object", what);
        return NULL;
    }
    return root;
}

int hj_int(const json_t *v, const char *what, const char *name, int64_t lo, int64_t hi, int64_t *out,
           struct kern_err *err)
{
    if (!json_is_integer(v))
        return kern_fail(err, "%s: %s is not an integer", what, name);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return kern_fail(err, "%s: %s is %lld, not in [%lld, %lld]", what, name, (long long)x, (long long)lo,
                         (long long)hi);
    *out = x;
    return 0;
}

int hj_size(const json_t *v, const char *what, const char *name, int *out, struct kern_err *err)
{
    int64_t x = 0;
    if (hj_int(v, what, name, 1, INT_MAX, &x, err))
        return -1;
    *out = (int)x;
    return 0;
}

int hj_number(const json_t *v, const char *what, const char *name, double *out, struct kern_err *err)
{
    if (!json_is_number(v))
        return kern_fail(err, "%s: %s is not a number", what, name);
    double x = json_number_value(v);
    if (!isfinite(x))
        return kern_fail(err, "%s: %s is not finite", what, name);
    *out = x;
    return 0;
}

int hj_bool(const json_t *v, const char *what, const char *name, int *out, struct kern_err *err)
{
    if (!json_is_boolean(v))
        return kern_fail(err, "%s: %s is not true or false", what, name);
    *out = json_is_true(v);
    return 0;
}

int hj_string(const json_t *v, const char *what, const char *name, const char **out, struct kern_err *err)
{
    if (!json_is_string(v))
        return kern_fail(err, "%s: %s is not a string", what, name);
    *out = json_string_value(v);
    return 0;
}
