/* digests.c - dataset files' SHA-256, cached by path, size and mtime
 * (digests.h). */
#include "digests.h"

#include "../../common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct digest_entry {
    char *path;                 /* NULL: an empty slot */
    long long size, sec, nsec;
    char sha256[SHA256_HEX];
};

static uint64_t path_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static struct digest_entry *slot_of(struct digest_cache *c, const char *path)
{
    for (size_t i = path_hash(path) & (c->cap - 1);; i = (i + 1) & (c->cap - 1))
        if (!c->slots[i].path || strcmp(c->slots[i].path, path) == 0)
            return &c->slots[i];
}

/* Remembers an entry in memory (the newer one for a path wins). */
static void remember(struct digest_cache *c, const char *path, long long size, long long sec, long long nsec,
                     const char *sha)
{
    if (2 * (c->n + 1) > c->cap) {   /* grow: at most half full */
        size_t cap = c->cap ? 2 * c->cap : 64;
        struct digest_entry *old = c->slots, *grown = calloc(cap, sizeof *grown);
        if (!grown)
            return;   /* only the cache is lost */
        size_t old_cap = c->cap;
        c->slots = grown, c->cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].path)
                *slot_of(c, old[i].path) = old[i];
        free(old);
    }
    struct digest_entry *e = slot_of(c, path);
    if (!e->path) {
        if (!(e->path = strdup(path)))
            return;
        c->n++;
    }
    e->size = size, e->sec = sec, e->nsec = nsec;
    memcpy(e->sha256, sha, SHA256_HEX);
}

static void load(struct digest_cache *c)
{
    char line[PATH_MAX + 160];
    c->loaded = 1;
    FILE *f = fopen(c->file, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        char sha[SHA256_HEX + 1];
        long long size, sec, nsec;
        int at = 0;
        if (sscanf(line, "%64s %lld %lld %lld %n", sha, &size, &sec, &nsec, &at) != 4 || at == 0 ||
            strlen(sha) != 64)
            continue;
        line[strcspn(line, "\n")] = 0;
        remember(c, line + at, size, sec, nsec, sha);
    }
    fclose(f);
}

void digest_of(struct digest_cache *c, const char *path, const struct stat *sb, const void *bytes, size_t len,
               char hex[SHA256_HEX])
{
    if (c->file[0] && !c->loaded)
        load(c);
    struct digest_entry *e = c->cap ? slot_of(c, path) : NULL;
    if (e && e->path && e->size == (long long)sb->st_size && e->sec == (long long)sb->st_mtim.tv_sec &&
        e->nsec == (long long)sb->st_mtim.tv_nsec) {
        memcpy(hex, e->sha256, SHA256_HEX);
        return;
    }
    sha256_hex(bytes, len, hex);
    if (!c->file[0] || strchr(path, '\n'))
        return;
    remember(c, path, (long long)sb->st_size, (long long)sb->st_mtim.tv_sec, (long long)sb->st_mtim.tv_nsec, hex);
    char line[PATH_MAX + 160];
    int n = snprintf(line, sizeof line, "%s %lld %lld %lld %s\n", hex, (long long)sb->st_size,
                     (long long)sb->st_mtim.tv_sec, (long long)sb->st_mtim.tv_nsec, path);
    int fd = open(c->file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || n < 0 || (size_t)n >= sizeof line || write(fd, line, (size_t)n) != n)
        log_warn("cannot remember the digest of %s in %s: %s", path, c->file, strerror(errno));
    if (fd >= 0)
        close(fd);
}

void digest_cache_free(struct digest_cache *c)
{
    for (size_t i = 0; i < c->cap; i++)
        free(c->slots[i].path);
    free(c->slots);
    c->slots = NULL;
    c->n = c->cap = 0;
    c->loaded = 0;
}
