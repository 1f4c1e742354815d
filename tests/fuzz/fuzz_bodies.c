/* fuzz_bodies.c - every JSON request body the server parses: the bytes
 * through jv_parse_object (as request_json does) and the body's parser
 * (server/api/bodies.h, server/jobs/jobspec.h), then checks that what was accepted
 * keeps the parser's promises and that what was refused makes an error
 * answer a client can read.
 *
 * Input: byte 0 picks the body, '0' + its place in enum body_kind (any
 * byte works: (byte - '0') modulo BODY_KINDS), the rest is the body as a
 * client sends it, so a seed reads 0{"name":...}. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/jsonv.h"
#include "../../server/api/bodies.h"
#include "../../server/jobs/jobspec.h"

enum body_kind {
    BODY_REGISTRATION, BODY_HEARTBEAT, BODY_LINKS, BODY_PROGRESS, BODY_FAILURE,
    BODY_NCCL_PUT, BODY_JOB, BODY_SCHEDULE, BODY_PLAN, BODY_KINDS
};

#define SELF_NODE 7   /* the node a links report comes from */

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_bodies: broken promise: %s\n", what);
        abort();
    }
}

/* An error must become the JSON answer reply_error builds, 4xx. */
static void check_error(const struct shoal_err *e)
{
    expect(e->status >= 400 && e->status < 500, "a bad body is answered with a 4xx");
    expect(e->code[0] && e->message[0], "an error has a code and a message");
    json_t *j = json_pack("{s:s, s:s}", "code", e->code, "message", e->message);
    expect(j != NULL, "the error's code and message are UTF-8 (json_pack takes them)");
    if (e->field[0]) {
        json_t *f = json_string(e->field);
        expect(f != NULL, "the error's field is UTF-8");
        json_decref(f);
    }
    json_decref(j);
}

/* A Postgres array literal "{a,b,...}"; returns its element count. */
static size_t array_literal_count(const struct buf *b)
{
    expect(b->len >= 2 && b->data[0] == '{' && b->data[b->len - 1] == '}', "links are array literals");
    size_t n = 1;
    for (size_t i = 0; i < b->len; i++)
        n += b->data[i] == ',';
    return n;
}

static void check_links(const struct body_links *l)
{
    size_t n = array_literal_count(&l->to);
    expect(n == array_literal_count(&l->latency_ms) && n == array_literal_count(&l->bandwidth_gbps),
           "the three link arrays have one entry per sample");
    expect(n >= 1 && n <= BODY_LINKS_MAX_SAMPLES, "1 to BODY_LINKS_MAX_SAMPLES samples");
}

/* The spec as stored (jobspec_to_json, dumped as h_jobs.c does) parses
 * back to the same spec: the planner and resume checks read it again. */
static void check_job_roundtrip(const struct job_spec *spec)
{
    struct job_spec again;
    struct shoal_err e;
    json_t *norm = jobspec_to_json(spec);
    expect(norm != NULL, "jobspec_to_json builds the stored spec");
    char *text = json_dumps(norm, JSON_COMPACT | JSON_REAL_PRECISION(15));
    expect(text != NULL, "the stored spec dumps");
    json_t *back = jv_parse_object(text, strlen(text), &e);
    expect(back != NULL, "the stored spec is a JSON object");
    expect(jobspec_parse(back, &again, &e) == 0, "the stored spec parses again");
    expect(strcmp(spec->name, again.name) == 0 && strcmp(spec->data_path, again.data_path) == 0 &&
           strcmp(spec->schedule, again.schedule) == 0 && strcmp(spec->data_format, again.data_format) == 0,
           "the stored spec keeps its strings");
    expect(model_config_equal(&spec->model, &again.model) && spec->stages == again.stages &&
           spec->replicas == again.replicas && spec->steps == again.steps &&
           spec->checkpoint_interval == again.checkpoint_interval && spec->resume_job_id == again.resume_job_id &&
           spec->seed == again.seed, "the stored spec keeps its integers");
    expect(fabs(spec->learning_rate - again.learning_rate) <= 1e-14 * spec->learning_rate,
           "the stored spec keeps its learning rate to 15 digits");
    json_decref(back);
    free(text);
    json_decref(norm);
}

static void check_plan(const struct plan_request *req, const struct plan_force *f)
{
    expect(f->stages >= 1 && f->stages <= BODY_PLAN_MAX_STAGES, "1 to 1024 stages");
    expect(f->replicas >= 1 && f->replicas <= BODY_PLAN_MAX_REPLICAS, "1 to 4096 replicas");
    expect(f->node_ids != NULL, "a node per tasklet");
    for (int t = 0; t < f->stages * f->replicas; t++)
        expect(f->node_ids[t] >= 1, "node ids are >= 1");
    expect(!f->layer_start == !f->layer_end, "layer ranges come as a pair");
    expect(strcmp(req->cost_model, "shoal") == 0 || strcmp(req->cost_model, "dtfm") == 0, "a known cost model");
}

/* Parses `body` as `kind`; 0 accepted, -1 refused (e set). */
static int parse_body(enum body_kind kind, const json_t *body, struct shoal_err *e)
{
    union {
        struct body_registration reg;
        struct body_heartbeat hb;
        struct body_links links;
        struct body_progress progress;
        struct body_failure failure;
        struct body_nccl_put nccl;
        struct job_spec job;
        struct plan_request schedule;
    } u;
    struct plan_request req;
    struct plan_force f;
    int rc = -1;
    switch (kind) {
    case BODY_REGISTRATION:
        if ((rc = body_registration_parse(body, &u.reg, e)) == 0)
            expect(u.reg.name[0] && body_peer_address_valid(u.reg.peer_address) && u.reg.tflops > 0,
                   "a registration has a name, a peer address and a speed");
        break;
    case BODY_HEARTBEAT:
        if ((rc = body_heartbeat_parse(body, &u.hb, e)) == 0)
            expect(strcmp(u.hb.state, "idle") == 0 || strcmp(u.hb.state, "busy") == 0, "an idle or busy node");
        break;
    case BODY_LINKS:
        if ((rc = body_links_parse(body, SELF_NODE, &u.links, e)) == 0)
            check_links(&u.links);
        body_links_free(&u.links);
        break;
    case BODY_PROGRESS:
        if ((rc = body_progress_parse(body, &u.progress, e)) == 0)
            expect(isnan(u.progress.loss) || (u.progress.loss >= 0 && u.progress.loss <= 1e6), "a loss in range");
        break;
    case BODY_FAILURE:
        if ((rc = body_failure_parse(body, &u.failure, e)) == 0)
            expect(u.failure.reason[0], "a failure has a reason");
        break;
    case BODY_NCCL_PUT:
        if ((rc = body_nccl_put_parse(body, &u.nccl, e)) == 0)
            expect(strlen(u.nccl.unique_id) == BODY_NCCL_ID_HEX &&
                   strspn(u.nccl.unique_id, "0123456789abcdef") == BODY_NCCL_ID_HEX, "an id of lowercase hex");
        break;
    case BODY_JOB:
        if ((rc = jobspec_parse(body, &u.job, e)) == 0)
            check_job_roundtrip(&u.job);
        break;
    case BODY_SCHEDULE:
        if ((rc = body_schedule_parse(body, &u.schedule, e)) == 0)
            expect(u.schedule.budget_ms >= 10, "a search budget of 10 ms or more");
        break;
    case BODY_PLAN:
        if ((rc = body_plan_parse(body, &req, &f, e)) == 0)
            check_plan(&req, &f);
        body_plan_free(&f);
        break;
    case BODY_KINDS:
        break;
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct shoal_err e;
    if (size < 1)
        return 0;
    enum body_kind kind = (enum body_kind)((uint8_t)(data[0] - '0') % BODY_KINDS);
    /* POST /v1/jobs/{id}/schedule takes an empty body: every default. */
    if (kind == BODY_SCHEDULE && size == 1) {
        expect(parse_body(kind, NULL, &e) == 0, "an empty schedule body is every default");
        return 0;
    }
    json_t *body = jv_parse_object((const char *)data + 1, size - 1, &e);
    if (!body) {
        check_error(&e);
        return 0;
    }
    if (parse_body(kind, body, &e) != 0)
        check_error(&e);
    json_decref(body);
    return 0;
}
