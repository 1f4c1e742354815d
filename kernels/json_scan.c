/* json_scan.c - the strict JSON cursor of json_scan.h (why it exists is
 * there).  Grammar of RFC 8259; strings must be UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF, in raw bytes or \u escapes). */
#include "json_scan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void js_init(struct jscan *j, const void *text, size_t len, const char *what, struct kern_err *err)
{
    j->start = j->p = text;
    j->end = j->p + len;
    j->depth = 0;
    j->what = what;
    j->err = err;
}

int js_fail(struct jscan *j, const char *fmt, ...)
{
    if (j->err) {
        char msg[KERN_ERR_LEN - 64]; /* room for what and where */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(j->err->msg, sizeof j->err->msg, "%s: %s at byte %zu", j->what, msg,
                 (size_t)(j->p - j->start));
    }
    return -1;
}

int js_peek(struct jscan *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
    return j->p < j->end ? *j->p : -1;
}

static int open_nested(struct jscan *j, int c)
{
    if (js_peek(j) != c)
        return js_fail(j, "expected '%c'", c);
    if (++j->depth > JS_MAX_DEPTH)
        return js_fail(j, "nested deeper than %d", JS_MAX_DEPTH);
    j->p++;
    return 0;
}

int js_object(struct jscan *j)
{
    return open_nested(j, '{');
}

int js_array(struct jscan *j)
{
    return open_nested(j, '[');
}

/* 1: another item follows (its comma taken); 0: the closing character was
 * taken; -1: neither. */
static int next_item(struct jscan *j, int *first, int close)
{
    int c = js_peek(j);
    if (c == close) {
        j->p++;
        j->depth--;
        return 0;
    }
    if (!*first) {
        if (c != ',')
            return js_fail(j, "expected ',' or '%c'", close);
        j->p++;
    }
    *first = 0;
    return 1;
}

int js_member(struct jscan *j, int *first, char *key, size_t cap, size_t *len)
{
    int r = next_item(j, first, '}');
    if (r != 1)
        return r;
    if (js_peek(j) != '"')
        return js_fail(j, "expected a member name");
    if (js_string(j, key, cap, len))
        return -1;
    if (js_peek(j) != ':')
        return js_fail(j, "expected ':' after a member name");
    j->p++;
    return 1;
}

int js_element(struct jscan *j, int *first)
{
    int r = next_item(j, first, ']');
    if (r == 1 && js_peek(j) == ']')
        return js_fail(j, "expected a value after ','");
    return r;
}

static int hex4(struct jscan *j, unsigned *v)
{
    *v = 0;
    if (j->end - j->p < 4)
        return js_fail(j, "short \\u escape");
    for (int i = 0; i < 4; i++) {
        int c = j->p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return js_fail(j, "bad \\u escape");
        *v = *v * 16 + (unsigned)d;
    }
    j->p += 4;
    return 0;
}

/* Appends n bytes to out (NULL: only counts). */
static int put(struct jscan *j, char *out, size_t cap, size_t *len, const void *b, size_t n)
{
    if (out) {
        if (*len + n >= cap)
            return js_fail(j, "string longer than %zu bytes", cap - 1);
        memcpy(out + *len, b, n);
    }
    *len += n;
    return 0;
}

/* Bytes of the UTF-8 sequence at p (1-4), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || (size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || /* overlong, surrogate */
        (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))   /* overlong, > U+10FFFF */
        return 0;
    return n;
}

static int scan_string(struct jscan *j, char *out, size_t cap, size_t *len)
{
    *len = 0;
    if (js_peek(j) != '"')
        return js_fail(j, "expected a string");
    j->p++;
    for (;;) {
        if (j->p >= j->end)
            return js_fail(j, "unterminated string");
        unsigned c = *j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20)
            return js_fail(j, "control character in a string");
        if (c != '\\') {
            size_t n = utf8_len(j->p, j->end);
            if (n == 0)
                return js_fail(j, "invalid UTF-8 in a string");
            if (put(j, out, cap, len, j->p, n))
                return -1;
            j->p += n;
            continue;
        }
        if (++j->p >= j->end)
            return js_fail(j, "unterminated string");
        c = *j->p++;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = strchr(from, (int)c);
        if (c != 'u') {
            if (!at || !c)
                return js_fail(j, "bad escape \\%c", c >= 0x20 && c < 0x7f ? (char)c : '?');
            if (put(j, out, cap, len, &to[at - from], 1))
                return -1;
            continue;
        }
        unsigned cp, lo;
        if (hex4(j, &cp))
            return -1;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return js_fail(j, "lone low surrogate in a \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                return js_fail(j, "high surrogate without its low half");
            j->p += 2;
            if (hex4(j, &lo))
                return -1;
            if (lo < 0xdc00 || lo > 0xdfff)
                return js_fail(j, "high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0)
            return js_fail(j, "\\u0000 in a string");
        unsigned char b[4];
        size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        static const unsigned char lead[5] = {0, 0, 0xc0, 0xe0, 0xf0};
        for (size_t i = n - 1; i > 0; i--, cp >>= 6)
            b[i] = (unsigned char)(0x80 | (cp & 0x3f));
        b[0] = (unsigned char)(lead[n] | cp);
        if (put(j, out, cap, len, b, n))
            return -1;
    }
    if (out)
        out[*len] = '\0';
    return 0;
}

int js_string(struct jscan *j, char *out, size_t cap, size_t *len)
{
    size_t n;
    return scan_string(j, out, cap, len ? len : &n);
}

static int digit(const struct jscan *j, const unsigned char *p)
{
    return p < j->end && *p >= '0' && *p <= '9';
}

/* The extent of a number, by the grammar; *integer: no sign, fraction or
 * exponent. */
static int scan_number(struct jscan *j, const unsigned char **start, size_t *len, int *integer)
{
    int c = js_peek(j);
    const unsigned char *p = j->p + (c == '-');
    *integer = c != '-';
    if (!digit(j, p))
        return js_fail(j, "expected a number");
    if (*p == '0' && digit(j, p + 1))
        return js_fail(j, "number with a leading zero");
    while (digit(j, p))
        p++;
    if (p < j->end && *p == '.') {
        *integer = 0;
        if (!digit(j, ++p))
            return js_fail(j, "expected a digit after '.'");
        while (digit(j, p))
            p++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < j->end && (*p == '+' || *p == '-'))
            p++;
        if (!digit(j, p))
            return js_fail(j, "expected a digit in an exponent");
        while (digit(j, p))
            p++;
    }
    *start = j->p;
    *len = (size_t)(p - j->p);
    return 0;
}

int js_uint64(struct jscan *j, uint64_t *v)
{
    const unsigned char *s;
    size_t n;
    int integer;
    if (scan_number(j, &s, &n, &integer))
        return -1;
    if (!integer)
        return js_fail(j, "expected a non-negative integer");
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++)
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (uint64_t)(s[i] - '0'), &x))
            return js_fail(j, "integer larger than 2^64 - 1");
    j->p += n;
    *v = x;
    return 0;
}

int js_number(struct jscan *j, double *v)
{
    const unsigned char *s;
    size_t n;
    int integer;
    char buf[64];
    if (scan_number(j, &s, &n, &integer))
        return -1;
    if (n >= sizeof buf)
        return js_fail(j, "number longer than %zu characters", sizeof buf - 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    double x = strtod(buf, NULL);
    if (!isfinite(x))
        return js_fail(j, "number out of range");
    j->p += n;
    *v = x;
    return 0;
}

int js_literal(struct jscan *j, int *v)
{
    static const struct { const char *word; int value; } words[] = {{"true", 1}, {"false", 0}, {"null", -1}};
    js_peek(j);
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[i].word, n) == 0) {
            j->p += n;
            *v = words[i].value;
            return 0;
        }
    }
    return js_fail(j, "expected a value");
}

int js_skip(struct jscan *j)
{
    int c = js_peek(j), first = 1, r, lit;
    size_t n;
    const unsigned char *s;
    switch (c) {
    case '{':
        if (js_object(j))
            return -1;
        while ((r = js_member(j, &first, NULL, 0, &n)) == 1)
            if (js_skip(j))
                return -1;
        return r;
    case '[':
        if (js_array(j))
            return -1;
        while ((r = js_element(j, &first)) == 1)
            if (js_skip(j))
                return -1;
        return r;
    case '"':
        return scan_string(j, NULL, 0, &n);
    case 't': case 'f': case 'n':
        return js_literal(j, &lit);
    default:
        if (scan_number(j, &s, &n, &lit))
            return -1;
        j->p += n;
        return 0;
    }
}

int js_finish(struct jscan *j)
{
    if (js_peek(j) != -1)
        return js_fail(j, "unexpected text after the value");
    return 0;
}
