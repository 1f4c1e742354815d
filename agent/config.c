/* config.c - shoal-agent's settings table (config.h). */
#include "config.h"

#include "../common/opts.h"
#include "../common/patience.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define S(f) OPT_STR_FIELD(struct agent_config, f)
#define L(f, lo, hi) OPT_LONG_FIELD(struct agent_config, f, lo, hi)
#define DEFAULT_(n) #n
#define DEFAULT(n) DEFAULT_(n)   /* a number of patience.h as the table's default text */

static const struct opt agent_opts[] = {
    { "--server", "SHOAL_SERVER_URL", S(server_url), "http://127.0.0.1:8080", "shoal-server's base URL" },
    { "--ca-file", "SHOAL_CA_FILE", S(ca_file), "",
      "PEM CA certificate(s) to verify an https --server with; empty: the system's CA store" },
    { "--join-token", "SHOAL_JOIN_TOKEN", S(join_token), "",
      "token to register with (the server's <data-dir>/join.token); needed only the first time" },
    { "--join-token-file", "SHOAL_JOIN_TOKEN_FILE", S(join_token_file), "",
      "file holding the join token, instead of --join-token" },
    { "--name", "SHOAL_AGENT_NAME", S(name), "", "node name shown to operators; empty: the host name, '-' and 6 hex digits of the SHA-256 of the "
      "--data-dir's real path (gpu-box-3f9a1c): unique among a host's agents, since each has a data "
      "directory of its own, and the same when the agent restarts on it" },
    { "--region", "SHOAL_REGION", S(region), "", "free-form region label (e.g. eu-west)" },
    { "--listen", "SHOAL_PEER_LISTEN", S(listen), "0.0.0.0:7070",
      "peer port to bind, host:port (port 0 picks a free one)" },
    { "--advertise", "SHOAL_PEER_ADVERTISE", S(advertise), "",
      "host:port other agents dial; empty: the listen address, or the host name when it binds 0.0.0.0" },
    { "--peer-encryption", "SHOAL_PEER_ENCRYPTION", S(peer_encryption), "off",
      "off or on: on encrypts every job connection to and from this agent (AES-256-GCM; "
      "either end asking is enough); link probes stay plain" },
    { "--device", "SHOAL_DEVICE", S(device), "cpu", "cpu, cuda or cuda:N" },
    { "--data-dir", "SHOAL_AGENT_DATA_DIR", S(data_dir), "./shoal-agent-data",
      "node identity (node.json) and temporary checkpoint files" },
    { "--data-roots", "SHOAL_DATA_ROOTS", S(data_roots), "",
      "directories a job may read its data from, separated by ':'; every path a job names (data, validation, "
      "manifests, shards, globs) must lie beneath one, symlinks and '..' resolved; empty: <data-dir>/datasets "
      "only (created), so a job reads nothing its owner did not put there" },
    { "--max-memory", "SHOAL_MAX_MEMORY", S(max_memory), "0",
      "the most memory a job's stage may use here (the GPU's on cuda, else RAM), e.g. 16G; the planner "
      "sees it as the node's memory and the agent refuses a stage whose weights, gradients and AdamW "
      "moments exceed it; 0: the device's" },
    { "--threads", "SHOAL_THREADS", L(threads, 0, 4096), "0",
      "compute threads (OpenMP, OpenBLAS) a job may use here; the node registers as that many cores; "
      "0: every core" },
    { "--log-level", "SHOAL_LOG_LEVEL", S(log_level), "info", "debug, info, warn or error" },
    { "--heartbeat-interval", "SHOAL_HEARTBEAT_INTERVAL", L(heartbeat_interval, 1, 3600),
      DEFAULT(PATIENCE_HEARTBEAT_INTERVAL_S),
      "seconds between heartbeats (keep it below the server's --heartbeat-timeout less its --db-timeout + 2 s)" },
    { "--peer-timeout", "SHOAL_PEER_TIMEOUT", L(peer_timeout, 1, 86400), "120",
      "seconds a neighbour may stay silent in a step before the step fails" },
    { "--connect-timeout", "SHOAL_CONNECT_TIMEOUT", L(connect_timeout, 1, 86400), "120",
      "seconds for every neighbour of a new assignment to connect" },
    { "--probe-interval", "SHOAL_PROBE_INTERVAL", L(probe_interval, 1, 86400), "10",
      "seconds between asking the server which links to measure, while idle" },
    { "--measure-ms", "SHOAL_MEASURE_MS", L(measure_ms, 0, 60000), "500",
      "how long to time the kernels at start for the reported TFLOP/s, ms" },
};

/* "16G" -> bytes (K, M, G, T: powers of 1024; none: bytes). */
static int parse_size(const char *text, long *out)
{
    static const char units[] = "KMGT";
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    int shift = 0;
    if (errno || end == text || v < 0)
        return -1;
    if (*end) {
        const char *u = strchr(units, *end);
        if (!u || end[1])
            return -1;
        shift = 10 * (int)(u - units + 1);
    }
    if (v > (LONG_MAX >> shift))
        return -1;
    *out = (long)(v << shift);
    return 0;
}

#define N_AGENT_OPTS (sizeof agent_opts / sizeof agent_opts[0])

void agent_config_usage(FILE *out)
{
    fprintf(out, "Options of shoal-agent [run], a shoal worker: it registers with the server,\n"
                 "measures its links, and trains the pipeline stage it is assigned.  Every\n"
                 "option can also be set by its environment variable; flags win.\n\n");
    opts_usage(agent_opts, N_AGENT_OPTS, out);
}

int agent_config_load(struct agent_config *cfg, int argc, char **argv, int first_arg, struct shoal_err *err)
{
    int rc = opts_load(agent_opts, N_AGENT_OPTS, cfg, argc, argv, first_arg, err);
    if (rc == 0 && strcmp(cfg->peer_encryption, "off") != 0 && strcmp(cfg->peer_encryption, "on") != 0)
        return err_set(err, 2, "invalid_config", "--peer-encryption",
                       "--peer-encryption must be off or on, not '%s'", cfg->peer_encryption);
    if (rc == 0 && parse_size(cfg->max_memory, &cfg->max_memory_bytes) != 0)
        return err_set(err, 2, "invalid_config", "--max-memory",
                       "--max-memory must be a size such as 0, 512M, 16G or 1T (bytes without a suffix), not '%s'",
                       cfg->max_memory);
    return rc;
}
