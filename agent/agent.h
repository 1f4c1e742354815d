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

/* The name a node registers with when --name is empty: the host name (at
 * most 56 characters), '-' and the first 6 hex digits of the SHA-256 of the
 * data directory's real path ("gpu-box-3f9a1c"), written to out (len >= 64).
 * The data directory is the agent's identity (its node.json, locked while
 * it runs): two agents on one host cannot share one, and an agent started
 * again on it is the same agent, so the name is unique on the host and
 * stays across restarts.  A peer port would be neither: port 0 picks a new
 * one at every start, and one port may be bound on two addresses. */
void agent_default_name(const char *data_dir, char *out, size_t len);

#endif
