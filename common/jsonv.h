/* jsonv.h - table-driven validation of JSON objects into C structs.
 *
 * A request body is described by a table of fields; jv_object checks every
 * member against it (no unknown members, right types, values in range,
 * required members present) and copies the values into a flat C struct at
 * the offsets the table gives.  Nested objects use sub-tables that write into
 * the same struct.  Members that are absent keep whatever the caller put in
 * the struct beforehand, which is how defaults are given.
 *
 * Strings never hold control characters (tabs and newlines included): no
 * field of the API needs them and logs and dashboards are safer without.
 *
 * On the first bad member it fails with status 400 (or 422 for values out of
 * range), code "invalid_field", "missing_field" or "unknown_field", and the
 * dotted path of the member ("model.d_model", "samples[2].to"). */
#ifndef SHOAL_JSONV_H
#define SHOAL_JSONV_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum jv_type {
    JV_INT,   /* JSON integer -> int64_t; min/max bound the value */
    JV_NUM,   /* JSON number  -> double;  min/max bound the value */
    JV_STR,   /* JSON string  -> char[size]; min/max bound the length in bytes */
    JV_BOOL,  /* JSON boolean -> int (0 or 1) */
    JV_OBJ,   /* JSON object, checked against `fields` */
};

struct jv_field {
    const char *name;               /* NULL ends a table */
    enum jv_type type;
    int required;                   /* 1: absence is an error */
    int nullable;                   /* 1: JSON null is accepted and means "absent" */
    double min, max;                /* inclusive bounds, see enum jv_type */
    size_t offset;                  /* of the destination in the output struct */
    size_t size;                    /* JV_STR: size of the char array, bytes */
    const char *const *choices;     /* JV_STR: allowed values, NULL-terminated, or NULL */
    const struct jv_field *fields;  /* JV_OBJ: the nested table; NULL: any object, which the
                                       caller checks itself (a job's model: model_json.h) */
};

/* Validates `obj` against `fields` and fills `out`.  `path` is the prefix for
 * error fields ("" at the top).  Returns 0, or -1 with `err` set; on failure
 * `out` may be partly written, so callers discard it. */
int jv_object(const json_t *obj, const struct jv_field *fields, const char *path,
              void *out, struct shoal_err *err);

/* Parses `len` bytes of JSON into a new reference (caller json_decref's it),
 * rejecting duplicate keys and anything but an object at the top.
 * Returns NULL with `err` set (400 "invalid_json", naming line and column). */
json_t *jv_parse_object(const char *data, size_t len, struct shoal_err *err);

#endif
