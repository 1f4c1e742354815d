/* main.c - shoal-agent: its subcommands (one table, which --help prints),
 * then for `run`, flags, signals and the agent's life (agent.h). */
#include <curl/curl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "agent.h"
#include "config.h"
#include "tools/export.h"
#include "tools/import.h"
#include "tools/sample.h"
#include "tools/tokenize.h"

static atomic_int stop_requested;

/* Every subcommand, in the order --help lists them: a new one added here
 * is dispatched and listed, so the two cannot disagree. */
struct subcommand {
    const char *name;
    const char *args;    /* after the name, for the usage line */
    const char *what;    /* one line */
    int (*main)(int argc, char **argv, int first, FILE *out);   /* NULL: run, the agent itself */
};

static const struct subcommand subcommands[] = {
    { "run", "[options]", "be a worker: register, measure links, train what the server assigns (the default)", NULL },
    { "tokenize", "--tokenizer FILE --out DIR INPUT...", "text into token shards and dataset.json; or write "
      "llm.c's tokenizer file", tokenize_main },
    { "import", "--job ID --model FILE", "GPT-2 or Llama weights as a job's step-0 checkpoint", import_main },
    { "export", "--job ID --out DIR", "a job's model as model.safetensors and config.json", export_main },
    { "sample", "--job ID", "text generated from a job's latest checkpoint", sample_main },
};
#define N_SUBCOMMANDS (sizeof subcommands / sizeof subcommands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: shoal-agent [SUBCOMMAND] [options]\n\nSubcommands (shoal-agent SUBCOMMAND --help for each one's "
                 "options):\n");
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(out, "  %-9s %s\n            %s\n", subcommands[i].name, subcommands[i].args, subcommands[i].what);
    fprintf(out, "\n");
    agent_config_usage(out);
}

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, 1);
}

int main(int argc, char **argv)
{
    struct agent_config cfg;
    struct shoal_err err = {0};
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        size_t i = 0;
        while (i < N_SUBCOMMANDS && strcmp(argv[1], subcommands[i].name) != 0)
            i++;
        if (i == N_SUBCOMMANDS) {
            fprintf(stderr, "shoal-agent: no subcommand '%s' (", argv[1]);
            for (i = 0; i < N_SUBCOMMANDS; i++)
                fprintf(stderr, "%s%s", i ? ", " : "", subcommands[i].name);
            fprintf(stderr, "); see shoal-agent --help\n");
            return 2;
        }
        if (subcommands[i].main)
            return subcommands[i].main(argc, argv, 2, stdout);
        first = 2;
    }
    memset(&cfg, 0, sizeof cfg);
    int rc = agent_config_load(&cfg, argc, argv, first, &err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "shoal-agent: %s\n", err.message);
        return 2;
    }
    enum log_level level;
    if (log_parse_level(cfg.log_level, &level) != 0) {
        fprintf(stderr, "shoal-agent: --log-level must be debug, info, warn or error\n");
        return 2;
    }
    log_threshold = level;
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "shoal-agent: cannot initialise libcurl\n");
        return 1;
    }
    rc = agent_run(&cfg, &stop_requested, &err);
    curl_global_cleanup();
    if (rc != 0) {
        log_error("shoal-agent: %s", err.message);
        return err.status == 2 ? 2 : 1;
    }
    log_info("shoal-agent stopped");
    return 0;
}
