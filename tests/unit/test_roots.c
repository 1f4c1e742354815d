/* test_roots.c - agent/train/roots.h: a job's paths are opened beneath
 * the site owner's data roots or not at all, in every spelling ("..",
 * absolute and climbing symlinks, a symlinked directory, "//"), with
 * openat2 and without it; the agent's identity file is never read; globs
 * list only beneath a root; and inotify on the directory outside sees no
 * open (openat2) and no read (either way) of anything in it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../agent/train/data.h"
#include "../../agent/train/roots.h"

static char top[] = "/tmp/shoal-roots-test.XXXXXX";
static char root[300], outside[300], agent[300];

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const char *at(const char *dir, const char *name)
{
    static char buf[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(top))
        return -1;
    snprintf(root, sizeof root, "%s/root", top);
    snprintf(outside, sizeof outside, "%s/outside", top);
    snprintf(agent, sizeof agent, "%s/agent", top);
    if (mkdir(root, 0755) || mkdir(outside, 0755) || mkdir(agent, 0755) || mkdir(at(root, "sub"), 0755))
        return -1;
    put(at(root, "a.txt"), "the quick brown fox jumps over the lazy dog, again and again.");
    put(at(root, "g_2.txt"), "two two two two two two two two two two two two two two two.");
    put(at(root, "g_1.txt"), "one one one one one one one one one one one one one one one.");
    put(at(outside, "secret.txt"), "-----BEGIN PRIVATE KEY----- not for a job to read, ever at all.");
    put(at(agent, "node.json"), "{\"node_id\": 1, \"token\": \"shoal_node_0000\"}");
    if (symlink(at(outside, "secret.txt"), at(root, "abs_link")) || symlink("../outside/secret.txt", at(root, "rel_link")) ||
        symlink("../a.txt", at(root, "sub/in_link")) || symlink(outside, at(root, "dir_link")) ||
        symlink(at(outside, "secret.txt"), at(root, "g_3.txt")) || mkfifo(at(root, "fifo"), 0644) ||
        link(at(agent, "node.json"), at(root, "hard_id")))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    return system(cmd) == 0 ? 0 : -1;
}

/* Fails unless roots_open of path is refused with code, naming the path. */
static void refused(const struct data_roots *r, const char *path, const char *code, const char *says)
{
    struct shoal_err err;
    int fd = roots_open(r, path, 0, "data.path", &err);
    if (fd >= 0) {
        close(fd);
        fail_msg("%s opened (no_openat2 %d)", path, r->no_openat2);
    }
    if (strcmp(err.code, code) != 0 || !strstr(err.message, says) || !strstr(err.message, path) ||
        strcmp(err.field, "data.path") != 0)
        fail_msg("%s: %s \"%s\", want %s saying \"%s\"", path, err.code, err.message, code, says);
    if (strcmp(code, "path_refused") == 0 && !strstr(err.message, "--data-roots"))
        fail_msg("%s: the refusal does not name the flag: %s", path, err.message);
}

static void opens(const struct data_roots *r, const char *path)
{
    struct shoal_err err;
    int fd = roots_open(r, path, 0, "data.path", &err);
    if (fd < 0)
        fail_msg("%s refused (no_openat2 %d): %s", path, r->no_openat2, err.message);
    close(fd);
}

/* Every spelling, with the kernel's openat2 and with the /proc check. */
static void spellings(int no_openat2)
{
    struct data_roots r;
    struct shoal_err err;
    char path[700];
    assert_int_equal(roots_init(&r, root, agent, &err), 0);
    r.no_openat2 |= no_openat2;
    opens(&r, at(root, "a.txt"));
    opens(&r, at(root, "sub/in_link"));                          /* a link that stays inside */
    snprintf(path, sizeof path, "%s//sub/./../a.txt", root);      /* "//", "." and ".." inside */
    opens(&r, path);
    refused(&r, at(outside, "secret.txt"), "path_refused", "is not beneath any of them");
    refused(&r, "/etc/passwd", "path_refused", "is not beneath any of them");
    snprintf(path, sizeof path, "%s/../outside/secret.txt", root);
    refused(&r, path, "path_refused", "leads out of its data root");
    refused(&r, at(root, "abs_link"), "path_refused", "leads out of its data root");
    refused(&r, at(root, "rel_link"), "path_refused", "leads out of its data root");
    refused(&r, at(root, "dir_link/secret.txt"), "path_refused", "leads out of its data root");
    refused(&r, at(root, "hard_id"), "path_refused", "identity file");
    refused(&r, at(root, "missing.bin"), "invalid_dataset", "No such file");
    refused(&r, "relative/a.txt", "path_refused", "is not an absolute path");
    /* a prefix that is not a whole component is not the root */
    snprintf(path, sizeof path, "%s2/a.txt", root);
    refused(&r, path, "path_refused", "is not beneath any of them");
    roots_free(&r);
}

static void test_beneath_with_openat2(void **state)
{
    (void)state;
    spellings(0);
}

static void test_beneath_without_openat2(void **state)
{
    (void)state;
    spellings(1);
}

static void test_identity_under_a_wide_root(void **state)
{
    (void)state;
    struct data_roots r;
    struct shoal_err err;
    assert_int_equal(roots_init(&r, top, agent, &err), 0);   /* the owner lets jobs read all of top */
    opens(&r, at(outside, "secret.txt"));
    refused(&r, at(agent, "node.json"), "path_refused", "identity file");
    roots_free(&r);
}

static void test_init(void **state)
{
    (void)state;
    struct data_roots r;
    struct shoal_err err;
    char want[700], text[700];
    assert_int_equal(roots_init(&r, "", agent, &err), 0);   /* the default: <data-dir>/datasets, made */
    snprintf(want, sizeof want, "%s/datasets", agent);
    roots_text(&r, text, sizeof text);
    assert_string_equal(text, want);
    struct stat sb;
    assert_int_equal(stat(want, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    roots_free(&r);
    snprintf(want, sizeof want, "%s/:%s", root, outside);       /* two, a trailing '/' dropped */
    assert_int_equal(roots_init(&r, want, agent, &err), 0);
    roots_text(&r, text, sizeof text);
    snprintf(want, sizeof want, "%s:%s", root, outside);
    assert_string_equal(text, want);
    roots_free(&r);
    static const char *const bad[] = { "relative/dir", "/no/such/dir/anywhere" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(roots_init(&r, bad[i], agent, &err), -1);
        assert_int_equal(err.status, 2);
        assert_string_equal(err.field, "--data-roots");
    }
    assert_int_equal(roots_init(&r, at(root, "a.txt"), agent, &err), -1);   /* a file is no root */
}

static int count(void *arg, const char *path)
{
    (void)path;
    (*(int *)arg)++;
    return 0;
}

static void test_globs(void **state)
{
    (void)state;
    struct data_roots r;
    struct shoal_err err;
    struct data_source src;
    char pattern[700];
    int n = 0, found = 0;
    assert_int_equal(roots_init(&r, root, agent, &err), 0);
    snprintf(pattern, sizeof pattern, "%s/g_[12].txt", root);
    assert_int_equal(roots_glob(&r, pattern, "data.path", &found, count, &n, &err), 0);
    assert_int_equal(found, 2);
    assert_int_equal(data_open(&r, pattern, "text", "train", 256, 8, "", &src, &err), 0);
    assert_int_equal(src.n_shards, 2);
    assert_non_null(strstr(src.shards[0].path, "g_1.txt"));   /* by name */
    data_close(&src);
    snprintf(pattern, sizeof pattern, "%s/*/secret.txt", root);   /* through dir_link: no match beneath */
    assert_int_equal(data_open(&r, pattern, "text", "train", 256, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "matches no file"));
    snprintf(pattern, sizeof pattern, "%s/g_*.txt", root);         /* g_3.txt leads out */
    assert_int_equal(data_open(&r, pattern, "text", "train", 256, 8, "", &src, &err), -1);
    assert_string_equal(err.code, "path_refused");
    assert_non_null(strstr(err.message, "g_3.txt"));
    snprintf(pattern, sizeof pattern, "%s/*.txt", outside);
    assert_int_equal(roots_glob(&r, pattern, "data.path", &found, count, &n, &err), -1);
    assert_string_equal(err.code, "path_refused");
    snprintf(pattern, sizeof pattern, "%s/../outside/*.txt", root);
    assert_int_equal(roots_glob(&r, pattern, "data.path", &found, count, &n, &err), -1);
    assert_non_null(strstr(err.message, "climbs"));
    snprintf(pattern, sizeof pattern, "%s/nothing_*.bin", root);
    assert_int_equal(data_open(&r, pattern, "llmc", "train", 256, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "matches no file"));
    /* a FIFO neither blocks the open nor passes for a shard */
    assert_int_equal(data_open(&r, at(root, "fifo"), "text", "train", 256, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "not a regular file"));
    /* a directory outside is not listed, a manifest outside not read */
    assert_int_equal(data_open(&r, outside, "text", "train", 256, 8, "", &src, &err), -1);
    assert_string_equal(err.code, "path_refused");
    roots_free(&r);
}

/* What inotify saw in outside/ within wait_ms: IN_OPEN and IN_ACCESS bits. */
static uint32_t seen(int fd, int wait_ms)
{
    uint32_t mask = 0;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct pollfd p = { .fd = fd, .events = POLLIN };
    while (poll(&p, 1, wait_ms) == 1) {
        ssize_t n = read(fd, buf, sizeof buf);
        for (ssize_t i = 0; i < n;) {
            const struct inotify_event *e = (const struct inotify_event *)(buf + i);
            mask |= e->mask;
            i += (ssize_t)(sizeof *e + e->len);
        }
        wait_ms = 0;
    }
    return mask;
}

static void nothing_outside_touched(int no_openat2)
{
    struct data_roots r;
    struct shoal_err err;
    struct data_source src;
    char path[700];
    assert_int_equal(roots_init(&r, root, agent, &err), 0);
    r.no_openat2 |= no_openat2;
    int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    assert_true(in >= 0);
    assert_true(inotify_add_watch(in, outside, IN_OPEN | IN_ACCESS) >= 0);
    const char *tries[] = { at(outside, "secret.txt"), at(root, "abs_link"), at(root, "rel_link"),
                            at(root, "dir_link/secret.txt"), path };
    snprintf(path, sizeof path, "%s/../outside/secret.txt", root);
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++)
        assert_int_equal(data_open(&r, tries[i], "text", "train", 256, 8, "", &src, &err), -1);
    uint32_t mask = seen(in, 100);
    if (mask & IN_ACCESS)
        fail_msg("a file outside the root was read (no_openat2 %d)", no_openat2);
    if (!no_openat2 && (mask & IN_OPEN))
        fail_msg("a file outside the root was opened");
    /* the control: a read outside is seen */
    char buf[8];
    int fd = open(at(outside, "secret.txt"), O_RDONLY);
    assert_true(read(fd, buf, sizeof buf) > 0);
    close(fd);
    assert_true(seen(in, 1000) & IN_ACCESS);
    close(in);
    roots_free(&r);
}

static void test_nothing_outside_touched(void **state)
{
    (void)state;
    nothing_outside_touched(0);
    nothing_outside_touched(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_beneath_with_openat2),
        cmocka_unit_test(test_beneath_without_openat2),
        cmocka_unit_test(test_identity_under_a_wide_root),
        cmocka_unit_test(test_globs),
        cmocka_unit_test(test_nothing_outside_touched),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
