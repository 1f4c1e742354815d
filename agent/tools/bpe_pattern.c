/* bpe_pattern.c - split patterns with Unicode's White_Space spelled out
 * (bpe_pattern.h). */
#include "bpe_pattern.h"

#include <stdio.h>
#include <string.h>

#define WS BPE_WHITE_SPACE

/* The rewritten pattern, growing in a caller's buffer; `full` once it
 * would not fit (with its NUL). */
struct pattern_out {
    char *p;
    size_t n, cap;
    int full;
};

static void put(struct pattern_out *o, const char *s, size_t len)
{
    if (o->full || len >= o->cap - o->n) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->n, s, len);
    o->n += len;
}

static void puts_(struct pattern_out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* The class written from class_at ('[') with its body from body_at to the
 * end held `\S` (left out of the body): it becomes a group that means the
 * same with White_Space spelled out. */
static void class_with_not_space(struct pattern_out *o, size_t class_at, size_t body_at, int negated)
{
    size_t body = o->n - body_at;
    char prefix[160];
    if (o->full)
        return;
    o->n = class_at;
    if (body == 0) {   /* [\S] and [^\S] */
        puts_(o, negated ? "[" WS "]" : "[^" WS "]");
        return;
    }
    /* a body that starts with '^' would negate the class it is put in */
    int caret = o->p[body_at] == '^';
    int plen = snprintf(prefix, sizeof prefix, "%s%s", negated ? "(?:(?![" : "(?:[^" WS "]|[", caret ? "\\" : "");
    const char *suffix = negated ? "])[" WS "])" : "])";
    if ((size_t)plen + body + strlen(suffix) >= o->cap - class_at) {
        o->full = 1;
        return;
    }
    memmove(o->p + class_at + plen, o->p + body_at, body);
    memcpy(o->p + class_at, prefix, (size_t)plen);
    o->n = class_at + (size_t)plen + body;
    puts_(o, suffix);
}

int bpe_pattern_white_space(const char *pattern, char *out, size_t cap, char *why, size_t why_cap)
{
    struct pattern_out o = { out, 0, cap, cap == 0 };
    size_t i = 0, len = strlen(pattern), class_at = 0, body_at = 0;
    int in_class = 0, negated = 0, not_space = 0;
    while (i < len && !o.full) {
        char c = pattern[i];
        if (c == '\\' && pattern[i + 1] == 'Q') {   /* \Q...\E: quoted, as it is */
            const char *e = strstr(pattern + i + 2, "\\E");
            size_t end = e ? (size_t)(e - pattern) + 2 : len;
            put(&o, pattern + i, end - i);
            i = end;
        } else if (c == '\\' && (pattern[i + 1] == 's' || pattern[i + 1] == 'S')) {
            int space = pattern[i + 1] == 's';
            if (in_class && space)
                puts_(&o, WS);
            else if (in_class)
                not_space = 1;   /* the class is rewritten at its ']' */
            else
                puts_(&o, space ? "[" WS "]" : "[^" WS "]");
            i += 2;
        } else if (c == '\\' && pattern[i + 1]) {   /* any other escape, whole: \\, \], \p{L}'s \p */
            put(&o, pattern + i, 2);
            i += 2;
        } else if (!in_class && c == '[') {
            class_at = o.n;
            negated = pattern[i + 1] == '^';
            put(&o, pattern + i, 1 + (size_t)negated);
            i += 1 + (size_t)negated;
            body_at = o.n;
            if (pattern[i] == ']')   /* a ']' first is itself */
                put(&o, pattern + i++, 1);
            in_class = 1;
            not_space = 0;
        } else if (in_class && c == '[' && pattern[i + 1] == ':') {   /* [:alpha:] */
            const char *e = strstr(pattern + i + 2, ":]");
            size_t end = e ? (size_t)(e - pattern) + 2 : i + 1;
            put(&o, pattern + i, end - i);
            i = end;
        } else if (in_class && c == ']') {
            if (not_space)
                class_with_not_space(&o, class_at, body_at, negated);
            else
                put(&o, "]", 1);
            in_class = 0;
            i++;
        } else {
            put(&o, pattern + i++, 1);
        }
    }
    if (o.full) {
        snprintf(why, why_cap, "with White_Space spelled out it passes %zu bytes", cap ? cap - 1 : 0);
        return -1;
    }
    out[o.n] = 0;
    return 0;
}
