/* config.h - shoal-agent settings from flags and SHOAL_* environment (the
 * table in config.c prints --help). */
#ifndef SHOAL_AGENT_CONFIG_H
#define SHOAL_AGENT_CONFIG_H

#include <limits.h>
#include <stdio.h>

#include "../common/err.h"
#include "../common/token.h"

struct agent_config {
    char server_url[512];       /* http://host:port of shoal-server */
    char ca_file[4096];         /* PEM CA bundle for an https server; "" = the system's */
    char join_token[TOKEN_MAX]; /* to register the first time */
    char join_token_file[PATH_MAX];
    char name[64];              /* "" = agent_default_name: host name and data directory */
    char region[64];
    char listen[128];           /* peer port: host:port to bind */
    char advertise[262];        /* host:port peers dial; "" = derived from listen */
    char peer_encryption[8];    /* "off" or "on": encrypt job connections between agents */
    char device[32];            /* cpu, cuda, cuda:N */
    char data_dir[PATH_MAX];    /* node identity, temporary checkpoint files */
    /* the site owner's policy (docs/operations.md, What a site owner controls) */
    char data_roots[4096];      /* directories a job may read data from, ':'-separated; "" = <data-dir>/datasets */
    char max_memory[32];        /* "" or "0": the machine's; else bytes with K, M, G or T (powers of 1024) */
    long max_memory_bytes;      /* parsed: 0 = no cap */
    long threads;               /* compute threads; 0 = every core */
    char log_level[16];
    long heartbeat_interval;    /* s */
    long peer_timeout;          /* s a neighbour may stay silent mid-step */
    long connect_timeout;       /* s for every neighbour to connect */
    long probe_interval;        /* s between asking which links to measure, when idle */
    long measure_ms;            /* throughput measurement at start, ms */
};

/* Fills cfg; returns 0, 1 if --help was asked for (the caller prints the
 * usage: main.c's subcommands, then agent_config_usage), or -1 with err set. */
int agent_config_load(struct agent_config *cfg, int argc, char **argv, int first_arg, struct shoal_err *err);

/* Prints the options of `shoal-agent run`, a line or more each, to out. */
void agent_config_usage(FILE *out);

#endif
