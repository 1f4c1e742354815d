/* agent.h - the agent's life: identity, heartbeats, the assignment
 * long-poll, link probes while idle, and one tasklet at a time.
 *
 * Threads: the main thread runs tasklets and probes; one thread heartbeats;
 * one thread long-polls the assignment and publishes the latest one (and
 * raises the tasklet's abort flag when the assignment it runs is replaced);
 * the peer listener answers peers; the reporter posts progress. */
#ifndef SHOAL_AGENT_AGENT_H
#define SHOAL_AGENT_AGENT_H

#include <stdatomic.h>

#include "../common/err.h"
#include "config.h"

/* Runs until *stop becomes non-zero (a signal).  Returns 0 after a clean
 * stop, or -1 with err set when start-up failed (bad device, port in use,
 * server refusing the registration). */
int agent_run(const struct agent_config *cfg, atomic_int *stop, struct shoal_err *err);

#endif
