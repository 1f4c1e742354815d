#include "jsonv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

/* Longest member path in an error, bytes: it must fit struct shoal_err's
 * field whole, or it would be cut inside a character. */
#define JV_PATH_MAX 100

/* Writes "prefix.name" (or "name" at the top) into `out`, clipped to
 * JV_PATH_MAX bytes (a client's unknown member may be any length). */
static void jv_join(char *out, size_t n, const char *prefix, const char *name)
{
    if (prefix && prefix[0])
        snprintf(out, n, "%s.%s", prefix, name);
    else
        snprintf(out, n, "%s", name);
    utf8_clip(out, n - 1 < JV_PATH_MAX ? n - 1 : JV_PATH_MAX);
}

/* Formats a bound the way a person would write it: 8, 0.5, 1e+09. */
static void jv_fmt_bound(char *out, size_t n, double v)
{
    snprintf(out, n, "%.10g", v);
}

static int jv_range_error(struct shoal_err *err, const char *path, const char *what,
                          double min, double max)
{
    char lo[32], hi[32];
    jv_fmt_bound(lo, sizeof lo, min);
    jv_fmt_bound(hi, sizeof hi, max);
    return err_set(err, 422, "invalid_field", path, "%s must be %s between %s and %s",
                   path, what, lo, hi);
}

/* Checks one present, non-null member and stores it. */
static int jv_member(const json_t *v, const struct jv_field *f, const char *path,
                     void *out, struct shoal_err *err)
{
    char *dst = (char *)out + f->offset;
    switch (f->type) {
    case JV_INT: {
        if (!json_is_integer(v))
            return err_set(err, 400, "invalid_field", path, "%s must be an integer", path);
        json_int_t x = json_integer_value(v);
        if ((double)x < f->min || (double)x > f->max)
            return jv_range_error(err, path, "an integer", f->min, f->max);
        int64_t val = (int64_t)x;
        memcpy(dst, &val, sizeof val);
        return 0;
    }
    case JV_NUM: {
        if (!json_is_number(v))
            return err_set(err, 400, "invalid_field", path, "%s must be a number", path);
        double x = json_number_value(v);
        if (!isfinite(x) || x < f->min || x > f->max)
            return jv_range_error(err, path, "a number", f->min, f->max);
        memcpy(dst, &x, sizeof x);
        return 0;
    }
    case JV_STR: {
        if (!json_is_string(v))
            return err_set(err, 400, "invalid_field", path, "%s must be a string", path);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (strlen(s) != len)
            return err_set(err, 400, "invalid_field", path, "%s must not contain NUL characters", path);
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                return err_set(err, 422, "invalid_field", path,
                               "%s must not contain control characters", path);
        if ((double)len < f->min || (double)len > f->max || len >= f->size)
            return jv_range_error(err, path, "a string with a length in bytes", f->min,
                                  f->max < (double)(f->size - 1) ? f->max : (double)(f->size - 1));
        if (f->choices) {
            int ok = 0;
            for (const char *const *c = f->choices; *c; c++)
                ok |= strcmp(*c, s) == 0;
            if (!ok) {
                char list[256] = "";
                size_t used = 0;
                for (const char *const *c = f->choices; *c && used < sizeof list; c++) {
                    int w = snprintf(list + used, sizeof list - used, "%s\"%s\"",
                                     c == f->choices ? "" : ", ", *c);
                    used += w > 0 ? (size_t)w : 0;
                }
                return err_set(err, 422, "invalid_field", path, "%s must be one of %s", path, list);
            }
        }
        memcpy(dst, s, len + 1);
        return 0;
    }
    case JV_BOOL: {
        if (!json_is_boolean(v))
            return err_set(err, 400, "invalid_field", path, "%s must be true or false", path);
        int b = json_is_true(v);
        memcpy(dst, &b, sizeof b);
        return 0;
    }
    case JV_OBJ:
        if (!json_is_object(v))
            return err_set(err, 400, "invalid_field", path, "%s must be an object", path);
        return f->fields ? jv_object(v, f->fields, path, out, err) : 0;   /* NULL: the caller's to check */
    }
    return err_set(err, 500, "internal", path, "unknown field type for %s", path);
}

int jv_object(const json_t *obj, const struct jv_field *fields, const char *path,
              void *out, struct shoal_err *err)
{
    char sub[256];
    const char *key;
    json_t *val;

    if (!json_is_object(obj))
        return err_set(err, 400, "invalid_field", path, "%s must be an object",
                       path[0] ? path : "the request body");
    /* Unknown members first: a typo should be named, not reported as "missing". */
    json_object_foreach((json_t *)obj, key, val) {
        const struct jv_field *f = fields;
        while (f->name && strcmp(f->name, key) != 0)
            f++;
        if (!f->name) {
            jv_join(sub, sizeof sub, path, key);
            return err_set(err, 400, "unknown_field", sub, "unknown field %s", sub);
        }
    }
    for (const struct jv_field *f = fields; f->name; f++) {
        jv_join(sub, sizeof sub, path, f->name);
        json_t *v = json_object_get(obj, f->name);
        if (v && json_is_null(v) && f->nullable)
            v = NULL;
        if (!v) {
            if (f->required)
                return err_set(err, 400, "missing_field", sub, "%s is required", sub);
            continue;
        }
        if (jv_member(v, f, sub, out, err) != 0)
            return -1;
    }
    return 0;
}

/* Copies `s` into `out` with every byte outside printable ASCII written as
 * \xNN: jansson's reason quotes the input near the error, cut anywhere, and
 * the message must stay UTF-8 to be sent back as JSON. */
static void jv_ascii(char *out, size_t n, const char *s)
{
    size_t used = 0;
    for (; *s && used + 5 <= n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7f)
            out[used++] = (char)c;
        else
            used += (size_t)snprintf(out + used, n - used, "\\x%02x", c);
    }
    out[used] = '\0';
}

json_t *jv_parse_object(const char *data, size_t len, struct shoal_err *err)
{
    json_error_t je;
    if (len == 0) {
        err_set(err, 400, "invalid_json", NULL, "the request body is empty; send a JSON object");
        return NULL;
    }
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char text[4 * sizeof je.text];
        jv_ascii(text, sizeof text, je.text);
        err_set(err, 400, "invalid_json", NULL, "malformed JSON at line %d column %d: %s",
                je.line, je.column, text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        err_set(err, 400, "invalid_json", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}
