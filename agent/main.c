/* main.c - shoal-agent: flags, signals, then the agent's life (agent.h);
 * `shoal-agent sample` prints text from a job's checkpoint (sample.h),
 * `shoal-agent export` writes its model as safetensors and llm.c (export.h),
 * `shoal-agent import` starts a job from GPT-2 weights (import.h),
 * `shoal-agent tokenize` turns text into token shards (tokenize.h). */
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

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, 1);
}

int main(int argc, char **argv)
{
    struct agent_config cfg;
    struct shoal_err err = {0};
    if (argc > 1 && strcmp(argv[1], "sample") == 0)
        return sample_main(argc, argv, 2, stdout);
    if (argc > 1 && strcmp(argv[1], "export") == 0)
        return export_main(argc, argv, 2, stdout);
    if (argc > 1 && strcmp(argv[1], "import") == 0)
        return import_main(argc, argv, 2, stdout);
    if (argc > 1 && strcmp(argv[1], "tokenize") == 0)
        return tokenize_main(argc, argv, 2, stdout);
    int first = argc > 1 && strcmp(argv[1], "run") == 0 ? 2 : 1;
    memset(&cfg, 0, sizeof cfg);
    int rc = agent_config_load(&cfg, argc, argv, first, &err);
    if (rc == 1)
        return 0;
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
