/* lg_options.c - the load generator's command line (lg_options.h). */
#include "lg_options.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LG_MAX_AGENTS (250 * 256)   /* one source address each: 127.1.X.Y, Y from 1 to 250 */

void lg_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loadgen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static void read_token_file(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f || !fgets(out, (int)n, f))
        lg_die("cannot read the token file %s", path);
    fclose(f);
    out[strcspn(out, "\r\n")] = '\0';
}

static double num_arg(const char *name, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || d < lo || d > hi)
        lg_die("%s takes a number from %g to %g, got '%s'", name, lo, hi, v);
    return d;
}

static void usage(void)
{
    fprintf(stderr,
        "usage: loadgen --url http://HOST:PORT --join-token-file F [options]\n"
        "  --agents N               simulated agents (1000)\n"
        "  --duration S             measured window, s (60)\n"
        "  --heartbeat-interval S   pause after each heartbeat's answer, s (2, the agent's default)\n"
        "  --ramp S                 agents start evenly over this many s (the longer of the heartbeat\n"
        "                           interval and the poll wait: a fleet that started at random times;\n"
        "                           1 is a restarted server's thundering herd)\n"
        "  --warmup S               not measured: the ramp, the plans, then this many s from the start\n"
        "                           (ramp + 5); its numbers are reported apart\n"
        "  --poll-wait S            the long-poll's wait, s (25, the agent's)\n"
        "  --jobs J                 jobs planned on the first nodes, which then post progress (4)\n"
        "  --stages S --replicas R  each job's shape (4 x 4)\n"
        "  --progress-interval S    between a training node's progress posts, s (1)\n"
        "  --no-wake                no wake job (one more job, cancelled during the warm-up: its\n"
        "                           nodes measure how soon a long-poll hears of a change)\n"
        "  --admin-token-file F     needed with --jobs > 0\n"
        "  --register-concurrency C registrations in flight (32)\n"
        "  --no-spread              every connection from the kernel's source address\n"
        "  --tokens-out F           write idle nodes' tokens there once registered\n"
        "  --window-mark F          create F when the measured window opens\n"
        "  --timeline               one line a second on stderr: that second's heartbeats\n"
        "  --label TEXT             copied into the JSON line\n");
    exit(2);
}

static void parse_url(struct lg_options *o)
{
    unsigned a, b, c, d, port;
    char tail;
    if (sscanf(o->url, "http://%u.%u.%u.%u:%u%c", &a, &b, &c, &d, &port, &tail) != 5 || a > 255 || b > 255 ||
        c > 255 || d > 255 || port < 1 || port > 65535)
        lg_die("--url must be http://A.B.C.D:PORT (an IPv4 address), got '%s'", o->url);
    o->server.sin_family = AF_INET;
    o->server.sin_port = htons((uint16_t)port);
    o->server.sin_addr.s_addr = htonl(a << 24 | b << 16 | c << 8 | d);
}

void lg_options_parse(struct lg_options *o, int argc, char **argv)
{
    *o = (struct lg_options){ .agents = 1000, .duration_s = 60, .heartbeat_s = 2, .ramp_s = -1, .warmup_s = -1, .progress_s = 1,
                           .poll_wait_s = 25, .jobs = 4, .stages = 4, .replicas = 4, .wake = 1, .register_conns = 32,
                           .spread_sources = 1, .label = "" };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "--no-spread") == 0) {
            o->spread_sources = 0, takes = 0;
        } else if (strcmp(a, "--no-wake") == 0) {
            o->wake = 0, takes = 0;
        } else if (strcmp(a, "--timeline") == 0) {
            o->timeline = 1, takes = 0;
        } else if (!v) {
            usage();
        } else if (strcmp(a, "--url") == 0) {
            snprintf(o->url, sizeof o->url, "%s", v);
        } else if (strcmp(a, "--join-token-file") == 0) {
            read_token_file(v, o->join_token, sizeof o->join_token);
        } else if (strcmp(a, "--admin-token-file") == 0) {
            read_token_file(v, o->admin_token, sizeof o->admin_token);
        } else if (strcmp(a, "--agents") == 0) {
            o->agents = (int)num_arg(a, v, 1, LG_MAX_AGENTS);
        } else if (strcmp(a, "--duration") == 0) {
            o->duration_s = num_arg(a, v, 1, 86400);
        } else if (strcmp(a, "--heartbeat-interval") == 0) {
            o->heartbeat_s = num_arg(a, v, 0.01, 3600);
        } else if (strcmp(a, "--ramp") == 0) {
            o->ramp_s = num_arg(a, v, 0, 3600);
        } else if (strcmp(a, "--warmup") == 0) {
            o->warmup_s = num_arg(a, v, 0, 3600);
        } else if (strcmp(a, "--poll-wait") == 0) {
            o->poll_wait_s = (int)num_arg(a, v, 1, 60);
        } else if (strcmp(a, "--jobs") == 0) {
            o->jobs = (int)num_arg(a, v, 0, 1000);
        } else if (strcmp(a, "--stages") == 0) {
            o->stages = (int)num_arg(a, v, 1, 64);
        } else if (strcmp(a, "--replicas") == 0) {
            o->replicas = (int)num_arg(a, v, 1, 64);
        } else if (strcmp(a, "--progress-interval") == 0) {
            o->progress_s = num_arg(a, v, 0.01, 3600);
        } else if (strcmp(a, "--register-concurrency") == 0) {
            o->register_conns = (int)num_arg(a, v, 1, 1024);
        } else if (strcmp(a, "--tokens-out") == 0) {
            o->tokens_out = v;
        } else if (strcmp(a, "--window-mark") == 0) {
            o->window_mark = v;
        } else if (strcmp(a, "--label") == 0) {
            if (strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(v))
                lg_die("--label takes letters, digits, '.', '_' and '-', got '%s'", v);
            o->label = v;
        } else {
            usage();
        }
        i += takes;
    }
    if (!o->url[0] || !o->join_token[0])
        usage();
    if (o->jobs > 0 && !o->admin_token[0])
        lg_die("--jobs > 0 needs --admin-token-file");
    if (o->ramp_s < 0)
        o->ramp_s = o->heartbeat_s > o->poll_wait_s ? o->heartbeat_s : o->poll_wait_s;
    if (o->warmup_s < 0)
        o->warmup_s = o->ramp_s + 5.0;
    parse_url(o);
}
