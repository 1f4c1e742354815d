/* test_hostport.c - common/hostport.h: every spelling of an address shoal
 * must never connect to is refused once resolved, loopback and private
 * ranges are not, and the agent's dial connects to none of them (a
 * listener on the wildcard address, which 0.0.0.0 reaches on Linux, sees
 * no connection), a name included (/etc/hosts in a mount namespace). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "../../agent/net/peer.h"
#include "../../common/hostport.h"
#include "../../server/api/bodies.h"

/* The spellings of 169.254.169.254, 0.0.0.0 and 224.0.0.1, and the
 * classes' other members; "P" is replaced by a port. */
static const char *const refused[] = {
    "0:P", "0x0:P", "0.0.0.0:P", "2852039166:P", "0251.0376.0251.0376:P", "0xa9.0xfe.0xa9.0xfe:P",
    "169.254.169.254:P", "169.254.1.1:P", "0xa9fea9fe:P", "169.16689662:P",
    "[::ffff:169.254.169.254]:P", "[::ffff:a9fe:a9fe]:P", "[::ffff:0.0.0.0]:P", "[64:ff9b::a9fe:a9fe]:P",
    "[64:ff9b:1::a9fe:a9fe]:P", "[2002:a9fe:a9fe::1]:P", "[::169.254.169.254]:P", "[fe80::1%lo]:P",
    "[fe80::1]:P", "[febf::1]:P", "[::]:P", "[ff02::1]:P", "[ff05::2]:P", "3758096385:P" /* 224.0.0.1 */,
    "224.0.0.1:P", "239.255.255.250:P", "240.0.0.1:P", "255.255.255.255:P", "4294967295:P",
    "[::ffff:224.0.0.1]:P", "[::ffff:255.255.255.255]:P",
};

static const char *const allowed[] = {
    "127.0.0.1:P", "127.0.0.2:P", "[::1]:P", "10.0.0.1:P", "172.16.5.4:P", "192.168.1.1:P", "100.64.0.1:P",
    "169.253.255.255:P", "169.255.0.1:P", "223.255.255.255:P", "8.8.8.8:P", "[2001:db8::1]:P",
    "[::ffff:127.0.0.1]:P", "[::ffff:10.1.2.3]:P", "[fec0::1]:P", "2130706433:P" /* 127.0.0.1 */,
};

static void with_port(const char *spelling, int port, char *out, size_t len)
{
    const char *p = strrchr(spelling, 'P');
    snprintf(out, len, "%.*s%d", (int)(p - spelling), spelling, port);
}

static void test_refused_spellings(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char addr[80], why[HOSTPORT_WHY_MAX] = "";
        struct addrinfo *ai = (struct addrinfo *)1;
        with_port(refused[i], 7001, addr, sizeof addr);
        enum hostport_verdict v = hostport_resolve(addr, &ai, why, sizeof why);
        if (v != HOSTPORT_REFUSED || ai)
            fail_msg("%s: verdict %d (%s), want refused", addr, (int)v, why);
        if (!strstr(why, "never connects to") || !strstr(why, addr))
            fail_msg("%s: the reason does not name it: %s", addr, why);
    }
}

static void test_classes_named(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        { "2852039166:1", "169.254.169.254 (link-local, 169.254.0.0/16" },
        { "[::ffff:a9fe:a9fe]:1", "inside an IPv4-mapped IPv6 address" },
        { "[64:ff9b::a9fe:a9fe]:1", "inside an NAT64 IPv6 address" },
        { "3758096385:1", "224.0.0.1 (multicast" },
        { "0x0:1", "0.0.0.0 (unspecified" },
        { "[fe80::1%lo]:1", "link-local, fe80::/10" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[HOSTPORT_WHY_MAX];
        struct addrinfo *ai = NULL;
        assert_int_equal(hostport_resolve(cases[i][0], &ai, why, sizeof why), HOSTPORT_REFUSED);
        if (!strstr(why, cases[i][1]))
            fail_msg("%s: got \"%s\", want it to say \"%s\"", cases[i][0], why, cases[i][1]);
    }
}

static void test_allowed_and_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        char addr[80], why[HOSTPORT_WHY_MAX] = "";
        struct addrinfo *ai = NULL;
        with_port(allowed[i], 7001, addr, sizeof addr);
        if (hostport_resolve(addr, &ai, why, sizeof why) != HOSTPORT_OK || !ai)
            fail_msg("%s refused: %s", addr, why);
        freeaddrinfo(ai);
    }
    static const char *const malformed[] = { "h", ":1", "h:", "h:0", "h:65536", "h:1x", "127.0.0.1:0", "[::1]" };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char why[HOSTPORT_WHY_MAX];
        struct addrinfo *ai = NULL;
        if (hostport_resolve(malformed[i], &ai, why, sizeof why) != HOSTPORT_MALFORMED || ai)
            fail_msg("%s taken as host:port", malformed[i]);
    }
    char why[HOSTPORT_WHY_MAX];
    struct addrinfo *ai = NULL;
    assert_int_equal(hostport_resolve("no-such-host.invalid:7001", &ai, why, sizeof why), HOSTPORT_UNRESOLVED);
    assert_null(ai);
    assert_non_null(strstr(why, "does not resolve"));
}

/* Connections the wildcard listener fd has waiting, within wait_ms. */
static int accepted(int fd, int wait_ms)
{
    int n = 0;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    while (poll(&p, 1, wait_ms) == 1) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            break;
        close(c);
        n++;
        wait_ms = 0;
    }
    return n;
}

static void test_dial_connects_to_none(void **state)
{
    (void)state;
    /* [::]:port takes IPv4 too (v4-mapped), as 0.0.0.0 would be reached */
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), off = 0, on = 1;
    struct sockaddr_in6 any = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
    socklen_t len = sizeof any;
    assert_true(fd >= 0);
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    assert_int_equal(bind(fd, (struct sockaddr *)&any, sizeof any), 0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&any, &len), 0);
    int port = ntohs(any.sin6_port);
    static const char *const spellings[] = { "0:P", "0x0:P", "0.0.0.0:P", "[::ffff:0.0.0.0]:P", "[::]:P",
                                             "[::ffff:0:0]:P", "00:P" };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        char addr[80];
        struct peer_conn c;
        struct shoal_err err;
        with_port(spellings[i], port, addr, sizeof addr);
        if (peer_dial(addr, NULL, NULL, 300, &c, &err) == 0) {
            peer_close(&c);
            fail_msg("dialled %s", addr);
        }
        if (strcmp(err.code, "address_refused") != 0)
            fail_msg("%s: %s %s, want address_refused", addr, err.code, err.message);
        assert_int_equal(accepted(fd, 50), 0);
    }
    /* the control: the listener does see a dial it may take */
    char addr[80];
    struct peer_conn c;
    struct shoal_err err;
    with_port("127.0.0.1:P", port, addr, sizeof addr);
    if (peer_dial(addr, NULL, NULL, 300, &c, &err) == 0)
        peer_close(&c);
    assert_int_equal(accepted(fd, 1000), 1);
    close(fd);
}

/* Writes `text` over the file at path in place (a bind mount follows the inode). */
static int rewrite(const char *path, const char *text)
{
    FILE *f = fopen(path, "r+");
    if (!f)
        return -1;
    int rc = ftruncate(fileno(f), 0) == 0 && fputs(text, f) >= 0 ? 0 : -1;
    return fclose(f) == 0 ? rc : -1;
}

/* In a child with a mount namespace of its own and /etc/hosts replaced:
 * names that resolve to refused addresses are refused (a dial, the
 * server's registration check), and a name that resolved to loopback is
 * refused once it resolves elsewhere.  Exit status 0: all held; 77: no
 * mount namespaces here. */
static int names_in_namespace(const char *hosts)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL) != 0)
        return 77;
    char why[HOSTPORT_WHY_MAX];
    struct addrinfo *ai = NULL;
    static const char *const bad[] = { "metadata.shoal.test:80", "zero.shoal.test:7001", "group.shoal.test:7001",
                                       "mapped.shoal.test:7001", "both.shoal.test:7001" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (hostport_resolve(bad[i], &ai, why, sizeof why) != HOSTPORT_REFUSED) {
            fprintf(stderr, "%s not refused: %s\n", bad[i], why);
            return 1;
        }
    if (body_peer_address_check("metadata.shoal.test:7001", why, sizeof why) == 0 ||
        !strstr(why, "169.254.169.254")) {
        fprintf(stderr, "registration took metadata.shoal.test: %s\n", why);
        return 1;
    }
    struct peer_conn c;
    struct shoal_err err;
    if (peer_dial("metadata.shoal.test:80", NULL, NULL, 300, &c, &err) == 0 ||
        strcmp(err.code, "address_refused") != 0) {
        fprintf(stderr, "dial of metadata.shoal.test: %s %s\n", err.code, err.message);
        return 1;
    }
    if (hostport_resolve("later.shoal.test:7001", &ai, why, sizeof why) != HOSTPORT_OK) {
        fprintf(stderr, "later.shoal.test refused while loopback: %s\n", why);
        return 1;
    }
    freeaddrinfo(ai);
    if (rewrite(hosts, "169.254.169.254 later.shoal.test\n") != 0 ||
        hostport_resolve("later.shoal.test:7001", &ai, why, sizeof why) != HOSTPORT_REFUSED) {
        fprintf(stderr, "later.shoal.test not refused once it moved: %s\n", why);
        return 1;
    }
    return 0;
}

static void test_names_resolved_then_checked(void **state)
{
    (void)state;
    char hosts[] = "/tmp/shoal-hosts-XXXXXX";
    int fd = mkstemp(hosts);
    assert_true(fd >= 0);
    static const char text[] = "169.254.169.254 metadata.shoal.test\n0.0.0.0 zero.shoal.test\n"
                               "224.0.0.1 group.shoal.test\n::ffff:169.254.169.254 mapped.shoal.test\n"
                               "127.0.0.1 both.shoal.test\n169.254.169.254 both.shoal.test\n"
                               "127.0.0.1 later.shoal.test\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(names_in_namespace(hosts));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    unlink(hosts);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        skip();   /* not root, or no mount namespaces */
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_spellings),
        cmocka_unit_test(test_classes_named),
        cmocka_unit_test(test_allowed_and_malformed),
        cmocka_unit_test(test_dial_connects_to_none),
        cmocka_unit_test(test_names_resolved_then_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
