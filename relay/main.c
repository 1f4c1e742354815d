/* main.c - shoal-relay: settings, the relay, stop on SIGINT/SIGTERM
 * (relay.h says what it does; docs/operations.md where it goes). */
#include <limits.h>
#include <openssl/crypto.h>
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
    char secret_file[PATH_MAX];
    char log_level[16];
};

#define STR(field) OPT_STR_FIELD(struct settings, field)
#define LONG(field, lo, hi) OPT_LONG_FIELD(struct settings, field, lo, hi)

static const struct opt opts[] = {
    { "--listen", "SHOAL_RELAY_LISTEN", STR(relay.listen), "0.0.0.0:7946",
      "host:port agents dial (both ends of every relayed link); GET /metrics and /healthz answer here too" },
    { "--secret-file", "SHOAL_RELAY_SECRET_FILE", STR(secret_file), "",
      "file holding the secret this relay shares with its server (the server's <data-dir>/relay.secret, "
      "or its --relay-secret-file): only ends with the server's ticket for a planned link are paired; required" },
    { "--max-connections", "SHOAL_RELAY_MAX_CONNECTIONS", LONG(relay.max_connections, 2, 1000000), "4096",
      "connections held at once, waiting or forwarding; more are refused" },
    { "--max-connections-per-address", "SHOAL_RELAY_MAX_CONNECTIONS_PER_ADDRESS",
      LONG(relay.max_connections_per_address, 1, 1000000), "512",
      "connections one client address (IPv6: one /64) may hold at once; more are refused, other addresses "
      "are served" },
    { "--max-waiting-per-address", "SHOAL_RELAY_MAX_WAITING_PER_ADDRESS",
      LONG(relay.max_waiting_per_address, 1, 1000000), "256",
      "of those, connections waiting for their partner at once; more are refused" },
    { "--max-links-per-job", "SHOAL_RELAY_MAX_LINKS_PER_JOB", LONG(relay.max_links_per_job, 1, 1000000), "256",
      "relayed links one job (the one its tickets name) may hold at once, waiting or forwarding" },
    { "--pair-wait", "SHOAL_RELAY_PAIR_WAIT", LONG(relay.pair_wait_s, 1, 86400), "120",
      "seconds a connection waits for the other end of its link before it is refused" },
    { "--idle-timeout", "SHOAL_RELAY_IDLE_TIMEOUT", LONG(relay.idle_timeout_s, 1, 31536000), "1800",
      "seconds a pair may carry no byte either way before it is closed (above the longest quiet a job's "
      "link has: a diloco ring edge is quiet for its inner steps)" },
    { "--job-rate", "SHOAL_RELAY_JOB_RATE", LONG(relay.job_rate_mbit, 0, 10000000), "0",
      "Mbit/s that one job's links may carry together, both ways summed; 0: no limit" },
    { "--max-job-series", "SHOAL_RELAY_MAX_JOB_SERIES", LONG(relay.max_job_series, 0, 1000000), "1000",
      "jobs with a series of their own in /metrics at once; the bytes of jobs past it count in "
      "shoal_relay_job_overflow_bytes_total" },
    { "--job-series-ttl", "SHOAL_RELAY_JOB_SERIES_TTL", LONG(relay.job_series_ttl_s, 0, 31536000), "600",
      "seconds a job's series stays in /metrics after its last link closed" },
    { "--log-level", "SHOAL_LOG_LEVEL", STR(log_level), "info", "debug, info, warn or error" },
};

int main(int argc, char **argv)
{
    struct settings s = { .secret_file = "" };
    struct shoal_err err = {0};
    struct relay *r = NULL;
    unsigned port = 0;
    sigset_t stop;
    enum log_level level = LOG_LEVEL_INFO;
    int sig, rc = opts_load(opts, sizeof opts / sizeof opts[0], &s, argc, argv, 1, &err);
    if (rc == 1) {
        printf("usage: shoal-relay [options]\n\n"
               "Joins two shoal agents that cannot connect to each other either way: both dial out to\n"
               "this relay, which pairs their connections and forwards their bytes unread. Each end\n"
               "presents its server's ticket for the link, signed with the secret of --secret-file.\n\n");
        opts_usage(opts, sizeof opts / sizeof opts[0], stdout);
        return 0;
    }
    if (rc != 0 || log_parse_level(s.log_level, &level) != 0) {
        fprintf(stderr, "shoal-relay: %s\n", rc != 0 ? err.message : "--log-level must be debug, info, warn or error");
        return 2;
    }
    log_threshold = level;
    if (!s.secret_file[0]) {
        fprintf(stderr, "shoal-relay: --secret-file is required: give it the file shoal-server wrote into its "
                        "<data-dir>/relay.secret when started with --relay (or the one its --relay-secret-file "
                        "names), so that this relay pairs only the links the server planned\n");
        return 2;
    }
    if (relay_secret_load(s.secret_file, &s.relay.secret, &err) != 0) {
        fprintf(stderr, "shoal-relay: %s (--secret-file)\n", err.message);
        return 2;
    }
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = relay_start(&s.relay, &r, &port, &err);
    OPENSSL_cleanse(&s.relay.secret, sizeof s.relay.secret);   /* the relay keeps its own copy */
    if (rc != 0) {
        log_error("relay: %s", err.message);
        return 1;
    }
    log_info("relay listening on %s (port %u): pairs wait %ld s, idle ones close after %ld s, at most %ld links a "
             "job, %ld connections an address%s", s.relay.listen, port, s.relay.pair_wait_s, s.relay.idle_timeout_s,
             s.relay.max_links_per_job, s.relay.max_connections_per_address,
             s.relay.job_rate_mbit ? ", rate-limited" : "");
    sigwait(&stop, &sig);
    log_info("relay stopping (signal %d)", sig);
    relay_stop(r);
    return 0;
}
