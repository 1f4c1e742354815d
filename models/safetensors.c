/* safetensors.c - the safetensors container (safetensors.h): its header
 * read and checked whatever model it holds, and a file written. */
#include "safetensors.h"
#include "hf_json.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DIMS 8

static const struct {
    const char *name;
    unsigned size; /* bytes */
} dtypes[] = {
    {"F32", 4}, {"F16", 2}, {"BF16", 2}, /* the three read; in enum io_dtype's order */
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
    {"I32", 4}, {"U32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
};
#define N_DTYPES (int)(sizeof dtypes / sizeof dtypes[0])

const char *st_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < N_DTYPES ? dtypes[dtype].name : "?";
}

const char *st_shape_str(int ndim, const uint64_t dim[2], char *buf, size_t cap)
{
    if (ndim == 0)
        snprintf(buf, cap, "[]");
    else if (ndim == 1)
        snprintf(buf, cap, "[%llu]", (unsigned long long)dim[0]);
    else
        snprintf(buf, cap, "[%llu,%llu%s]", (unsigned long long)dim[0], (unsigned long long)dim[1],
                 ndim > 2 ? ",..." : "");
    return buf;
}

int st_header_read(const struct io_src *src, const char *who, char **text, uint64_t *hlen, uint64_t *data_len,
                   struct kern_err *err)
{
    char *t;
    if (src->size < 8)
        return kern_fail(err, "%s: the file is %llu bytes, shorter than its 8-byte header size", who,
                         (unsigned long long)src->size);
    if (io_read(src, 0, hlen, 8, err))
        return io_fail_in(err, who);
    if (*hlen > KERN_SAFETENSORS_HEADER_MAX || *hlen > src->size - 8)
        return kern_fail(err, "%s: the header claims %llu bytes; the file has %llu after the size, and the limit "
                         "is %u", who, (unsigned long long)*hlen, (unsigned long long)(src->size - 8),
                         KERN_SAFETENSORS_HEADER_MAX);
    *data_len = src->size - 8 - *hlen;
    if (!(t = malloc(*hlen + 1)))
        return kern_fail(err, "%s: out of memory for a %llu-byte header", who, (unsigned long long)*hlen);
    if (io_read(src, 8, t, *hlen, err)) {
        free(t);
        return io_fail_in(err, who);
    }
    t[*hlen] = '\0';
    *text = t;
    return 0;
}

#define WHAT "safetensors header"

/* An array of at most max non-negative integers into v[]; *n of them. */
static int read_uints(const json_t *a, const char *name, const char *member, int max, uint64_t *v, int *n,
                      struct kern_err *err)
{
    size_t i;
    const json_t *x;
    if (!json_is_array(a))
        return kern_fail(err, WHAT ": tensor '%s': %s is not an array", name, member);
    if (json_array_size(a) > (size_t)max)
        return kern_fail(err, WHAT ": tensor '%s': more than %d %s", name, max,
                         strcmp(member, "shape") == 0 ? "dimensions" : "offsets");
    json_array_foreach(a, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return kern_fail(err, WHAT ": tensor '%s': %s holds something other than a non-negative integer",
                             name, member);
        v[i] = (uint64_t)json_integer_value(x);
    }
    *n = (int)json_array_size(a);
    return 0;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, nothing else. */
static int parse_entry(const json_t *o, struct st_entry *e, const char *name, uint64_t data_len,
                       struct kern_err *err)
{
    const char *key, *dtype;
    const json_t *v, *shape = json_object_get(o, "shape"), *offsets = json_object_get(o, "data_offsets");
    uint64_t dim[MAX_DIMS], off[2], bytes;
    int n, n_off;
    if (!json_is_object(o))
        return kern_fail(err, WHAT ": tensor '%s' is not an object", name);
    json_object_foreach((json_t *)o, key, v)
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 && strcmp(key, "data_offsets") != 0)
            return kern_fail(err, WHAT ": tensor '%s': unknown member '%s'", name, key);
    if (!(v = json_object_get(o, "dtype")) || !shape || !offsets)
        return kern_fail(err, WHAT ": tensor '%s' lacks %s", name, !v ? "its dtype" : !shape ? "its shape"
                                                                                             : "its data_offsets");
    if (hj_string(v, WHAT, "dtype", &dtype, err))
        return -1;
    for (e->dtype = 0; e->dtype < N_DTYPES && strcmp(dtypes[e->dtype].name, dtype) != 0; e->dtype++)
        ;
    if (e->dtype == N_DTYPES)
        return kern_fail(err, WHAT ": tensor '%s': unknown dtype '%s'", name, dtype);
    if (read_uints(shape, name, "shape", MAX_DIMS, dim, &n, err) ||
        read_uints(offsets, name, "data_offsets", 2, off, &n_off, err))
        return -1;
    if (n_off != 2)
        return kern_fail(err, WHAT ": tensor '%s': data_offsets is not [begin, end]", name);
    e->ndim = n;
    e->numel = 1;
    for (int i = 0; i < n; i++)
        if (__builtin_mul_overflow(e->numel, dim[i], &e->numel))
            return kern_fail(err, WHAT ": tensor '%s': its shape overflows 64 bits", name);
    e->dim[0] = n > 0 ? dim[0] : 0;
    e->dim[1] = n > 1 ? dim[1] : 0;
    e->begin = off[0];
    e->end = off[1];
    if (e->begin > e->end || e->end > data_len)
        return kern_fail(err, WHAT ": tensor '%s': data_offsets [%llu,%llu] are not inside the %llu bytes of data",
                         name, (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)data_len);
    if (__builtin_mul_overflow(e->numel, (uint64_t)dtypes[e->dtype].size, &bytes) || bytes != e->end - e->begin)
        return kern_fail(err, WHAT ": tensor '%s': %llu bytes of data for %llu elements of %s", name,
                         (unsigned long long)(e->end - e->begin), (unsigned long long)e->numel,
                         dtypes[e->dtype].name);
    return 0;
}

/* __metadata__: an object of strings, kept by nobody here. */
static int check_metadata(const json_t *meta, struct kern_err *err)
{
    const char *key;
    const json_t *v;
    if (!json_is_object(meta))
        return kern_fail(err, WHAT ": __metadata__ is not an object");
    json_object_foreach((json_t *)meta, key, v)
        if (!json_is_string(v))
            return kern_fail(err, WHAT ": __metadata__ member '%s' is not a string", key);
    return 0;
}

int st_parse_header(const char *text, size_t len, uint64_t data_len, st_classify_fn classify, void *ctx,
                    const char *model, struct st_entry **out, int *n, struct kern_err *err)
{
    struct st_entry *e = NULL;
    const char *key;
    json_t *v, *root = NULL;
    int count = 0, rc = -1;

    if (len == 0 || text[0] != '{') {
        kern_fail(err, WHAT ": the header does not start with '{'");
        goto out;
    }
    if (!(root = hj_parse_object(text, len, WHAT, err)))
        goto out;
    size_t cap = json_object_size(root);
    if (!(e = calloc(cap ? cap : 1, sizeof *e))) {
        kern_fail(err, "safetensors: out of memory for %zu header entries", cap);
        goto out;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (check_metadata(v, err))
                goto out;
            continue;
        }
        if (strlen(key) >= ST_NAME_MAX) {
            kern_fail(err, WHAT ": a tensor name of %zu bytes, over the %d this reads", strlen(key), ST_NAME_MAX - 1);
            goto out;
        }
        snprintf(e[count].name, sizeof e[count].name, "%s", key);
        if (classify(key, ctx, &e[count].kind, &e[count].layer)) {
            kern_fail(err, WHAT ": tensor '%s' is not part of %s", key, model);
            goto out;
        }
        if (parse_entry(v, &e[count++], key, data_len, err))
            goto out;
    }
    *out = e;
    *n = count;
    e = NULL;
    rc = 0;
out:
    free(e);
    json_decref(root);
    return rc;
}

static int by_begin(const void *a, const void *b)
{
    const struct st_entry *x = *(const struct st_entry *const *)a, *y = *(const struct st_entry *const *)b;
    return x->begin != y->begin ? (x->begin > y->begin ? 1 : -1) : (x->end > y->end) - (x->end < y->end);
}

int st_check_coverage(struct st_entry *e, int n, uint64_t data_len, struct kern_err *err)
{
    struct st_entry **order = malloc(((size_t)n + 1) * sizeof *order);
    uint64_t at = 0;
    int rc = -1;
    if (!order)
        return kern_fail(err, "safetensors: out of memory");
    for (int i = 0; i < n; i++)
        order[i] = &e[i];
    qsort(order, (size_t)n, sizeof *order, by_begin);
    for (int i = 0; i < n; i++) {
        if (order[i]->begin < at) {
            kern_fail(err, "safetensors: tensors %s and %s overlap in the data", order[i - 1]->name,
                      order[i]->name);
            goto out;
        }
        if (order[i]->begin > at) {
            kern_fail(err, "safetensors: bytes [%llu,%llu) of the data belong to no tensor",
                      (unsigned long long)at, (unsigned long long)order[i]->begin);
            goto out;
        }
        at = order[i]->end;
    }
    if (at != data_len) {
        kern_fail(err, "safetensors: the data is %llu bytes and its tensors end at byte %llu",
                  (unsigned long long)data_len, (unsigned long long)at);
        goto out;
    }
    rc = 0;
out:
    free(order);
    return rc;
}

uint16_t st_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)   /* NaN: kept a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);         /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

int st_write(FILE *f, const struct st_out *t, int n, int bf16, const char *who, struct kern_err *err)
{
    char *text = NULL;
    size_t text_len = 0, widest = 0, largest = 0;
    float *scratch = NULL;
    uint16_t *half = NULL;
    FILE *h = NULL;
    int rc = -1;
    const char *dtype = bf16 ? "BF16" : "F32";
    unsigned size = bf16 ? 2 : 4;   /* bytes an element */

    for (int i = 0; i < n; i++) {
        if (t[i].transpose && t[i].rows * t[i].cols > widest)
            widest = t[i].rows * t[i].cols;
        if (t[i].rows * t[i].cols > largest)
            largest = t[i].rows * t[i].cols;
    }
    if ((widest && !(scratch = malloc(widest * sizeof *scratch))) ||
        (bf16 && largest && !(half = malloc(largest * sizeof *half))) || !(h = open_memstream(&text, &text_len))) {
        kern_fail(err, "%s: out of memory", who);
        goto out;
    }
    fprintf(h, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)size * t[i].rows * t[i].cols;
        if (t[i].ndim == 2)
            fprintf(h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%llu,%llu]", t[i].name, dtype,
                    (unsigned long long)t[i].rows, (unsigned long long)t[i].cols);
        else
            fprintf(h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%llu]", t[i].name, dtype,
                    (unsigned long long)t[i].cols);
        fprintf(h, ",\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + bytes));
        at += bytes;
    }
    fputc('}', h);
    while (ftell(h) % 8 != 0) /* as safetensors pads: the data starts 8-byte aligned */
        fputc(' ', h);
    if (fclose(h) != 0) {
        h = NULL;
        kern_fail(err, "%s: out of memory", who);
        goto out;
    }
    h = NULL;
    uint64_t hlen = text_len;
    if (io_write(f, &hlen, 8, who, err) || io_write(f, text, text_len, who, err))
        goto out;
    for (int i = 0; i < n; i++) {
        const float *src = t[i].data;
        if (t[i].transpose) { /* (cols, rows) to (rows, cols) */
            for (size_t r = 0; r < t[i].rows; r++)
                for (size_t c = 0; c < t[i].cols; c++)
                    scratch[r * t[i].cols + c] = src[c * t[i].rows + r];
            src = scratch;
        }
        size_t count = t[i].rows * t[i].cols;
        if (bf16)
            for (size_t k = 0; k < count; k++)
                half[k] = st_bf16(src[k]);
        if (io_write(f, bf16 ? (const void *)half : (const void *)src, count * size, who, err))
            goto out;
    }
    if (fflush(f) != 0) {
        kern_fail(err, "%s: write failed", who);
        goto out;
    }
    rc = 0;
out:
    if (h)
        fclose(h);
    free(text);
    free(scratch);
    free(half);
    return rc;
}
