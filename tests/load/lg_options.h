/* lg_options.h - the load generator's command line. */
#ifndef LG_OPTIONS_H
#define LG_OPTIONS_H

#include <netinet/in.h>

struct lg_options {
    char url[256];
    struct sockaddr_in server;          /* from url */
    char join_token[160], admin_token[160];
    int agents;
    double duration_s, heartbeat_s, ramp_s, warmup_s, progress_s;   /* s */
    int poll_wait_s;
    int jobs, stages, replicas, wake;   /* jobs that train; wake: one more, cancelled in the warm-up */
    int register_conns;
    int spread_sources;                 /* each agent from its own 127.1.X.Y */
    int timeline;
    const char *tokens_out, *window_mark, *label;
};

/* Fills `o` from argv (defaults for what is not given).  Prints the usage
 * or what is wrong and exits 2 on a bad command line. */
void lg_options_parse(struct lg_options *o, int argc, char **argv);

/* Prints "loadgen: " and the message, and exits 2 (a bad command line or a
 * set-up that cannot go on). */
void lg_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
