/* http_reply.c - what a handler writes into a response (reply_json,
 * reply_error, reply_fail, reply_file) and reads of its request (the JSON
 * body, query parameters): the handlers' side of http.h, apart from the
 * engine that moves requests and connections (http.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/jsonv.h"
#include "http.h"

void reply_json(struct response *rs, int status, json_t *body)
{
    json_decref(rs->json);
    if (!body) {
        struct shoal_err e;
        err_set(&e, 500, "internal", NULL, "out of memory building the response");
        reply_error(rs, &e);
        return;
    }
    rs->json = body;
    rs->status = status;
}

/* Bytes of the well-formed UTF-8 sequence at `p` (RFC 3629: no overlong
 * forms, surrogates or code points above U+10FFFF), or 0 if there is none. */
static size_t http_utf8_seq(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4;
    else
        return 0;
    if (p[0] == 0xe0)
        lo = 0xa0;
    else if (p[0] == 0xed)
        hi = 0x9f;
    else if (p[0] == 0xf0)
        lo = 0x90;
    else if (p[0] == 0xf4)
        hi = 0x8f;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

/* Copies `src` into `dst` (n bytes, n > 0) with every byte that is not
 * part of well-formed UTF-8 replaced by '?': error messages quote what
 * the client sent (a path, say), and JSON strings must be UTF-8. */
static void http_utf8_copy(char *dst, size_t n, const char *src)
{
    const unsigned char *p = (const unsigned char *)src;
    size_t used = 0;
    while (*p && used + 1 < n) {
        size_t len = http_utf8_seq(p);
        if (len == 0 || used + len >= n) {
            dst[used++] = '?';
            p++;
            continue;
        }
        memcpy(dst + used, p, len);
        used += len;
        p += len;
    }
    dst[used] = '\0';
}

void reply_error(struct response *rs, const struct shoal_err *err)
{
    char message[sizeof err->message], field[sizeof err->field];
    http_utf8_copy(message, sizeof message, err->message);
    http_utf8_copy(field, sizeof field, err->field);
    json_t *e = json_pack("{s:s, s:s}", "code", err->code, "message", message);
    if (e && field[0])
        json_object_set_new(e, "field", json_string(field));
    json_decref(rs->json);
    rs->json = e ? json_pack("{s:o}", "error", e) : NULL;
    rs->status = err->status >= 400 && err->status < 600 ? err->status : 500;
}

void reply_fail(struct response *rs, int status, const char *code, const char *field,
                const char *fmt, ...)
{
    struct shoal_err e;
    char msg[sizeof e.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(&e, status, code, field, "%s", msg);
    reply_error(rs, &e);
}

void reply_file(struct response *rs, int status, int fd, uint64_t size, const char *content_type)
{
    json_decref(rs->json);
    rs->json = NULL;
    if (rs->has_file)
        close(rs->file_fd);
    rs->has_file = 1;
    rs->file_fd = fd;
    rs->file_size = size;
    rs->content_type = content_type;
    rs->status = status;
}

json_t *request_json(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    json_t *j = jv_parse_object(rq->body.data, rq->body.len, &e);
    if (!j)
        reply_error(rs, &e);
    return j;
}

const char *request_query(struct request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key);
}

int request_query_choice(struct request *rq, struct response *rs, const char *key,
                         const char *const *choices, const char **value)
{
    *value = request_query(rq, key);
    if (!*value)
        return 0;
    char list[256] = "";
    size_t used = 0;
    for (const char *const *c = choices; *c; c++) {
        if (strcmp(*c, *value) == 0)
            return 0;
        int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *c);
        if (w > 0 && (size_t)w < sizeof list - used)
            used += (size_t)w;
    }
    reply_fail(rs, 400, "invalid_field", key, "%s must be one of %s", key, list);
    return -1;
}

int request_query_int(struct request *rq, struct response *rs, const char *key, long long min,
                      long long max, long long *value)
{
    const char *text = request_query(rq, key);
    if (!text)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        reply_fail(rs, 400, "invalid_field", key, "%s must be an integer from %lld to %lld", key, min, max);
        return -1;
    }
    *value = v;
    return 1;
}
