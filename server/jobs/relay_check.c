/* relay_check.c - the server's own look at its relay (relay_check.h). */
#include "relay_check.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../common/clock.h"
#include "../../common/log.h"
#include "../store/db.h"
#include "peer_probe.h"

struct relay_check {
    pthread_mutex_t mu;
    char relay[262];                    /* host:port, --relay */
    int state;                          /* -1 not checked yet, 0 silent, 1 answered */
    char why[RELAY_CHECK_WHY_MAX];      /* state 0: why not */
    int64_t checked_ms;                 /* mono_ms() of the last check; 0: none */
    int came_back;                      /* answered after a check it did not: relay_check_forget_failures */
};

struct relay_check *relay_check_new(const char *relay)
{
    if (!relay || !relay[0])
        return NULL;
    struct relay_check *rc = calloc(1, sizeof *rc);
    if (!rc)
        return NULL;
    pthread_mutex_init(&rc->mu, NULL);
    snprintf(rc->relay, sizeof rc->relay, "%s", relay);
    rc->state = -1;
    return rc;
}

void relay_check_free(struct relay_check *rc)
{
    if (!rc)
        return;
    pthread_mutex_destroy(&rc->mu);
    free(rc);
}

const char *relay_check_address(const struct relay_check *rc)
{
    return rc ? rc->relay : NULL;
}

int relay_check_now(struct relay_check *rc)
{
    char why[RELAY_CHECK_WHY_MAX] = "";
    if (!rc)
        return -1;
    int ok = peer_probe_relay(rc->relay, RELAY_CHECK_TIMEOUT_MS, why) == PEER_PROBE_ANSWERED;
    pthread_mutex_lock(&rc->mu);
    int was = rc->state;
    rc->state = ok;
    rc->came_back |= ok && was == 0;
    snprintf(rc->why, sizeof rc->why, "%s", ok ? "" : why);
    rc->checked_ms = mono_ms();
    pthread_mutex_unlock(&rc->mu);
    if (!ok && was != 0)
        log_warn("relay %s (--relay) does not answer: %s; links between nodes that cannot connect to each other "
                 "either way go through it, and no plan that needs one is made until it answers (start "
                 "shoal-relay there, or give --relay the address where it runs)", rc->relay, why);
    else if (ok && was == 0)
        log_info("relay %s (--relay) answers again", rc->relay);
    else if (ok && was < 0)
        log_info("relay %s (--relay) answers", rc->relay);
    return ok;
}

void relay_check_due(struct relay_check *rc)
{
    if (!rc)
        return;
    pthread_mutex_lock(&rc->mu);
    int due = rc->checked_ms == 0 || mono_ms() - rc->checked_ms >= (int64_t)(RELAY_CHECK_EVERY_S * 1000);
    pthread_mutex_unlock(&rc->mu);
    if (due)
        relay_check_now(rc);
}

int relay_check_state(struct relay_check *rc, char *why, size_t why_len)
{
    if (!rc)
        return -1;
    pthread_mutex_lock(&rc->mu);
    int s = rc->state;
    if (why && why_len)
        snprintf(why, why_len, "%s", rc->why);
    pthread_mutex_unlock(&rc->mu);
    return s;
}

int relay_check_forget_failures(struct relay_check *rc, struct db_pool *db, struct shoal_err *e)
{
    if (!rc)
        return 0;
    pthread_mutex_lock(&rc->mu);
    int back = rc->came_back;
    rc->came_back = 0;
    pthread_mutex_unlock(&rc->mu);
    if (!back)
        return 0;
    const char *params[] = { rc->relay };
    json_t *gone = db_query_json(db, "WITH d AS (DELETE FROM relay_reach WHERE relay = $1 AND NOT reachable"
                                 " RETURNING node_id) SELECT count(*) FROM d", 1, params, "relay_reach", e);
    if (!gone) {
        pthread_mutex_lock(&rc->mu);
        rc->came_back = 1;   /* the next look tries again */
        pthread_mutex_unlock(&rc->mu);
        return -1;
    }
    if (json_integer_value(gone) > 0)
        log_info("relay %s (--relay) is back: %lld agents' failed probes of it, made while it was down, no longer "
                 "keep their links from it (their next probes say again)", rc->relay,
                 (long long)json_integer_value(gone));
    json_decref(gone);
    return 0;
}
