/* main.c - shoal-relay: settings, the relay, stop on SIGINT/SIGTERM
 * (relay.h says what it does; docs/operations.md where it goes). */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "../common/opts.h"
#include "relay.h"

struct settings {
    struct relay_config relay;
    char log_level[16];
};

#define STR(field) OPT_STR_FIELD(struct settings, field)
#define LONG(field, lo, hi) OPT_LONG_FIELD(struct settings, field, lo, hi)

static const struct opt opts[] = {
    { "--listen", "SHOAL_RELAY_LISTEN", STR(relay.listen), "0.0.0.0:7946",
      "host:port agents dial (both ends of every relayed link); GET /metrics and /healthz answer here too" },
    { "--max-connections", "SHOAL_RELAY_MAX_CONNECTIONS", LONG(relay.max_connections, 2, 1000000), "4096",
      "connections held at once, waiting or forwarding; more are refused" },
    { "--max-links-per-job", "SHOAL_RELAY_MAX_LINKS_PER_JOB", LONG(relay.max_links_per_job, 1, 1000000), "256",
      "relayed links one job may hold at once (waiting or forwarding)" },
    { "--pair-wait", "SHOAL_RELAY_PAIR_WAIT", LONG(relay.pair_wait_s, 1, 86400), "120",
      "seconds a connection waits for the other end of its link before it is refused" },
    { "--job-rate", "SHOAL_RELAY_JOB_RATE", LONG(relay.job_rate_mbit, 0, 10000000), "0",
      "Mbit/s that one job's links may carry together, both ways summed; 0: no limit" },
    { "--log-level", "SHOAL_LOG_LEVEL", STR(log_level), "info", "debug, info, warn or error" },
};

int main(int argc, char **argv)
{
    struct settings s;
    struct shoal_err err = {0};
    struct relay *r = NULL;
    unsigned port = 0;
    sigset_t stop;
    enum log_level level = LOG_LEVEL_INFO;
    int sig, rc = opts_load(opts, sizeof opts / sizeof opts[0], &s, argc, argv, 1, &err);
    if (rc == 1) {
        printf("usage: shoal-relay [options]\n\n"
               "Joins two shoal agents that cannot connect to each other either way: both dial out to\n"
               "this relay, which pairs their connections and forwards their bytes unread.\n\n");
        opts_usage(opts, sizeof opts / sizeof opts[0], stdout);
        return 0;
    }
    if (rc != 0 || log_parse_level(s.log_level, &level) != 0) {
        fprintf(stderr, "shoal-relay: %s\n", rc != 0 ? err.message : "--log-level must be debug, info, warn or error");
        return 2;
    }
    log_threshold = level;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (relay_start(&s.relay, &r, &port, &err) != 0) {
        log_error("relay: %s", err.message);
        return 1;
    }
    log_info("relay listening on %s (port %u): pairs wait %ld s, at most %ld links a job%s", s.relay.listen, port,
             s.relay.pair_wait_s, s.relay.max_links_per_job, s.relay.job_rate_mbit ? ", rate-limited" : "");
    sigwait(&stop, &sig);
    log_info("relay stopping (signal %d)", sig);
    relay_stop(r);
    return 0;
}
