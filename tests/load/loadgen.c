/* loadgen.c - simulated shoal agents against a real shoal-server.
 *
 * Registers N nodes (POST /v1/agent/register with the join token), then,
 * for D seconds, keeps each one doing what agent/agent.c does: a heartbeat
 * every H seconds on one keep-alive connection (sleeping H after each
 * answer, as the agent's heartbeat thread does) and the assignment
 * long-poll on another (first without wait, then wait=25 with the job,
 * epoch and recovering it knows, re-issued as soon as it returns).  With
 * --jobs, it creates that many jobs (admin token), pins a plan for each on
 * the first nodes once every agent is polling, and the nodes the plans
 * name post a progress report every P seconds (one step each) on a third
 * connection and heartbeat "busy" with their job and step.
 *
 * Every agent's connections are bound to a source address of its own in
 * 127.1.0.0/16 (a per-address connection limit then sees one agent per
 * address, as in a real fleet).  Prints a table and one JSON line
 * ({"bench":"load",...}).  A benchmark, not a test: nothing is asserted.
 *
 * usage: loadgen --url http://127.0.0.1:PORT --join-token-file F [options]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "loadgen.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- timers ------------------------------------------------------------------- */

static void timer_add(struct loadgen *lg, double due, void *ptr, int what, unsigned long gen)
{
    if (lg_timer_add(&lg->timers, (struct lg_timer){ due, ptr, what, gen }) != 0)
        lg_die("out of memory for timers");
}

/* ---- recording ------------------------------------------------------------- */

/* Where an outcome of kind `k` is counted now; NULL: nowhere (after the
 * window).  Registrations and wakes count wherever they happen. */
static struct lg_kind *record_to(struct loadgen *lg, enum kind k)
{
    if (k == K_REGISTER || k == K_WAKE)
        return &lg->kinds[k];
    if (lg->phase == PH_WARMUP)
        return &lg->warm[k];
    return lg->phase == PH_WINDOW ? &lg->kinds[k] : NULL;
}

static void record_answer(struct loadgen *lg, enum kind k, const struct lg_conn *c, double seconds)
{
    struct lg_kind *to = record_to(lg, k);
    if (to)
        lg_kind_answer(to, c->status, seconds, lg_conn_body(c, NULL));
    if (k == K_HEARTBEAT && lg->o.timeline) {
        lg_hist_add(&lg->second, seconds);
        lg->second_errors += c->status < 200 || c->status > 299;
    }
}

static void record_failure(struct loadgen *lg, enum kind k, int timed_out, const char *why)
{
    struct lg_kind *to = record_to(lg, k);
    if (to)
        lg_kind_failure(to, timed_out, why);
    if (k == K_HEARTBEAT && lg->o.timeline)
        lg->second_errors++;
}

/* ---- sending ------------------------------------------------------------------ */

static const struct sockaddr_in *conn_source(struct loadgen *lg, struct lg_conn *c)
{
    if (c->role == R_ADMIN)
        return &lg->admin_source;
    if (c->role == R_REGISTER)
        return &lg->agents[lg->reg_agent[c - lg->reg]].source;
    return &((struct agent *)c->owner)->source;
}

static double role_timeout(const struct loadgen *lg, int role)
{
    switch (role) {
    case R_REGISTER: return REGISTER_TIMEOUT_S;
    case R_HEARTBEAT: return HEARTBEAT_TIMEOUT_S;
    case R_POLL: return lg->o.poll_wait_s + POLL_GRACE_S;
    case R_PROGRESS: return PROGRESS_TIMEOUT_S;
    default: return ADMIN_TIMEOUT_S;
    }
}

static void conn_failed(struct loadgen *lg, struct lg_conn *c, int timed_out, const char *why);

/* Sends a request on `c` and arms its deadline.  `started` is when the
 * request was first sent (a retry keeps it); 0: now. */
static void conn_request(struct loadgen *lg, struct lg_conn *c, const char *method, const char *path,
                         const char *token, const char *body, double started)
{
    if (lg_conn_send(c, lg->epfd, &lg->o.server, conn_source(lg, c), method, path, token, body) == LG_FAIL) {
        c->started = started ? started : now_s();
        conn_failed(lg, c, 0, c->error);
        return;
    }
    c->started = started ? started : now_s();
    timer_add(lg, now_s() + role_timeout(lg, c->role), c, T_DEADLINE, c->seq);
}

/* ---- the agent's heartbeat ----------------------------------------------------- */

static void heartbeat_send(struct loadgen *lg, struct agent *ag, double started)
{
    char body[160];
    if (ag->training)
        snprintf(body, sizeof body, "{\"state\":\"busy\",\"job_id\":%lld,\"step\":%lld}", (long long)ag->job,
                 ag->step > 0 ? ag->step - 1 : 0);
    else
        snprintf(body, sizeof body, "{\"state\":\"idle\"}");
    conn_request(lg, &ag->hb, "POST", "/v1/agent/heartbeat", ag->token, body, started);
}

static void heartbeat_next(struct loadgen *lg, struct agent *ag)
{
    timer_add(lg, now_s() + lg->o.heartbeat_s, ag, T_HEARTBEAT, ++ag->hb_gen);
}

/* ---- the agent's assignment poll ---------------------------------------------- */

static void poll_send(struct loadgen *lg, struct agent *ag, double started)
{
    char path[160];
    if (!ag->known)
        snprintf(path, sizeof path, "/v1/agent/assignment");
    else if (ag->job == 0)
        snprintf(path, sizeof path, "/v1/agent/assignment?wait=%d", lg->o.poll_wait_s);
    else
        snprintf(path, sizeof path, "/v1/agent/assignment?wait=%d&job=%lld&epoch=%ld&recovering=%d",
                 lg->o.poll_wait_s, (long long)ag->job, ag->epoch, ag->recovering);
    conn_request(lg, &ag->poll, "GET", path, ag->token, NULL, started);
}

static void progress_send(struct loadgen *lg, struct agent *ag, double started)
{
    char body[512], loss[32] = "";
    if (ag->stage == ag->stages - 1)
        snprintf(loss, sizeof loss, "\"loss\":%.4f,", 5.0 / (1.0 + (double)ag->step / 100.0));
    snprintf(body, sizeof body,
             "{\"job_id\":%lld,\"epoch\":%ld,\"step\":%lld,\"stage\":%d,\"replica\":%d,%s"
             "\"iteration_s\":%.3f,\"compute_s\":%.3f,\"send_s\":0.050,\"recv_wait_s\":0.100,"
             "\"allreduce_s\":0.150,\"bubble_s\":0.050,\"tokens\":4096}",
             (long long)ag->job, ag->epoch, ag->step, ag->stage, ag->replica, loss, lg->o.progress_s,
             lg->o.progress_s * 0.6);
    ag->posted_gen = ag->prog_gen;
    conn_request(lg, &ag->prog, "POST", "/v1/agent/progress", ag->token, body, started);
}

/* After a progress post: the next one, if the agent still trains. */
static void progress_next(struct loadgen *lg, struct agent *ag)
{
    if (ag->training)
        timer_add(lg, now_s() + lg->o.progress_s, ag, T_PROGRESS, ag->prog_gen);
}

/* The wake job's node heard at `when` that its job was cancelled: "wake"
 * is how long after the cancel's answer that was (0 if before it: the
 * notification leaves at commit, a moment before the answer). */
static void wake_heard(struct loadgen *lg, struct agent *ag, double when)
{
    const struct job *j = &lg->jobs[lg->n_jobs - 1];
    ag->woke_at = when;
    if (!j->answered_at)
        return;   /* counted when the cancel's answer comes */
    lg_hist_add(&lg->kinds[K_WAKE].latency, when > j->answered_at ? when - j->answered_at : 0);
    lg->kinds[K_WAKE].ok++;
}

/* Takes in a poll's answer: the assignment (null or an object). */
static void assignment_update(struct loadgen *lg, struct agent *ag, const char *body)
{
    json_t *doc = json_loads(body, 0, NULL);
    json_t *a = json_object_get(doc, "assignment");
    int64_t job = json_is_object(a) ? json_integer_value(json_object_get(a, "job_id")) : 0;
    long epoch = json_is_object(a) ? (long)json_integer_value(json_object_get(a, "epoch")) : 0;
    const char *state = json_string_value(json_object_get(a, "state"));
    int recovering = state && strcmp(state, "recovering") == 0;
    if (!doc || !(json_is_object(a) || json_is_null(a))) {
        record_failure(lg, K_LONGPOLL, 0, "an assignment answer without an assignment");
        goto out;
    }
    int changed = !ag->known || job != ag->job || epoch != ag->epoch || recovering != ag->recovering;
    if (changed && ag->wake_job && ag->job == ag->wake_job && job != ag->wake_job && ag->woke_at == 0)
        wake_heard(lg, ag, now_s());
    ag->known = 1;
    if (!changed)
        goto out;
    ag->job = job, ag->epoch = epoch, ag->recovering = recovering;
    /* The wake job's nodes only wait for its cancel: a report racing it
     * would be refused, and no agent would have started training yet. */
    ag->training = job > 0 && !recovering && !ag->wake_job;
    ag->prog_gen++;   /* whatever was scheduled belongs to the old assignment */
    if (ag->training) {
        json_t *resume = json_object_get(a, "resume");
        ag->stage = (int)json_integer_value(json_object_get(a, "stage"));
        ag->replica = (int)json_integer_value(json_object_get(a, "replica"));
        ag->stages = (int)json_integer_value(json_object_get(a, "stages"));
        ag->step = json_is_object(resume) ? json_integer_value(json_object_get(resume, "step")) : 0;
        /* A post still in flight for the old assignment schedules the next one. */
        if (ag->prog.state != LC_BUSY)
            timer_add(lg, now_s() + lg->o.progress_s, ag, T_PROGRESS, ag->prog_gen);
    }
out:
    json_decref(doc);
}

/* ---- the operator: jobs and plans --------------------------------------------- */

/* The plan of job `j` (stages' nodes are consecutive agents), as the
 * body of POST /v1/jobs/{id}/plan.  The caller frees the string. */
static char *plan_body(struct loadgen *lg, const struct job *j)
{
    json_t *stages = json_array();
    for (int s = 0; s < lg->o.stages; s++) {
        json_t *nodes = json_array();
        for (int r = 0; r < lg->o.replicas; r++) {
            struct agent *ag = &lg->agents[j->first_agent + s * lg->o.replicas + r];
            json_array_append_new(nodes, json_integer(ag->node_id));
        }
        json_array_append_new(stages, json_pack("{s:i, s:o}", "stage", s, "nodes", nodes));
    }
    json_t *req = json_pack("{s:o, s:{s:f, s:f}}", "stages", stages, "fill_missing_links", "latency_ms", 1.0,
                            "bandwidth_gbps", 10.0);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!body)
        lg_die("out of memory for %s", "a plan");
    return body;
}

/* Cancels the wake job while the agents run: its nodes' long-polls should
 * bring them a null assignment at once (kind "wake"). */
static void admin_cancel(struct loadgen *lg)
{
    struct job *j = &lg->jobs[lg->n_jobs - 1];
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)j->id);
    j->cancel_sent = now_s();
    conn_request(lg, &lg->admin, "DELETE", path, lg->o.admin_token, NULL, 0);
}

static void admin_answered(struct loadgen *lg, struct lg_conn *c)
{
    struct job *j = &lg->jobs[lg->n_jobs - 1];
    lg->admin_done = 1;
    if (c->status != 200) {
        fprintf(stderr, "loadgen: cancelling job %lld was refused: HTTP %d %.300s\n", (long long)j->id, c->status,
                lg_conn_body(c, NULL));
        lg->admin_failed = 1;
        return;
    }
    j->answered_at = now_s();
    j->cancel_ms = (j->answered_at - j->cancel_sent) * 1e3;
    for (int i = j->first_agent; i < j->first_agent + lg->tasklets; i++) {
        if (lg->agents[i].woke_at > 0) {   /* heard of it before the answer came */
            lg_hist_add(&lg->kinds[K_WAKE].latency, 0);
            lg->kinds[K_WAKE].ok++;
        }
    }
}

/* ---- registration -------------------------------------------------------------- */

static void register_send(struct loadgen *lg, struct lg_conn *c, double started)
{
    struct agent *ag = &lg->agents[lg->reg_agent[c - lg->reg]];
    char body[512], addr[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &ag->source.sin_addr, addr, sizeof addr);
    snprintf(body, sizeof body,
             "{\"name\":\"load-%d\",\"peer_address\":\"%s:7000\",\"region\":\"r%d\","
             "\"hardware\":{\"tflops\":10,\"cpu_cores\":8,\"gpu_memory_bytes\":16000000000,\"gpu_count\":0}}",
             ag->index, addr, ag->index % 4);
    conn_request(lg, c, "POST", "/v1/agent/register", lg->o.join_token, body, started);
}

/* Starts registering the next agent on `c`, if any is left. */
static void register_next(struct loadgen *lg, struct lg_conn *c)
{
    if (lg->next_register >= lg->register_until)
        return;
    lg->reg_agent[c - lg->reg] = lg->next_register++;
    register_send(lg, c, 0);
}

static void register_done(struct loadgen *lg, struct lg_conn *c)
{
    struct agent *ag = &lg->agents[lg->reg_agent[c - lg->reg]];
    json_t *doc = c->status == 201 ? json_loads(lg_conn_body(c, NULL), 0, NULL) : NULL;
    const char *token = json_string_value(json_object_get(doc, "token"));
    int64_t id = json_integer_value(json_object_get(doc, "node_id"));
    if (!token || id < 1 || strlen(token) >= sizeof ag->token) {
        fprintf(stderr, "loadgen: registering agent %d: HTTP %d %.300s\n", ag->index, c->status,
                lg_conn_body(c, NULL));
        register_send(lg, c, 0);   /* again: the run needs every agent */
    } else {
        snprintf(ag->token, sizeof ag->token, "%s", token);
        ag->node_id = id;
        lg->registered++;
        register_next(lg, c);
    }
    json_decref(doc);
}

/* ---- completions and failures, by role -------------------------------------------- */

static enum kind poll_kind(const struct agent *ag)
{
    return ag->known ? K_LONGPOLL : K_ASSIGNMENT;
}

static void conn_done(struct loadgen *lg, struct lg_conn *c)
{
    double took = now_s() - c->started;
    struct agent *ag = c->owner;
    switch (c->role) {
    case R_REGISTER:
        record_answer(lg, K_REGISTER, c, took);
        register_done(lg, c);
        break;
    case R_HEARTBEAT:
        record_answer(lg, K_HEARTBEAT, c, took);
        heartbeat_next(lg, ag);
        break;
    case R_POLL:
        record_answer(lg, poll_kind(ag), c, took);
        if (c->status == 200) {
            assignment_update(lg, ag, lg_conn_body(c, NULL));
            poll_send(lg, ag, 0);
        } else {
            timer_add(lg, now_s() + POLL_RETRY_S, ag, T_POLL, ++ag->poll_gen);
        }
        break;
    case R_PROGRESS:
        record_answer(lg, K_PROGRESS, c, took);
        if (ag->posted_gen == ag->prog_gen)
            ag->step++;   /* else it was the old assignment's */
        progress_next(lg, ag);
        break;
    case R_ADMIN:
        admin_answered(lg, c);
        break;
    }
}

/* A request that got no answer.  A kept-alive connection the server had
 * closed just before the request went out is retried once on a fresh one,
 * as libcurl does; anything else counts against its kind. */
static void conn_failed(struct loadgen *lg, struct lg_conn *c, int timed_out, const char *why)
{
    struct agent *ag = c->owner;
    if (!timed_out && c->reused && !c->got_bytes) {
        lg->reconnects++;
        c->reused = 0;
        switch (c->role) {
        case R_HEARTBEAT: heartbeat_send(lg, ag, c->started); return;
        case R_POLL: poll_send(lg, ag, c->started); return;
        case R_PROGRESS: progress_send(lg, ag, c->started); return;
        case R_REGISTER: register_send(lg, c, c->started); return;
        default: break;
        }
    }
    switch (c->role) {
    case R_REGISTER:
        record_failure(lg, K_REGISTER, timed_out, why);
        register_send(lg, c, 0);
        break;
    case R_HEARTBEAT:
        record_failure(lg, K_HEARTBEAT, timed_out, why);
        heartbeat_next(lg, ag);
        break;
    case R_POLL:
        record_failure(lg, poll_kind(ag), timed_out, why);
        timer_add(lg, now_s() + POLL_RETRY_S, ag, T_POLL, ++ag->poll_gen);
        break;
    case R_PROGRESS:
        record_failure(lg, K_PROGRESS, timed_out, why);
        progress_next(lg, ag);
        break;
    case R_ADMIN:
        fprintf(stderr, "loadgen: an operator request failed: %s\n", why);
        lg->admin_failed = lg->admin_done = 1;
        break;
    }
}

/* ---- the loop --------------------------------------------------------------------- */

static void timer_fire(struct loadgen *lg, struct lg_timer t)
{
    struct agent *ag = t.ptr;
    switch (t.what) {
    case T_HEARTBEAT:
        if (t.gen == ag->hb_gen)
            heartbeat_send(lg, ag, 0);
        break;
    case T_POLL:
        if (t.gen == ag->poll_gen)
            poll_send(lg, ag, 0);
        break;
    case T_PROGRESS:
        if (t.gen == ag->prog_gen && ag->training && ag->prog.state != LC_BUSY)
            progress_send(lg, ag, 0);
        break;
    case T_ADMIN:
        admin_cancel(lg);
        break;
    case T_DEADLINE: {
        struct lg_conn *c = t.ptr;
        if (c->state == LC_BUSY && c->seq == t.gen) {
            char why[64];
            snprintf(why, sizeof why, "no answer within %.0f s", role_timeout(lg, c->role));
            lg_conn_close(c);
            conn_failed(lg, c, 1, why);
        }
        break;
    }
    }
}

/* --timeline: one line a second on stderr about the heartbeats answered in it. */
static void timeline_tick(struct loadgen *lg, double now)
{
    if (!lg->o.timeline || now - lg->second_start < 1.0)
        return;
    if (lg->second_start > 0)
        fprintf(stderr, "t=%6.1f %-7s heartbeats=%5lld errors=%lld p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
                lg->second_start - lg->t_start,
                lg->phase == PH_WARMUP ? "warmup" : lg->phase == PH_WINDOW ? "window" : "", lg->second.count,
                lg->second_errors, lg_hist_quantile_ms(&lg->second, 0.5), lg_hist_quantile_ms(&lg->second, 0.99),
                (double)lg->second.max_us / 1000.0);
    memset(&lg->second, 0, sizeof lg->second);
    lg->second_errors = 0;
    lg->second_start = now;
}

/* Moves from warm-up to the window once the warm-up has passed and the
 * wake job's cancel has been answered for a heartbeat interval, and ends
 * the window after --duration. */
static void phase_tick(struct loadgen *lg, double now)
{
    int admin_done = !lg->o.wake || lg->n_jobs == 0 || lg->admin_done;
    if (admin_done && lg->admin_done_at == 0)
        lg->admin_done_at = now;
    if (lg->phase == PH_WARMUP && now >= lg->t_start + lg->o.warmup_s && admin_done &&
        now >= lg->admin_done_at + lg->o.heartbeat_s) {
        lg->phase = PH_WINDOW;
        lg->cpu0 = cpu_s();
        lg->t0 = now;
        lg->t_end = now + lg->o.duration_s;
    } else if (lg->phase == PH_WINDOW && now >= lg->t_end) {
        lg->phase = PH_DONE;
        lg->cpu1 = cpu_s();
    }
    if (lg->phase == PH_WARMUP || lg->phase == PH_WINDOW)
        timeline_tick(lg, now);
}

/* Runs events and timers until `until` (monotonic s), or until `stop`
 * returns 1. */
static void loop_run(struct loadgen *lg, double until, int (*stop)(const struct loadgen *))
{
    struct epoll_event ev[EVENTS];
    while (!interrupted && !(stop && stop(lg))) {
        double now = now_s();
        phase_tick(lg, now);
        if (now >= until)
            break;
        struct lg_timer t;
        while (lg_timer_pop_due(&lg->timers, now, &t))
            timer_fire(lg, t);
        double next = lg_timer_next(&lg->timers, until);
        if (next > until)
            next = until;
        int wait_ms = (int)((next - now_s()) * 1000.0 + 0.999);
        if (wait_ms < 0)
            wait_ms = 0;
        int n = epoll_wait(lg->epfd, ev, EVENTS, wait_ms > 100 ? 100 : wait_ms);
        for (int i = 0; i < n; i++) {
            struct lg_conn *c = ev[i].data.ptr;
            enum lg_progress p = lg_conn_event(c, ev[i].events);
            if (p == LG_DONE)
                conn_done(lg, c);
            else if (p == LG_FAIL)
                conn_failed(lg, c, 0, c->error);
        }
    }
}

static int all_registered(const struct loadgen *lg)
{
    return lg->registered == lg->register_until;
}

static int window_open(const struct loadgen *lg)
{
    return lg->phase >= PH_WINDOW;
}

static int window_over(const struct loadgen *lg)
{
    return lg->phase == PH_DONE;
}

/* ---- set-up ----------------------------------------------------------------------- */

/* One blocking request (set-up only: nothing is being measured yet). */
static json_t *setup_call(struct loadgen *lg, const char *method, const char *path, json_t *body, int want)
{
    struct lg_conn c;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_t *ans = NULL;
    lg_conn_init(&c, NULL, R_ADMIN);
    enum lg_progress p = lg_conn_send(&c, lg->epfd, &lg->o.server, &lg->admin_source, method, path,
                                      lg->o.admin_token, text);
    double deadline = now_s() + ADMIN_TIMEOUT_S;
    while (p == LG_AGAIN && now_s() < deadline) {
        struct epoll_event ev[EVENTS];
        int n = epoll_wait(lg->epfd, ev, EVENTS, 100);
        for (int i = 0; i < n && p == LG_AGAIN; i++)
            if (ev[i].data.ptr == &c)
                p = lg_conn_event(&c, ev[i].events);
    }
    if (p == LG_DONE && c.status == want)
        ans = json_loads(lg_conn_body(&c, NULL), 0, NULL);
    else
        fprintf(stderr, "loadgen: %s %s: %s %d %.300s\n", method, path, p == LG_DONE ? "HTTP" : c.error,
                p == LG_DONE ? c.status : 0, p == LG_DONE ? lg_conn_body(&c, NULL) : "");
    lg_conn_free(&c);
    free(text);
    return ans;
}

/* Creates the jobs and plans them (the wake job too: it is cancelled
 * once the agents poll). */
static int setup_jobs(struct loadgen *lg)
{
    lg->jobs = calloc((size_t)lg->n_jobs, sizeof *lg->jobs);
    for (int i = 0; i < lg->n_jobs; i++) {
        json_t *spec = json_pack("{s:s, s:{s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i, s:s},"
                                 " s:{s:i, s:f, s:i}, s:{s:s, s:s}, s:i}",
                                 "name", "load",
                                 "model", "vocab_size", 256, "context_length", 64, "d_model", 64, "heads", 4,
                                 "layers", lg->o.stages < 4 ? 4 : lg->o.stages,
                                 "parallelism", "stages", lg->o.stages, "replicas", lg->o.replicas,
                                 "micro_batches", 4, "micro_batch_size", 4, "schedule", "1f1b",
                                 "training", "steps", STEPS, "learning_rate", 0.001, "warmup_steps", 1,
                                 "data", "path", "/dev/null", "format", "text", "checkpoint_interval", 0);
        json_t *job = setup_call(lg, "POST", "/v1/jobs", spec, 201);
        json_decref(spec);
        if (!job)
            return -1;
        lg->jobs[i].id = json_integer_value(json_object_get(job, "id"));
        lg->jobs[i].first_agent = i * lg->tasklets;
        json_decref(job);
    }
    for (int i = 0; i < lg->n_jobs; i++) {
        struct job *j = &lg->jobs[i];
        char path[64];
        char *body = plan_body(lg, j);
        snprintf(path, sizeof path, "/v1/jobs/%lld/plan", (long long)j->id);
        j->plan_sent = now_s();
        json_t *req = json_loads(body, 0, NULL), *ans = setup_call(lg, "POST", path, req, 201);
        j->plan_ms = (now_s() - j->plan_sent) * 1e3;
        json_decref(req);
        free(body);
        if (!ans)
            return -1;
        j->planned = 1;
        json_decref(ans);
    }
    return 0;
}

/* Creates `path` (empty): the measured window has opened. */
static int mark_window(const char *path)
{
    FILE *f = fopen(path, "w");
    return f && fclose(f) == 0 ? 0 : -1;
}

/* Writes the tokens of the agents no plan names (idle nodes, safe for wrk
 * to heartbeat as idle), one a line, through a temporary file. */
static int write_tokens(const struct loadgen *lg)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", lg->o.tokens_out);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    for (int i = lg->n_jobs * lg->tasklets; i < lg->o.agents; i++)
        fprintf(f, "%s\n", lg->agents[i].token);
    if (fclose(f) != 0 || rename(tmp, lg->o.tokens_out) != 0)
        return -1;
    return 0;
}

/* The wake job's nodes whose long-poll never told them of the cancel:
 * failures of "wake". */
static void wake_missed(struct loadgen *lg)
{
    const struct job *j = lg->o.wake && lg->n_jobs ? &lg->jobs[lg->n_jobs - 1] : NULL;
    for (int i = 0; j && i < lg->o.agents; i++) {
        struct agent *ag = &lg->agents[i];
        if (ag->wake_job && j->answered_at > 0 && ag->woke_at == 0 && now_s() - j->answered_at > 2.0)
            lg_kind_failure(&lg->kinds[K_WAKE], 1, "a node's long-poll did not tell it its job was cancelled");
    }
}

/* ---- main --------------------------------------------------------------------------- */

static void agents_init(struct loadgen *lg)
{
    lg->agents = calloc((size_t)lg->o.agents, sizeof *lg->agents);
    if (!lg->agents)
        lg_die("out of memory for %s", "agents");
    for (int i = 0; i < lg->o.agents; i++) {
        struct agent *ag = &lg->agents[i];
        ag->index = i;
        ag->source.sin_family = AF_INET;
        /* 127.1.X.Y, Y from 1 to 250: one address per agent. */
        ag->source.sin_addr.s_addr = lg->o.spread_sources ? htonl(127u << 24 | 1u << 16 |
                                                                  (unsigned)(i / 250) << 8 | (unsigned)(i % 250 + 1))
                                                          : htonl(INADDR_ANY);
        lg_conn_init(&ag->hb, ag, R_HEARTBEAT);
        lg_conn_init(&ag->poll, ag, R_POLL);
        lg_conn_init(&ag->prog, ag, R_PROGRESS);
    }
    lg->admin_source.sin_family = AF_INET;
    lg->admin_source.sin_addr.s_addr = lg->o.spread_sources ? htonl(127u << 24 | 2u << 16 | 1) : htonl(INADDR_ANY);
}

/* Registers agents up to (not including) `until`, --register-concurrency
 * at a time.  Returns the seconds it took; exits if it cannot. */
static double phase_register(struct loadgen *lg, int until)
{
    if (!lg->reg) {
        lg->n_reg = lg->o.register_conns < lg->o.agents ? lg->o.register_conns : lg->o.agents;
        lg->reg = calloc((size_t)lg->n_reg, sizeof *lg->reg);
        lg->reg_agent = calloc((size_t)lg->n_reg, sizeof *lg->reg_agent);
        if (!lg->reg || !lg->reg_agent)
            lg_die("out of memory for %s", "registration");
        for (int i = 0; i < lg->n_reg; i++)
            lg_conn_init(&lg->reg[i], NULL, R_REGISTER);
    }
    double t = now_s();
    lg->register_until = until;
    for (int i = 0; i < lg->n_reg; i++)
        register_next(lg, &lg->reg[i]);
    loop_run(lg, t + REGISTER_DEADLINE_S, all_registered);
    if (!all_registered(lg)) {
        fprintf(stderr, "loadgen: %d of %d agents registered in %.0f s; giving up\n", lg->registered, until,
                now_s() - t);
        exit(1);
    }
    return now_s() - t;
}

static void registration_done(struct loadgen *lg)
{
    for (int i = 0; i < lg->n_reg; i++)
        lg_conn_free(&lg->reg[i]);
}

int main(int argc, char **argv)
{
    static struct loadgen lg;
    lg_options_parse(&lg.o, argc, argv);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    lg.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (lg.epfd < 0)
        lg_die("epoll_create1: %s", strerror(errno));
    agents_init(&lg);
    lg.tasklets = lg.o.stages * lg.o.replicas;
    lg.n_jobs = lg.o.jobs > 0 ? lg.o.jobs + lg.o.wake : 0;   /* the wake job comes last */
    if (lg.n_jobs * lg.tasklets > lg.o.agents) {
        lg.n_jobs = lg.o.agents / lg.tasklets;
        fprintf(stderr, "loadgen: %d agents hold %d jobs of %d tasklets (the wake job included), not %d\n",
                lg.o.agents, lg.n_jobs, lg.tasklets, lg.o.jobs + lg.o.wake);
    }
    if (lg.n_jobs < 1 + lg.o.wake)
        lg.o.wake = 0;   /* a lone job trains */

    /* The jobs' nodes register first, and the plans are made while only they
     * are: a plan's cost grows with the square of the live nodes (the link
     * matrix), and set-up is not what is measured. */
    double register_s = phase_register(&lg, lg.n_jobs * lg.tasklets);
    if (lg.n_jobs > 0 && setup_jobs(&lg) != 0)
        lg_die("cannot create the load's jobs (the server's answer is above)");
    for (int i = 0; lg.o.wake && i < lg.tasklets; i++)
        lg.agents[lg.jobs[lg.n_jobs - 1].first_agent + i].wake_job = lg.jobs[lg.n_jobs - 1].id;
    register_s += phase_register(&lg, lg.o.agents);
    registration_done(&lg);
    fprintf(stderr, "loadgen: %d agents registered in %.1f s\n", lg.o.agents, register_s);
    if (lg.o.tokens_out && write_tokens(&lg) != 0)
        lg_die("cannot write %s", lg.o.tokens_out);

    /* The warm-up: agents start evenly over the ramp; the wake job is
     * cancelled once every agent has had a second to park its long-poll.
     * The window opens after --warmup, once the cancel is answered. */
    lg_conn_init(&lg.admin, NULL, R_ADMIN);
    lg.t_start = now_s();
    lg.phase = PH_WARMUP;
    for (int i = 0; i < lg.o.agents; i++) {
        struct agent *ag = &lg.agents[i];
        double at = lg.t_start + lg.o.ramp_s * (double)i / (double)lg.o.agents;
        timer_add(&lg, at, ag, T_HEARTBEAT, ag->hb_gen);
        timer_add(&lg, at, ag, T_POLL, ag->poll_gen);
    }
    if (lg.o.wake)
        timer_add(&lg, lg.t_start + lg.o.ramp_s + 1.0, NULL, T_ADMIN, 0);
    loop_run(&lg, lg.t_start + 86400.0, window_open);
    if (lg.o.window_mark && mark_window(lg.o.window_mark) != 0)
        lg_die("cannot write %s", lg.o.window_mark);
    loop_run(&lg, lg.t_start + 86400.0, window_over);
    wake_missed(&lg);
    double warmup_s = lg.t0 > 0 ? lg.t0 - lg.t_start : now_s() - lg.t_start;
    if (interrupted)
        lg.o.duration_s = lg.t0 > 0 ? now_s() - lg.t0 : 0;
    lg.phase = PH_DONE;
    lg_report(&lg, register_s, warmup_s);
    return 0;
}
