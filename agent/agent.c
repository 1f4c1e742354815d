/* agent.c - the agent's life (agent.h). */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/dirlock.h"
#include "../common/patience.h"
#include "../common/log.h"
#include "../common/sha256.h"
#include "../common/utf8.h"
#include "train/assign.h"
#include "train/roots.h"
#include "control/control.h"
#include "hw.h"
#include "train/live.h"
#include "net/peer.h"
#include "net/probe.h"
#include "control/report.h"
#include "train/train.h"

#define REPORT_QUEUE 4096           /* progress posts held while the server is away */
#define PROBE_TIMEOUT_MS 10000
#define AGENT_RELAY_RETRY_S 30.0    /* s before a relay whose probe failed is probed again, at most */
#define HEARTBEAT_SLICE_S 0.05      /* how soon a heartbeat follows a tasklet's end */

struct agent {
    const struct agent_config *cfg;
    atomic_int *stop;
    struct ctl ctl;
    struct peer_listener *listener;
    char advertise[ASSIGN_ADDR_MAX];
    struct kern_device dev;
    struct hw_facts hw;
    int64_t node_id;
    struct reporter *reporter;
    pthread_t heartbeat_thread, poll_thread;
    int heartbeat_started, poll_started;
    /* shared with the threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t changed;
    json_t *assignment;             /* latest answer's "assignment": null or an object */
    long generation;                /* bumped on every change of it */
    int64_t running_job;            /* the tasklet being trained; 0: none */
    uint32_t running_epoch;
    atomic_int abort;               /* raised when the running tasklet's assignment is replaced */
    atomic_llong step;
    atomic_int beat_now;            /* raised when a tasklet ends: heartbeat at once */
    struct live_held held;          /* the stage an unfinished tasklet left (live.h) */
    int dir_lock;                   /* the data directory's lock (common/dirlock.h); -1: none */
    double relay_retry_at;          /* ctl_now(); a relay that failed its probe is not tried before */
    struct data_roots roots;        /* the owner's --data-roots, open (train/roots.h) */
};

/* (job, epoch) of an "assignment" value; job 0 for null. */
/* What identifies an assignment: its job and plan epoch, and whether it
 * may run (0 while the job is recovering: its epoch is being replaced). */
static void assignment_key(const json_t *a, int64_t *job, uint32_t *epoch, int *runnable)
{
    const char *state = json_string_value(json_object_get(a, "state"));
    *job = json_is_object(a) ? json_integer_value(json_object_get(a, "job_id")) : 0;
    *epoch = json_is_object(a) ? (uint32_t)json_integer_value(json_object_get(a, "epoch")) : 0;
    *runnable = *job > 0 && !(state && strcmp(state, "recovering") == 0);
}

/* ---- identity ---------------------------------------------------------- */

static void identity_path(const struct agent *ag, char *out, size_t len)
{
    snprintf(out, len, "%s/node.json", ag->cfg->data_dir);
}

/* Writes node.json (0600) through a temporary file, so a crash leaves the
 * old identity or the new one, never half of one. */
static int identity_save(const struct agent *ag, const char *token, struct shoal_err *err)
{
    char path[PATH_MAX + 16], tmp[PATH_MAX + 32];
    int rc = -1;
    identity_path(ag, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    json_t *doc = json_pack("{s:s, s:I, s:s}", "server", ag->cfg->server_url, "node_id", (json_int_t)ag->node_id,
                            "token", token);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !doc || json_dumpfd(doc, fd, JSON_INDENT(2)) != 0 || fsync(fd) != 0) {
        err_set(err, 500, "io_error", NULL, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        err_set(err, 500, "io_error", NULL, "cannot rename %s: %s", tmp, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    json_decref(doc);
    return rc;
}

static int join_token(const struct agent_config *cfg, char out[TOKEN_MAX], struct shoal_err *err)
{
    return ctl_token_load(cfg->join_token, cfg->join_token_file,
                          "this agent has no node identity yet and no join token: pass --join-token or "
                          "--join-token-file (the server's <data-dir>/join.token)", out, err);
}

/* The site owner's policy as the server keeps it (GET /v1/nodes "policy";
 * the planner caps the node's memory and cores by it and plans no job
 * whose data lies outside its roots): new reference, or NULL. */
static json_t *policy_json(const struct agent *ag)
{
    json_t *roots = json_array();
    for (int i = 0; roots && i < ag->roots.n; i++)
        json_array_append_new(roots, json_string(ag->roots.root[i].path));
    return json_pack("{s:o, s:o, s:o}", "data_roots", roots ? roots : json_null(), "max_memory_bytes",
                     ag->cfg->max_memory_bytes > 0 ? json_integer(ag->cfg->max_memory_bytes) : json_null(),
                     "threads", ag->cfg->threads > 0 ? json_integer(ag->cfg->threads) : json_null());
}

void agent_default_name(const char *data_dir, char *out, size_t len)
{
    char host[65], hex[SHA256_HEX];
    if (gethostname(host, sizeof host) != 0 || !host[0])
        snprintf(host, sizeof host, "agent");
    host[sizeof host - 1] = '\0';
    char *real = realpath(data_dir, NULL);
    const char *dir = real ? real : data_dir;
    sha256_hex(dir, strlen(dir), hex);
    free(real);
    /* 56 + 1 + 6: within the server's 63 characters of a name */
    snprintf(out, len, "%.56s-%.6s", host, hex);
}

static int agent_register(struct agent *ag, struct shoal_err *err)
{
    char name[64];
    json_t *ans = NULL;
    int rc = -1;
    if (join_token(ag->cfg, ag->ctl.token, err) != 0)
        return -1;
    if (ag->cfg->name[0])
        snprintf(name, sizeof name, "%s", ag->cfg->name);
    else
        agent_default_name(ag->cfg->data_dir, name, sizeof name);
    json_t *body = json_pack("{s:s, s:s, s:s, s:o, s:o}", "name", name,
                             "peer_address", ag->advertise, "region", ag->cfg->region, "hardware", hw_json(&ag->hw),
                             "policy", policy_json(ag));
    if (ctl_call_retry(&ag->ctl, "POST", "/v1/agent/register", body, 30, 0, &ans, err) != 0)
        goto out;
    const char *token = json_string_value(json_object_get(ans, "token"));
    ag->node_id = json_integer_value(json_object_get(ans, "node_id"));
    if (!token || !token_well_formed(token) || ag->node_id < 1) {
        err_set(err, 502, "bad_answer", NULL, "the server's registration answer has no node id or token");
        goto out;
    }
    snprintf(ag->ctl.token, sizeof ag->ctl.token, "%s", token);
    rc = identity_save(ag, token, err);
    log_info("registered node=%lld name=%s peer_address=%s tflops=%.4f", (long long)ag->node_id, name,
             ag->advertise, ag->hw.tflops);
out:
    json_decref(body);
    json_decref(ans);
    return rc;
}

/* A stored identity is checked with a heartbeat (which also updates the
 * peer address); a server that no longer knows the token gets a fresh
 * registration. */
static int agent_identify(struct agent *ag, struct shoal_err *err)
{
    char path[PATH_MAX + 16];
    identity_path(ag, path, sizeof path);
    json_t *doc = json_load_file(path, 0, NULL), *body = NULL;
    const char *token = json_string_value(json_object_get(doc, "token"));
    const char *server = json_string_value(json_object_get(doc, "server"));
    int rc = -1;
    if (!token || !token_well_formed(token) || !server || strcmp(server, ag->cfg->server_url) != 0) {
        rc = agent_register(ag, err);
        goto out;
    }
    snprintf(ag->ctl.token, sizeof ag->ctl.token, "%s", token);
    ag->node_id = json_integer_value(json_object_get(doc, "node_id"));
    body = json_pack("{s:s, s:s, s:o}", "state", "idle", "peer_address", ag->advertise, "policy", policy_json(ag));
    rc = ctl_call_retry(&ag->ctl, "POST", "/v1/agent/heartbeat", body, 30, 0, NULL, err);
    if (rc != 0 && (err->status == 401 || err->status == 404)) {   /* 404: an operator removed the node */
        log_info("the server does not know node=%lld any more; registering again", (long long)ag->node_id);
        rc = agent_register(ag, err);
    } else if (rc == 0) {
        log_info("resumed identity node=%lld peer_address=%s", (long long)ag->node_id, ag->advertise);
    }
out:
    json_decref(doc);
    json_decref(body);
    return rc;
}

/* ---- background threads ------------------------------------------------ */

static void *heartbeat_main(void *arg)
{
    struct agent *ag = arg;
    int failing = 0, draining = 0;
    while (!atomic_load(ag->stop)) {
        pthread_mutex_lock(&ag->mu);
        int64_t job = ag->running_job;
        pthread_mutex_unlock(&ag->mu);
        json_t *body = json_pack("{s:s}", "state", job ? "busy" : "idle");
        if (job) {
            json_object_set_new(body, "job_id", json_integer(job));
            json_object_set_new(body, "step", json_integer(atomic_load(&ag->step)));
        } else {
            json_t *held = live_held_json(&ag->held);   /* what a live resume may start from */
            if (held)
                json_object_set_new(body, "held", held);
        }
        long status;
        struct shoal_err e;
        json_t *ans = NULL;
        int rc = ctl_call(&ag->ctl, "POST", "/v1/agent/heartbeat", body, PATIENCE_AGENT_CALL_S, &status, &ans,
                          &e);
        json_decref(body);
        /* an operator's drain, said in the log once when it begins and ends */
        const char *state = rc == 0 && status < 300 ? json_string_value(json_object_get(ans, "state")) : NULL;
        if (state && draining != (strcmp(state, "draining") == 0)) {
            draining = !draining;
            if (draining)
                log_warn("node=%lld is draining (an operator's POST /v1/nodes/%lld/drain): it takes no new job; "
                         "POST /v1/nodes/%lld/undrain brings it back", (long long)ag->node_id,
                         (long long)ag->node_id, (long long)ag->node_id);
            else
                log_info("node=%lld is no longer draining", (long long)ag->node_id);
        }
        json_decref(ans);
        if (rc != 0 || status >= 300) {
            if (!failing++)
                log_warn("heartbeat failed: %s", e.message);
        } else if (failing) {
            log_info("heartbeat delivered again after %d failures", failing);
            failing = 0;
        }
        /* A tasklet that ends cuts the wait short: the server's re-plan
         * waits for the survivors to say what they hold. */
        double until = ctl_now() + (double)ag->cfg->heartbeat_interval;
        while (!atomic_load(ag->stop) && !atomic_exchange(&ag->beat_now, 0) && ctl_now() < until)
            ctl_sleep(&ag->ctl, HEARTBEAT_SLICE_S);
    }
    return NULL;
}

/* Publishes a new assignment; raises abort when the running one is gone. */
static void assignment_publish(struct agent *ag, json_t *a)
{
    int64_t job;
    uint32_t epoch;
    int runnable;
    assignment_key(a, &job, &epoch, &runnable);
    pthread_mutex_lock(&ag->mu);
    json_decref(ag->assignment);
    ag->assignment = json_incref(a);
    ag->generation++;
    if (ag->running_job && (job != ag->running_job || epoch != ag->running_epoch || !runnable))
        atomic_store(&ag->abort, 1);
    pthread_cond_broadcast(&ag->changed);
    pthread_mutex_unlock(&ag->mu);
}

static void *poll_main(void *arg)
{
    struct agent *ag = arg;
    int64_t job = -1;   /* -1: nothing known yet, answer at once */
    uint32_t epoch = 0;
    int runnable = 0, failing = 0;
    while (!atomic_load(ag->stop)) {
        char path[128];
        if (job < 0)
            snprintf(path, sizeof path, "/v1/agent/assignment");
        else if (job == 0)
            snprintf(path, sizeof path, "/v1/agent/assignment?wait=%d", PATIENCE_POLL_WAIT_S);
        else
            snprintf(path, sizeof path, "/v1/agent/assignment?wait=%d&job=%lld&epoch=%u&recovering=%d",
                     PATIENCE_POLL_WAIT_S, (long long)job, epoch, !runnable);
        long status;
        json_t *ans = NULL;
        struct shoal_err e;
        /* patient enough for a server whose database answers at its --db-timeout (patience.h) */
        int rc = ctl_call(&ag->ctl, "GET", path, NULL, PATIENCE_AGENT_POLL_S, &status, &ans, &e);
        json_t *a = json_object_get(ans, "assignment");
        if (rc == 0 && status == 200 && a) {
            int64_t j;
            uint32_t ep;
            int run;
            assignment_key(a, &j, &ep, &run);
            if (j != job || ep != epoch || run != runnable) {
                log_info("assignment job=%lld epoch=%u%s", (long long)j, ep, j && !run ? " (recovering)" : "");
                assignment_publish(ag, a);
            }
            job = j, epoch = ep, runnable = run, failing = 0;
        } else if (!atomic_load(ag->stop)) {
            if (!failing++)
                log_warn("assignment poll failed: %s", rc == 0 && status == 200 ? "no assignment field" : e.message);
            ctl_sleep(&ag->ctl, failing < 5 ? 1.0 : 5.0);
        }
        json_decref(ans);
    }
    return NULL;
}

/* ---- work -------------------------------------------------------------- */

/* Measures the links the server asks for and reports them in one PUT. */
static void probe_round(struct agent *ag, long generation)
{
    json_t *ans = NULL, *samples = json_array(), *body = NULL;
    struct shoal_err e;
    if (ctl_call_retry(&ag->ctl, "GET", "/v1/agent/probes", NULL, PATIENCE_AGENT_CALL_S, 10, &ans, &e) != 0) {
        log_warn("cannot get probe targets: %s", e.message);
        goto out;
    }
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(ans, "targets"), i, t) {
        const char *addr = json_string_value(json_object_get(t, "peer_address"));
        json_int_t to = json_integer_value(json_object_get(t, "node_id"));
        pthread_mutex_lock(&ag->mu);
        int moved = ag->generation != generation;
        pthread_mutex_unlock(&ag->mu);
        if (moved || atomic_load(ag->stop))
            break;   /* an assignment came: training goes first */
        struct probe_result r = { 0 };
        if (!addr || to < 1 || probe_link(addr, PROBE_TIMEOUT_MS, &r, &e) != 0) {
            log_warn("probe of node=%lld failed: %s", (long long)to, addr ? e.message : "no address");
            if (addr && to >= 1 && !r.connected) {   /* the server learns the link cannot be connected */
                char why[sizeof e.message];
                snprintf(why, sizeof why, "%s", e.message);
                utf8_clip(why, PROBE_WHY_MAX);
                json_array_append_new(samples, json_pack("{s:I, s:b, s:s}", "to", to, "reachable", 0, "why", why));
            }
            continue;
        }
        log_info("probe to=%lld addr=%s latency_ms=%.3f bandwidth_gbps=%.3f bytes=%llu seconds=%.2f",
                 (long long)to, addr, r.latency_ms, r.bandwidth_gbps, r.bytes, r.seconds);
        json_array_append_new(samples, json_pack("{s:I, s:f, s:f}", "to", to, "latency_ms", r.latency_ms,
                                                 "bandwidth_gbps", r.bandwidth_gbps));
    }
    /* the server's relay, while this node's link to it is not measured */
    json_t *relay_link = NULL;
    const char *relay = json_string_value(json_object_get(ans, "relay"));
    struct probe_result r = { 0 };
    struct relay_ticket ticket;
    char why[96];
    if (relay && !atomic_load(ag->stop) && ctl_now() >= ag->relay_retry_at) {
        int ticketed = relay_ticket_from_hex(json_string_value(json_object_get(ans, "relay_ticket")), &ticket, why,
                                             sizeof why) == 0;
        if (!ticketed)
            err_set(&e, 502, "bad_answer", NULL, "the server gave no valid ticket for it (%s): a server from "
                    "before relay tickets? upgrade it", why);
        if (ticketed && probe_relay(relay, &ticket, PROBE_TIMEOUT_MS, &r, &e) == 0) {
            log_info("probe relay=%s latency_ms=%.3f bandwidth_gbps=%.3f bytes=%llu seconds=%.2f", relay,
                     r.latency_ms, r.bandwidth_gbps, r.bytes, r.seconds);
            relay_link = json_pack("{s:s, s:f, s:f}", "address", relay, "latency_ms", r.latency_ms,
                                   "bandwidth_gbps", r.bandwidth_gbps);
        } else {
            /* not again for a while (a relay restarting is back within
             * AGENT_RELAY_RETRY_S), and the server hears why: it plans no
             * link of this node through the relay until a probe works */
            double wait = (double)json_integer_value(json_object_get(ans, "stale_after_s"));
            if (wait > AGENT_RELAY_RETRY_S)
                wait = AGENT_RELAY_RETRY_S;
            ag->relay_retry_at = ctl_now() + wait;
            log_warn("probe of relay %s failed (tried again in %.0f s): %s", relay, wait, e.message);
            char said[sizeof e.message];
            snprintf(said, sizeof said, "%s", e.message);
            utf8_clip(said, PROBE_WHY_MAX);
            relay_link = json_pack("{s:s, s:b, s:s}", "address", relay, "reachable", 0, "why", said);
        }
    }
    if (json_array_size(samples) == 0 && !relay_link)
        goto out;
    /* Named, so that a retry after a lost answer stores nothing twice. */
    char report_id[TOKEN_MAX];
    if (token_generate("links-", report_id, sizeof report_id) != 0)
        report_id[0] = '\0';
    body = json_pack("{s:O, s:s?, s:o?}", "samples", samples, "report_id", report_id[0] ? report_id : NULL,
                     "relay", relay_link);
    if (ctl_call_retry(&ag->ctl, "PUT", "/v1/links", body, PATIENCE_AGENT_CALL_S, 30, NULL, &e) != 0)
        log_warn("cannot report link samples: %s", e.message);
out:
    json_decref(ans);
    json_decref(samples);
    json_decref(body);
}

static void report_failure(struct agent *ag, const struct assignment *as, const struct assign_peer *peer,
                           const struct shoal_err *why)
{
    struct shoal_err e;
    char reason[sizeof why->message];
    /* The API takes one line of at most 1000 bytes. */
    snprintf(reason, sizeof reason, "%s", why->message[0] ? why->message : "unknown error");
    for (char *c = reason; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    /* A dataset that is missing, not what the job says, or outside this
     * agent's data roots stays so: the server fails the job at once
     * instead of re-planning it. */
    int dataset = strcmp(why->code, "invalid_dataset") == 0 || strcmp(why->code, "path_refused") == 0;
    json_t *body = json_pack("{s:I, s:I, s:i, s:i, s:s, s:s?, s:s?}", "job_id", (json_int_t)as->job_id,
                             "epoch", (json_int_t)as->epoch, "stage", as->stage, "replica", as->replica,
                             "reason", reason, "peer", peer->addr[0] ? peer->addr : NULL,
                             "cause", dataset ? "dataset" : NULL);
    /* The neighbour by node id: the server checks it and, when it fails
     * again, leaves it out of the job's plans. */
    if (body && peer->addr[0])
        json_object_set_new(body, "peer_node", json_integer(peer->node));
    if (ctl_call_retry(&ag->ctl, "POST", "/v1/agent/failure", body, PATIENCE_AGENT_CALL_S, 60, NULL, &e) != 0)
        log_warn("cannot report the failure of job=%lld: %s", (long long)as->job_id, e.message);
    json_decref(body);
}

/* An assignment this agent cannot run (from a newer server, or one it
 * cannot check) is a failure of its tasklet, said to the server, so that
 * the job re-plans or fails with the reason instead of waiting for us. */
static void refuse_assignment(struct agent *ag, const json_t *a, struct shoal_err *why)
{
    json_int_t job = 0, epoch = -1, stage = -1, replica = -1;
    log_error("cannot run the assignment: %s", why->message);
    json_unpack((json_t *)a, "{s?I, s?I, s?I, s?I}", "job_id", &job, "epoch", &epoch, "stage", &stage,
                "replica", &replica);
    if (job < 1 || epoch < 0 || epoch > UINT32_MAX || stage < 0 || stage > INT_MAX || replica < 0 ||
        replica > INT_MAX)
        return;   /* the server does not know it either, then: nothing to say it about */
    struct assignment as = { .job_id = job, .epoch = (uint32_t)epoch, .stage = (int)stage, .replica = (int)replica };
    struct shoal_err e = *why;
    snprintf(e.message, sizeof e.message, "this agent cannot run its assignment: %.300s", why->message);
    report_failure(ag, &as, &(struct assign_peer){ .addr = "" }, &e);
}

static void run_tasklet(struct agent *ag, const json_t *a)
{
    struct assignment as;
    struct shoal_err e;
    struct assign_peer peer = { .addr = "" };
    if (assign_parse(a, &as, &e) != 0) {
        refuse_assignment(ag, a, &e);
        return;
    }
    pthread_mutex_lock(&ag->mu);
    atomic_store(&ag->abort, 0);
    ag->running_job = as.job_id;
    ag->running_epoch = as.epoch;
    int64_t job;
    uint32_t epoch;
    int runnable;
    assignment_key(ag->assignment, &job, &epoch, &runnable);
    if (job != as.job_id || epoch != as.epoch || !runnable)
        atomic_store(&ag->abort, 1);
    pthread_mutex_unlock(&ag->mu);
    atomic_store(&ag->step, as.resume_step);
    log_info("tasklet start job=%lld epoch=%u stage=%d/%d replica=%d/%d layers=" LAYER_RANGE_FMT, (long long)as.job_id,
             as.epoch, as.stage, as.stages, as.replica, as.replicas, LAYER_RANGE(as.layer_start, as.layer_end));
    struct train_env env = { .ctl = &ag->ctl, .reporter = ag->reporter, .listener = ag->listener, .dev = ag->dev,
                             .data_dir = ag->cfg->data_dir, .roots = &ag->roots,
                             .max_memory_bytes = ag->cfg->max_memory_bytes, .peer_timeout_ms = (int)ag->cfg->peer_timeout * 1000,
                             .connect_timeout_ms = (int)ag->cfg->connect_timeout * 1000, .abort = &ag->abort,
                             .step = &ag->step, .held = &ag->held };
    enum train_result res = train_run(&env, &as, &peer, &e);
    struct shoal_err fe;
    if (res == TRAIN_DONE)
        log_info("tasklet done job=%lld stage=%d replica=%d", (long long)as.job_id, as.stage, as.replica);
    else if (res == TRAIN_ABORTED)
        log_info("tasklet stopped job=%lld: its assignment changed", (long long)as.job_id);
    else {   /* said at once, not after the queue below */
        log_error("tasklet failed job=%lld stage=%d replica=%d peer=%s node=%lld: %s", (long long)as.job_id,
                  as.stage, as.replica, peer.addr[0] ? peer.addr : "-", (long long)peer.node, e.message);
        report_failure(ag, &as, &peer, &e);
    }
    /* The queue's progress and uploads before the next tasklet, but never
     * in its way: a new assignment (abort) ends the wait, and what is left
     * goes on in the background (a failing checkpoint store must not keep
     * a node from its next epoch).  Stopping: a moment only. */
    if (report_flush(ag->reporter, atomic_load(ag->stop) ? 2 : 60, &ag->abort, &fe) != 0)
        log_warn("progress of job=%lld: %s", (long long)as.job_id, fe.message);
    pthread_mutex_lock(&ag->mu);
    ag->running_job = 0;
    pthread_mutex_unlock(&ag->mu);
    atomic_store(&ag->beat_now, 1);
}

static void work_loop(struct agent *ag)
{
    int64_t done_job = 0;
    uint32_t done_epoch = 0;
    double next_probe = 0;
    long seen = -1;
    while (!atomic_load(ag->stop)) {
        pthread_mutex_lock(&ag->mu);
        if (ag->generation == seen) {
            struct timespec ts = ctl_abstime(0.2);
            pthread_cond_timedwait(&ag->changed, &ag->mu, &ts);
        }
        seen = ag->generation;
        json_t *a = json_incref(ag->assignment);
        pthread_mutex_unlock(&ag->mu);
        int64_t job;
        uint32_t epoch;
        int runnable;
        assignment_key(a, &job, &epoch, &runnable);
        if (runnable && !(job == done_job && epoch == done_epoch)) {
            run_tasklet(ag, a);
            done_job = job, done_epoch = epoch;
        } else if (!job && ag->held.st) {
            live_drop(&ag->held);   /* left out of the job's plan: nobody resumes from it here */
        } else if (!job && ctl_now() >= next_probe && seen >= 1) {
            probe_round(ag, seen);
            next_probe = ctl_now() + (double)ag->cfg->probe_interval;
        }
        json_decref(a);
    }
}

/* ---- start and stop ---------------------------------------------------- */

/* The address peers dial: --advertise, or the listen host with the bound
 * port (the host name when it binds every interface). */
static int advertise_address(struct agent *ag, unsigned port, struct shoal_err *err)
{
    if (ag->cfg->advertise[0]) {
        snprintf(ag->advertise, sizeof ag->advertise, "%s", ag->cfg->advertise);
        return 0;
    }
    char host[128];
    const char *colon = strrchr(ag->cfg->listen, ':');
    size_t n = colon ? (size_t)(colon - ag->cfg->listen) : 0;
    if (n == 0 || n >= sizeof host)
        return err_set(err, 2, "invalid_config", "--listen", "--listen must be host:port, got '%s'", ag->cfg->listen);
    memcpy(host, ag->cfg->listen, n);
    host[n] = '\0';
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0) {
        if (gethostname(host, sizeof host) != 0)
            return err_set(err, 2, "invalid_config", "--advertise", "cannot derive an address: pass --advertise");
        host[sizeof host - 1] = '\0';
    }
    snprintf(ag->advertise, sizeof ag->advertise, "%s:%u", host, port);
    return 0;
}

int agent_run(const struct agent_config *cfg, atomic_int *stop, struct shoal_err *err)
{
    struct agent *ag = calloc(1, sizeof *ag);
    struct kern_err ke = {{0}};
    unsigned port = 0;
    int rc = -1;
    if (!ag)
        return err_set(err, 500, "internal", NULL, "out of memory");
    ag->cfg = cfg;
    ag->stop = stop;
    ag->dir_lock = -1;
    ag->ctl.stop = stop;
    snprintf(ag->ctl.url, sizeof ag->ctl.url, "%s", cfg->server_url);
    snprintf(ag->ctl.ca_file, sizeof ag->ctl.ca_file, "%s", cfg->ca_file);
    ag->ctl.url[strcspn(ag->ctl.url, "\n")] = '\0';
    size_t ul = strlen(ag->ctl.url);
    if (ul && ag->ctl.url[ul - 1] == '/')
        ag->ctl.url[ul - 1] = '\0';
    pthread_mutex_init(&ag->mu, NULL);
    pthread_cond_init(&ag->changed, NULL);
    live_init(&ag->held);
    if (mkdir(cfg->data_dir, 0700) != 0 && errno != EEXIST) {
        err_set(err, 2, "invalid_config", "--data-dir", "cannot create %s: %s", cfg->data_dir, strerror(errno));
        goto out;
    }
    /* two agents on one directory would be one node with two addresses */
    if ((ag->dir_lock = dirlock_take(cfg->data_dir, "agent.lock", "shoal-agent", "--data-dir", err)) < 0)
        goto out;
    if (roots_init(&ag->roots, cfg->data_roots, cfg->data_dir, err) != 0)
        goto out;
    kern_set_threads((int)cfg->threads);   /* this thread trains: OpenMP keeps the count per thread */
    if (kern_device_parse(cfg->device, &ag->dev, &ke) != 0) {
        err_set(err, 2, "invalid_config", "--device", "%s", ke.msg);
        goto out;
    }
    if (hw_measure(&ag->dev, (double)cfg->measure_ms / 1e3, &ag->hw, err) != 0)
        goto out;
    if (peer_listener_start(cfg->listen, &ag->listener, &port, err) != 0 || advertise_address(ag, port, err) != 0)
        goto out;
    peer_listener_set_encryption(ag->listener, strcmp(cfg->peer_encryption, "on") == 0);
    struct shoal_err unresolved;   /* the server probes our peer port: it finds a handshake slot */
    if (peer_listener_expect_server(ag->listener, ag->ctl.url, &unresolved) != 0)
        log_warn("agent: %s; the server's probes of the peer port count as a stranger's", unresolved.message);
    if (agent_identify(ag, err) != 0 || report_start(&ag->ctl, REPORT_QUEUE, &ag->reporter, err) != 0)
        goto out;
    if (pthread_create(&ag->heartbeat_thread, NULL, heartbeat_main, ag) != 0 ||
        !(ag->heartbeat_started = 1) || pthread_create(&ag->poll_thread, NULL, poll_main, ag) != 0) {
        err_set(err, 500, "internal", NULL, "cannot start the agent's threads");
        goto out;
    }
    ag->poll_started = 1;
    char roots[1024];
    roots_text(&ag->roots, roots, sizeof roots);
    log_info("agent ready node=%lld peer_address=%s device=%s peer_encryption=%s data_roots=%s max_memory=%s "
             "threads=%ld", (long long)ag->node_id, ag->advertise, cfg->device, cfg->peer_encryption, roots,
             cfg->max_memory, cfg->threads);
    work_loop(ag);
    rc = 0;
out:
    atomic_store(stop, 1);
    if (ag->heartbeat_started)
        pthread_join(ag->heartbeat_thread, NULL);
    if (ag->poll_started)
        pthread_join(ag->poll_thread, NULL);
    report_stop(ag->reporter);
    if (ag->listener)
        peer_listener_stop(ag->listener);
    json_decref(ag->assignment);
    live_destroy(&ag->held);
    pthread_mutex_destroy(&ag->mu);
    pthread_cond_destroy(&ag->changed);
    if (ag->dir_lock >= 0)
        close(ag->dir_lock);
    roots_free(&ag->roots);
    free(ag);
    return rc;
}
