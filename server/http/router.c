#include "router.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const route_lane_names[ROUTE_LANES] = { [LANE_DATABASE] = "database", [LANE_INLINE] = "inline",
                                                   [LANE_PROBE] = "probe" };

/* Drops the optional "/v1" prefix and one trailing slash. */
static void router_normalise(const char *path, char *out, size_t n)
{
    if (strncmp(path, "/v1", 3) == 0 && (path[3] == '/' || path[3] == '\0'))
        path += 3;
    snprintf(out, n, "%s", path[0] ? path : "/");
    size_t len = strlen(out);
    if (len > 1 && out[len - 1] == '/')
        out[len - 1] = '\0';
}

/* Parses a number segment of `len` bytes: 1..18 digits, min..max ({id}:
 * 1 up, a bigint row id; {n}: 0..2^31-1, a step or a stage, which the
 * database keeps as int: larger is a bad id here, not an error there). */
static int router_parse_id(const char *s, size_t len, long long min, long long max, int64_t *out)
{
    char tmp[20];
    if (len == 0 || len > 18)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    long long v = strtoll(tmp, NULL, 10);
    if (v < min || v > max)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* Matches `path` against one pattern segment by segment.  Returns 1 on a
 * match, 0 if not, -1 if the shape matches but an id is bad. */
static int router_match_one(const char *pattern, const char *path, struct route_match *m)
{
    m->n_ids = 0;
    while (*pattern && *path) {
        if (*pattern != '/' || *path != '/')
            return 0;
        pattern++;
        path++;
        size_t plen = strcspn(pattern, "/");
        size_t slen = strcspn(path, "/");
        int is_id = plen == 4 && strncmp(pattern, "{id}", 4) == 0;
        int is_n = plen == 3 && strncmp(pattern, "{n}", 3) == 0;
        if (is_id || is_n) {
            if (m->n_ids == ROUTE_MAX_IDS ||
                router_parse_id(path, slen, is_id ? 1 : 0, is_id ? LLONG_MAX : INT32_MAX, &m->ids[m->n_ids]) != 0) {
                /* The rest must still match for this to be a bad id rather than a miss. */
                struct route_match rest;
                return router_match_one(pattern + plen, path + slen, &rest) != 0 ? -1 : 0;
            }
            m->n_ids++;
        } else if (plen != slen || strncmp(pattern, path, plen) != 0) {
            return 0;
        }
        pattern += plen;
        path += slen;
    }
    return *pattern == '\0' && *path == '\0';
}

int router_match(const struct route *table, size_t n, const char *method,
                 const char *path, struct route_match *m, struct shoal_err *err)
{
    char norm[512];
    int path_known = 0, bad_id = 0, bad_index = -1;
    size_t used = 0;

    m->index = -1;
    m->allow[0] = '\0';
    if (strlen(path) >= sizeof norm)
        return 404;
    router_normalise(path, norm, sizeof norm);
    for (size_t i = 0; i < n; i++) {
        struct route_match tmp;
        char pattern[256];
        router_normalise(table[i].pattern, pattern, sizeof pattern);
        int r = router_match_one(pattern, norm, &tmp);
        if (r == -1) {
            bad_id = 1;
            if (bad_index < 0 && strcmp(table[i].method, method) == 0)
                bad_index = (int)i;
        }
        if (r != 1)
            continue;
        if (strcmp(table[i].method, method) == 0) {
            *m = tmp;
            m->index = (int)i;
            m->allow[0] = '\0';
            return 0;
        }
        path_known = 1;
        int w = snprintf(m->allow + used, sizeof m->allow - used, "%s%s", used ? ", " : "",
                         table[i].method);
        if (w > 0 && (size_t)w < sizeof m->allow - used)
            used += (size_t)w;
    }
    if (path_known)
        return 405;
    if (bad_id) {
        m->index = bad_index;
        m->n_ids = 0;
        err_set(err, 400, "invalid_id", "id", "ids are positive integers (steps and stages non-negative); '%s' has one that is not", path);
        return 400;
    }
    return 404;
}
