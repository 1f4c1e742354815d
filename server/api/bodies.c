/* bodies.c - the request bodies the API accepts, parsed into structs (bodies.h). */
#include "bodies.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/hostport.h"
#include "../../common/jsonv.h"
#include "../../common/utf8.h"
#include "../sched/input.h"

/* An unknown member `key` of the object at `path` ("" at the top): its
 * path, cut to 100 bytes at a character boundary so that the error's field
 * and message stay UTF-8 (a client's key may be any length), as jsonv's. */
static int unknown_member(struct shoal_err *e, const char *path, const char *key)
{
    char sub[128];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
    utf8_clip(sub, 100);
    return err_set(e, 400, "unknown_field", path[0] ? path : sub, "unknown field %s", sub);
}

int body_peer_address_check(const char *a, char *why, size_t why_len)
{
    const char *colon = strrchr(a, ':');
    struct addrinfo *ai = NULL;
    if (!colon || colon == a || strchr(a, ' ') || (a[0] == '[' && colon[-1] != ']')) {
        snprintf(why, why_len, "must be host:port with a port from 1 to 65535");
        return -1;
    }
    enum hostport_verdict v = hostport_resolve(a, &ai, why, why_len);
    if (ai)
        freeaddrinfo(ai);
    if (v == HOSTPORT_MALFORMED)
        snprintf(why, why_len, "must be host:port with a port from 1 to 65535");
    return v == HOSTPORT_OK || v == HOSTPORT_UNRESOLVED ? 0 : -1;
}

int body_peer_address_valid(const char *a)
{
    char why[HOSTPORT_WHY_MAX];
    return body_peer_address_check(a, why, sizeof why) == 0;
}

/* A node's peer address, checked (body_peer_address_check) into an error on `field`. */
static int peer_address_field(const char *a, const char *field, struct shoal_err *e)
{
    char why[HOSTPORT_WHY_MAX];
    if (body_peer_address_check(a, why, sizeof why) == 0)
        return 0;
    return err_set(e, 422, "invalid_field", field, "%s %s", field, why);
}

/* ---- nodes ---- */

static const char *const node_states_reported[] = { "idle", "busy", NULL };

#define R(f) offsetof(struct body_registration, f)
#define RS(f) sizeof(((struct body_registration *)0)->f)
/* name, type, required, nullable, min, max, offset, size, choices, fields */
static const struct jv_field hardware_fields[] = {
    { "gpu_model", JV_STR, 0, 0, 0, 127, R(gpu_model), RS(gpu_model), NULL, NULL },
    { "gpu_memory_bytes", JV_INT, 0, 0, 0, 1e15, R(gpu_memory_bytes), 0, NULL, NULL },
    { "gpu_count", JV_INT, 0, 0, 0, 64, R(gpu_count), 0, NULL, NULL },
    { "tflops", JV_NUM, 1, 0, 1e-6, 1e5, R(tflops), 0, NULL, NULL },
    { "cpu_cores", JV_INT, 1, 0, 1, 4096, R(cpu_cores), 0, NULL, NULL },
    { "ram_bytes", JV_INT, 0, 0, 0, 1e15, R(ram_bytes), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field registration_fields[] = {
    { "name", JV_STR, 1, 0, 1, 63, R(name), RS(name), NULL, NULL },
    { "peer_address", JV_STR, 1, 0, 3, 261, R(peer_address), RS(peer_address), NULL, NULL },
    { "region", JV_STR, 0, 0, 0, 63, R(region), RS(region), NULL, NULL },
    { "hardware", JV_OBJ, 1, 0, 0, 0, 0, 0, NULL, hardware_fields },
    { "policy", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, NULL },   /* policy_parse */
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef R
#undef RS

/* The site owner's policy (agent/config.c: --data-roots, --max-memory,
 * --threads) as the node's row keeps it: compact JSON into out ("" when
 * absent or null). */
#define P(f) offsetof(struct body_policy, f)
struct body_policy {
    int64_t max_memory_bytes, threads;
};
static const struct jv_field policy_fields[] = {
    { "max_memory_bytes", JV_INT, 0, 1, 1, 1e15, P(max_memory_bytes), 0, NULL, NULL },
    { "threads", JV_INT, 0, 1, 1, 4096, P(threads), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef P

static int policy_parse(const json_t *policy, char *out, size_t len, struct shoal_err *e)
{
    struct body_policy p = { 0, 0 };
    json_t *roots = json_object_get(policy, "data_roots"), *root;
    size_t i;
    out[0] = '\0';
    if (!policy || json_is_null(policy))
        return 0;
    json_t *rest = json_deep_copy(policy);   /* the scalars, checked by the table; data_roots below */
    if (!rest)
        return err_set(e, 500, "internal", NULL, "out of memory");
    json_object_del(rest, "data_roots");
    int rc = jv_object(rest, policy_fields, "policy", &p, e);
    json_decref(rest);
    if (rc != 0)
        return -1;
    if (roots && (!json_is_array(roots) || json_array_size(roots) < 1 || json_array_size(roots) > BODY_ROOTS_MAX))
        return err_set(e, 422, "invalid_field", "policy.data_roots", "policy.data_roots must be an array of 1 to %d "
                       "absolute paths", BODY_ROOTS_MAX);
    json_array_foreach(roots, i, root) {
        const char *r = json_string_value(root);
        if (!r || r[0] != '/' || json_string_length(root) > BODY_ROOT_MAX || strlen(r) != json_string_length(root))
            return err_set(e, 422, "invalid_field", "policy.data_roots", "policy.data_roots[%zu] must be an "
                           "absolute path of at most %d bytes", i, BODY_ROOT_MAX);
    }
    json_t *norm = json_pack("{s:O?, s:o, s:o}", "data_roots", roots, "max_memory_bytes",
                             p.max_memory_bytes ? json_integer(p.max_memory_bytes) : json_null(), "threads",
                             p.threads ? json_integer(p.threads) : json_null());
    char *text = norm ? json_dumps(norm, JSON_COMPACT) : NULL;
    json_decref(norm);
    if (!text)
        return err_set(e, 500, "internal", NULL, "out of memory");
    rc = strlen(text) < len ? 0 : err_set(e, 422, "invalid_field", "policy", "policy is over %zu bytes", len - 1);
    if (rc == 0)
        memcpy(out, text, strlen(text) + 1);
    free(text);
    return rc;
}

int body_registration_parse(const json_t *body, struct body_registration *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    if (jv_object(body, registration_fields, "", out, e) != 0 ||
        policy_parse(json_object_get(body, "policy"), out->policy, sizeof out->policy, e) != 0)
        return -1;
    return peer_address_field(out->peer_address, "peer_address", e);
}

#define H(f) offsetof(struct body_heartbeat, f)
#define HS(f) sizeof(((struct body_heartbeat *)0)->f)
static const struct jv_field held_fields[] = {
    { "job_id", JV_INT, 1, 0, 1, 9e18, H(held_job_id), 0, NULL, NULL },
    { "layer_start", JV_INT, 1, 0, 0, 65535, H(held_layer_start), 0, NULL, NULL },
    { "layer_end", JV_INT, 1, 0, 1, 65536, H(held_layer_end), 0, NULL, NULL },
    { "step", JV_INT, 1, 0, 0, 9e18, H(held_step), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field heartbeat_fields[] = {
    { "state", JV_STR, 1, 0, 1, 15, H(state), HS(state), node_states_reported, NULL },
    { "job_id", JV_INT, 0, 1, 1, 9e18, H(job_id), 0, NULL, NULL },
    { "step", JV_INT, 0, 1, 0, 9e18, H(step), 0, NULL, NULL },
    { "peer_address", JV_STR, 0, 1, 3, 261, H(peer_address), HS(peer_address), NULL, NULL },
    { "held", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, held_fields },
    { "policy", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, NULL },   /* policy_parse */
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef H
#undef HS

int body_heartbeat_parse(const json_t *body, struct body_heartbeat *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    out->step = -1;
    if (jv_object(body, heartbeat_fields, "", out, e) != 0 ||
        policy_parse(json_object_get(body, "policy"), out->policy, sizeof out->policy, e) != 0)
        return -1;
    if (out->peer_address[0] && peer_address_field(out->peer_address, "peer_address", e) != 0)
        return -1;
    if (out->held_job_id && out->held_layer_end <= out->held_layer_start)
        return err_set(e, 422, "invalid_field", "held.layer_end", "held.layer_end must be above held.layer_start");
    if (out->held_job_id && strcmp(out->state, "idle") != 0)
        return err_set(e, 422, "invalid_field", "held", "only an idle node holds a stage for a live resume");
    return 0;
}

/* ---- links ---- */

struct link_sample {
    int64_t to;
    double latency_ms;        /* round trip / 2 is the agent's business; this is what it measured, ms; NAN: absent */
    double bandwidth_gbps;    /* Gbit/s; NAN: absent */
    int reachable;            /* 0: the caller could not connect at all (no measurements then) */
    char why[BODY_LINK_WHY_MAX + 1];
};

#define S(f) offsetof(struct link_sample, f)
static const struct jv_field sample_fields[] = {
    { "to", JV_INT, 1, 0, 1, 9e18, S(to), 0, NULL, NULL },
    { "latency_ms", JV_NUM, 0, 0, 0, 600000, S(latency_ms), 0, NULL, NULL },
    { "bandwidth_gbps", JV_NUM, 0, 0, 1e-9, 1e5, S(bandwidth_gbps), 0, NULL, NULL },
    { "reachable", JV_BOOL, 0, 0, 0, 0, S(reachable), 0, NULL, NULL },
    { "why", JV_STR, 0, 0, 0, BODY_LINK_WHY_MAX, S(why), sizeof ((struct link_sample *)0)->why, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef S

#define R(f) offsetof(struct body_links, relay.f)
static const struct jv_field relay_link_fields[] = {
    { "address", JV_STR, 1, 0, 3, 261, R(address), sizeof ((struct body_links *)0)->relay.address, NULL, NULL },
    { "latency_ms", JV_NUM, 0, 0, 0, 600000, R(latency_ms), 0, NULL, NULL },
    { "bandwidth_gbps", JV_NUM, 0, 0, 1e-9, 1e5, R(bandwidth_gbps), 0, NULL, NULL },
    { "reachable", JV_BOOL, 0, 0, 0, 0, R(reachable), 0, NULL, NULL },
    { "why", JV_STR, 0, 0, 0, BODY_LINK_WHY_MAX, R(why), sizeof ((struct body_links *)0)->relay.why, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef R

/* The relay's entry is measured (latency and bandwidth) or, reachable
 * false, a probe that failed, with its reason. */
static int relay_kind(const struct body_links *out, struct shoal_err *e)
{
    int measured = !isnan(out->relay.latency_ms) || !isnan(out->relay.bandwidth_gbps);
    if (!out->relay.reachable && measured)
        return err_set(e, 422, "invalid_field", "relay", "relay says reachable false and gives measurements: "
                       "a probe of the relay either measured it or could not");
    if (out->relay.reachable && out->relay.why[0])
        return err_set(e, 422, "invalid_field", "relay.why", "relay.why goes only with \"reachable\": false");
    const char *missing = isnan(out->relay.latency_ms) ? "relay.latency_ms"
                          : isnan(out->relay.bandwidth_gbps) ? "relay.bandwidth_gbps" : NULL;
    if (out->relay.reachable && missing)
        return err_set(e, 400, "missing_field", missing, "%s is missing: a relay link needs latency_ms and "
                       "bandwidth_gbps (or \"reachable\": false when the probe of the relay failed)", missing);
    return 0;
}

/* Checks sample s (at `path`) is either measured or unreachable; an
 * unreachable one goes onto out->unreachable. */
static int sample_kind(const struct link_sample *s, const char *path, struct body_links *out, struct shoal_err *e)
{
    int measured = !isnan(s->latency_ms) || !isnan(s->bandwidth_gbps);
    if (!s->reachable) {
        if (measured)
            return err_set(e, 422, "invalid_field", path, "%s says reachable false and gives measurements: "
                           "a link is either measured or could not be connected", path);
        if (json_array_append_new(out->unreachable, json_pack("{s:I, s:s?}", "to", (json_int_t)s->to, "why",
                                                              s->why[0] ? s->why : NULL)) != 0)
            return err_set(e, 500, "internal", NULL, "out of memory");
        return 0;
    }
    if (s->why[0])
        return err_set(e, 422, "invalid_field", path, "%s.why goes only with \"reachable\": false", path);
    if (isnan(s->latency_ms) || isnan(s->bandwidth_gbps))
        return err_set(e, 400, "missing_field", path, "%s needs latency_ms and bandwidth_gbps (or \"reachable\": "
                       "false when the link could not be connected)", path);
    return 0;
}

/* 1 if `id` is 1..BODY_LINKS_REPORT_ID_MAX of [A-Za-z0-9._-]. */
static int report_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > BODY_LINKS_REPORT_ID_MAX)
        return 0;
    return strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* report_id: a name of [A-Za-z0-9._-], or absent or null. */
static int links_report_id(const json_t *body, const char **report_id, struct shoal_err *e)
{
    json_t *rid = json_object_get(body, "report_id");
    *report_id = NULL;
    if (!rid || json_is_null(rid))
        return 0;
    if (!json_is_string(rid))
        return err_set(e, 400, "invalid_field", "report_id", "report_id must be a string");
    /* strlen stops at an embedded NUL, which the length check then catches. */
    if (strlen(json_string_value(rid)) != json_string_length(rid) || !report_id_valid(json_string_value(rid)))
        return err_set(e, 422, "invalid_field", "report_id", "report_id must be 1 to %d of A-Z a-z 0-9 . _ -",
                       BODY_LINKS_REPORT_ID_MAX);
    *report_id = json_string_value(rid);
    return 0;
}

int body_links_parse(const json_t *body, int64_t self, struct body_links *out, struct shoal_err *e)
{
    const char *key;
    json_t *val;
    memset(out, 0, sizeof *out);
    buf_init(&out->to, 1 << 20);
    buf_init(&out->latency_ms, 1 << 20);
    buf_init(&out->bandwidth_gbps, 1 << 20);
    out->unreachable = json_array();
    if (!out->unreachable)
        return err_set(e, 500, "internal", NULL, "out of memory");
    json_object_foreach((json_t *)body, key, val) {
        if (strcmp(key, "samples") != 0 && strcmp(key, "from") != 0 && strcmp(key, "report_id") != 0 &&
            strcmp(key, "relay") != 0)
            return unknown_member(e, "", key);
    }
    if (links_report_id(body, &out->report_id, e) != 0)
        return -1;
    json_t *from = json_object_get(body, "from");
    if (from && !json_is_integer(from))
        return err_set(e, 400, "invalid_field", "from", "from must be an integer node id");
    if (from && json_integer_value(from) != self)
        return err_set(e, 403, "forbidden", "from", "a node may only report its own links (from = %lld)",
                       (long long)self);
    json_t *relay = json_object_get(body, "relay");
    out->relay.latency_ms = out->relay.bandwidth_gbps = NAN;
    out->relay.reachable = 1;
    if (relay && !json_is_null(relay) &&
        (jv_object(relay, relay_link_fields, "relay", out, e) != 0 || relay_kind(out, e) != 0))
        return -1;
    int has_relay = out->relay.address[0] != '\0';
    json_t *samples = json_object_get(body, "samples");
    if (!json_is_array(samples) && (samples || !has_relay))
        return err_set(e, 400, samples ? "invalid_field" : "missing_field", "samples",
                       "samples must be an array of {to, latency_ms, bandwidth_gbps} or {to, reachable: false}");
    size_t n = json_array_size(samples);
    if ((n == 0 && !has_relay) || n > BODY_LINKS_MAX_SAMPLES)
        return err_set(e, 422, "invalid_field", "samples", "samples must hold 1 to %d entries (0 with a relay)",
                       BODY_LINKS_MAX_SAMPLES);
    size_t measured = 0;
    for (size_t i = 0; i < n; i++) {
        struct link_sample s = { .latency_ms = NAN, .bandwidth_gbps = NAN, .reachable = 1 };
        char path[32];
        snprintf(path, sizeof path, "samples[%zu]", i);
        if (jv_object(json_array_get(samples, i), sample_fields, path, &s, e) != 0)
            return -1;
        if (s.to == self)
            return err_set(e, 422, "invalid_field", path, "%s.to is the reporting node itself", path);
        if (sample_kind(&s, path, out, e) != 0)
            return -1;
        if (!s.reachable)
            continue;
        const char *sep = measured++ ? "," : "{";
        if (buf_printf(&out->to, "%s%lld", sep, (long long)s.to) ||
            buf_printf(&out->latency_ms, "%s%.17g", sep, s.latency_ms) ||
            buf_printf(&out->bandwidth_gbps, "%s%.17g", sep, s.bandwidth_gbps))
            return err_set(e, 413, "body_too_large", "samples", "too many samples");
    }
    const char *end = measured ? "}" : "{}";
    if (buf_append(&out->to, end, strlen(end)) || buf_append(&out->latency_ms, end, strlen(end)) ||
        buf_append(&out->bandwidth_gbps, end, strlen(end)))
        return err_set(e, 413, "body_too_large", "samples", "too many samples");
    return 0;
}

void body_links_free(struct body_links *out)
{
    buf_free(&out->to);
    buf_free(&out->latency_ms);
    buf_free(&out->bandwidth_gbps);
    json_decref(out->unreachable);
    out->unreachable = NULL;
    out->report_id = NULL;
}

/* ---- progress and failures ---- */

#define PROGRESS_MAX_SECONDS 1e7   /* s; a step slower than ~4 months is a bug, not a measurement */

#define P(f) offsetof(struct body_progress, f)
static const struct jv_field progress_fields[] = {
    { "job_id", JV_INT, 1, 0, 1, 9e18, P(job_id), 0, NULL, NULL },
    { "epoch", JV_INT, 1, 0, 0, 2147483647, P(epoch), 0, NULL, NULL },
    { "step", JV_INT, 1, 0, 0, 9e18, P(step), 0, NULL, NULL },
    { "stage", JV_INT, 1, 0, 0, 1023, P(stage), 0, NULL, NULL },
    { "replica", JV_INT, 1, 0, 0, 4095, P(replica), 0, NULL, NULL },
    { "loss", JV_NUM, 0, 1, 0, 1e6, P(loss), 0, NULL, NULL },
    { "iteration_s", JV_NUM, 1, 0, 0, PROGRESS_MAX_SECONDS, P(iteration_s), 0, NULL, NULL },
    { "compute_s", JV_NUM, 1, 0, 0, PROGRESS_MAX_SECONDS, P(compute_s), 0, NULL, NULL },
    { "send_s", JV_NUM, 1, 0, 0, PROGRESS_MAX_SECONDS, P(send_s), 0, NULL, NULL },
    { "recv_wait_s", JV_NUM, 1, 0, 0, PROGRESS_MAX_SECONDS, P(recv_wait_s), 0, NULL, NULL },
    { "allreduce_s", JV_NUM, 1, 0, 0, PROGRESS_MAX_SECONDS, P(allreduce_s), 0, NULL, NULL },
    { "bubble_s", JV_NUM, 1, 0, 0, PROGRESS_MAX_SECONDS, P(bubble_s), 0, NULL, NULL },
    { "tokens", JV_INT, 1, 0, 0, 9e15, P(tokens), 0, NULL, NULL },
    { "eval_s", JV_NUM, 0, 0, 0, PROGRESS_MAX_SECONDS, P(eval_s), 0, NULL, NULL },
    { "val_loss", JV_NUM, 0, 1, 0, 1e6, P(val_loss), 0, NULL, NULL },
    { "val_micro_batches", JV_INT, 0, 0, 0, 1 << 20, P(val_micro_batches), 0, NULL, NULL },
    { "stage_link_bytes", JV_INT, 0, 0, 0, 9e15, P(stage_link_bytes), 0, NULL, NULL },
    { "sync_bytes", JV_INT, 0, 0, 0, 9e15, P(sync_bytes), 0, NULL, NULL },
    { "ring_prev_loss", JV_NUM, 0, 1, 0, 1e6, P(ring_prev_loss), 0, NULL, NULL },
    { "checkpoint_error", JV_STR, 0, 1, 1, 1000, P(checkpoint_error),
      sizeof(((struct body_progress *)0)->checkpoint_error), NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef P

int body_progress_parse(const json_t *body, struct body_progress *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    out->loss = out->val_loss = out->ring_prev_loss = NAN;
    out->val_micro_batches = out->stage_link_bytes = out->sync_bytes = -1;
    if (jv_object(body, progress_fields, "", out, e) != 0)
        return -1;
    if ((out->val_micro_batches > 0) != !isnan(out->val_loss))
        return err_set(e, 422, "invalid_field", "val_loss", "val_loss comes with val_micro_batches > 0, the "
                       "validation micro-batches it is the mean of");
    return 0;
}

static const char *const failure_causes[] = { BODY_FAILURE_DATASET, NULL };

#define F(f) offsetof(struct body_failure, f)
#define FS(f) sizeof(((struct body_failure *)0)->f)
static const struct jv_field failure_fields[] = {
    { "job_id", JV_INT, 1, 0, 1, 9e18, F(job_id), 0, NULL, NULL },
    { "epoch", JV_INT, 1, 0, 0, 2147483647, F(epoch), 0, NULL, NULL },
    { "stage", JV_INT, 1, 0, 0, 1023, F(stage), 0, NULL, NULL },
    { "replica", JV_INT, 1, 0, 0, 4095, F(replica), 0, NULL, NULL },
    { "reason", JV_STR, 1, 0, 1, 1000, F(reason), FS(reason), NULL, NULL },
    { "peer", JV_STR, 0, 1, 3, 261, F(peer), FS(peer), NULL, NULL },
    { "peer_node", JV_INT, 0, 1, 1, 9e18, F(peer_node), 0, NULL, NULL },
    { "cause", JV_STR, 0, 1, 1, 15, F(cause), FS(cause), failure_causes, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef F
#undef FS

int body_failure_parse(const json_t *body, struct body_failure *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    if (jv_object(body, failure_fields, "", out, e) != 0)
        return -1;
    if (out->peer[0] && !body_peer_address_valid(out->peer))
        return err_set(e, 422, "invalid_field", "peer", "peer must be host:port with a port from 1 to 65535, or null");
    return 0;
}

/* ---- NCCL ids ---- */

#define N(f) offsetof(struct body_nccl_put, f)
static const struct jv_field nccl_put_fields[] = {
    { "job_id", JV_INT, 1, 0, 1, 9e18, N(job_id), 0, NULL, NULL },
    { "epoch", JV_INT, 1, 0, 0, 2147483647, N(epoch), 0, NULL, NULL },
    { "stage", JV_INT, 1, 0, 0, 1023, N(stage), 0, NULL, NULL },
    { "unique_id", JV_STR, 1, 0, BODY_NCCL_ID_HEX, BODY_NCCL_ID_HEX, N(unique_id),
      sizeof(((struct body_nccl_put *)0)->unique_id), NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef N

/* Lowercases `hex` in place.  Returns 0 if it is all hex digits, else -1. */
static int nccl_hex_lower(char *hex)
{
    for (char *c = hex; *c; c++) {
        if (*c >= 'A' && *c <= 'F')
            *c = (char)(*c - 'A' + 'a');
        else if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return -1;
    }
    return 0;
}

int body_nccl_put_parse(const json_t *body, struct body_nccl_put *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    if (jv_object(body, nccl_put_fields, "", out, e) != 0)
        return -1;
    if (nccl_hex_lower(out->unique_id) != 0)
        return err_set(e, 422, "invalid_field", "unique_id", "unique_id must be %d hex digits (the 128-byte "
                       "ncclUniqueId)", BODY_NCCL_ID_HEX);
    return 0;
}

/* ---- dataset identity ---- */

static const char *const dataset_sources[] = { "data", "validation", NULL };
#define D(f) offsetof(struct body_dataset, f)
static const struct jv_field dataset_fields[] = {
    { "job_id", JV_INT, 1, 0, 1, 9e18, D(job_id), 0, NULL, NULL },
    { "epoch", JV_INT, 1, 0, 0, 2147483647, D(epoch), 0, NULL, NULL },
    { "source", JV_STR, 1, 0, 1, 15, D(source), sizeof(((struct body_dataset *)0)->source), dataset_sources, NULL },
    { "sha256", JV_STR, 0, 1, 64, 64, D(sha256), sizeof(((struct body_dataset *)0)->sha256), NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef D

int body_dataset_parse(const json_t *body, struct body_dataset *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    if (jv_object(body, dataset_fields, "", out, e) != 0)
        return -1;
    if (out->sha256[0] && nccl_hex_lower(out->sha256) != 0)
        return err_set(e, 422, "invalid_field", "sha256", "sha256 must be 64 hex digits, or null (no manifest)");
    return 0;
}

/* ---- schedules and forced plans ---- */

static const char *const cost_models[] = { "shoal", "dtfm", NULL };

#define Q(f) offsetof(struct plan_request, f)
#define QS(f) sizeof(((struct plan_request *)0)->f)
static const struct jv_field fill_fields[] = {
    { "latency_ms", JV_NUM, 1, 0, 0, 600000, Q(fill_latency_ms), 0, NULL, NULL },
    { "bandwidth_gbps", JV_NUM, 1, 0, 1e-6, 1e5, Q(fill_bandwidth_gbps), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
/* The forced plan's members besides `stages` (checked by hand). */
static const struct jv_field plan_fields[] = {
    { "cost_model", JV_STR, 0, 0, 1, 7, Q(cost_model), QS(cost_model), cost_models, NULL },
    { "dry_run", JV_BOOL, 0, 0, 0, 0, Q(dry_run), 0, NULL, NULL },
    { "replan", JV_BOOL, 0, 0, 0, 0, Q(replan), 0, NULL, NULL },
    { "fill_missing_links", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, fill_fields },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field schedule_fields[] = {
    { "cost_model", JV_STR, 0, 0, 1, 7, Q(cost_model), QS(cost_model), cost_models, NULL },
    { "seed", JV_INT, 0, 0, 0, 9007199254740991.0, Q(seed), 0, NULL, NULL },
    { "budget_ms", JV_INT, 0, 0, 10, 120000, Q(budget_ms), 0, NULL, NULL },
    { "candidates", JV_INT, 0, 0, 0, 1e9, Q(candidates), 0, NULL, NULL },
    { "dry_run", JV_BOOL, 0, 0, 0, 0, Q(dry_run), 0, NULL, NULL },
    { "replan", JV_BOOL, 0, 0, 0, 0, Q(replan), 0, NULL, NULL },
    { "fill_missing_links", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, fill_fields },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef Q
#undef QS

int body_schedule_parse(const json_t *body, struct plan_request *out, struct shoal_err *e)
{
    memset(out, 0, sizeof *out);
    out->seed = 1;
    out->budget_ms = 2000;
    out->fill_latency_ms = out->fill_bandwidth_gbps = INPUT_NO_FILL;
    snprintf(out->cost_model, sizeof out->cost_model, "shoal");
    return body ? jv_object(body, schedule_fields, "", out, e) : 0;
}

/* An integer member of a stage entry, or -1 when absent; -2 (e set) when
 * it is not an integer in [0, max]. */
static long stage_int(const json_t *st, const char *key, const char *path, long max, struct shoal_err *e)
{
    json_t *v = json_object_get(st, key);
    if (!v)
        return -1;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
        err_set(e, json_is_integer(v) ? 422 : 400, "invalid_field", path, "%s.%s must be an integer 0..%ld",
                path, key, max);
        return -2;
    }
    return (long)json_integer_value(v);
}

/* `stages`: [{"stage"?, "nodes": [ids], "layer_start"?, "layer_end"?}].
 * Layer ranges come with every stage or with none.  Fills f (arrays the
 * caller frees). */
static int plan_stages_parse(const json_t *stages, struct plan_force *f, struct shoal_err *e)
{
    if (!json_is_array(stages))
        return err_set(e, 400, stages ? "invalid_field" : "missing_field", "stages",
                       "stages must be an array of {nodes: [node ids], layer_start, layer_end}");
    size_t P = json_array_size(stages);
    if (P == 0 || P > BODY_PLAN_MAX_STAGES)
        return err_set(e, 422, "invalid_field", "stages", "stages must hold 1 to %d entries", BODY_PLAN_MAX_STAGES);
    f->stages = (int)P;
    int with_layers = 0;
    int64_t *ids = NULL;
    int *start = calloc(P, sizeof *start), *end = calloc(P, sizeof *end);
    f->layer_start = start;
    f->layer_end = end;
    if (!start || !end)
        return err_set(e, 500, "internal", NULL, "out of memory");
    for (size_t s = 0; s < P; s++) {
        json_t *st = json_array_get(stages, s), *val;
        const char *key;
        char path[32];
        snprintf(path, sizeof path, "stages[%zu]", s);
        if (!json_is_object(st))
            return err_set(e, 400, "invalid_field", path, "%s must be an object", path);
        json_object_foreach(st, key, val) {
            if (strcmp(key, "stage") && strcmp(key, "nodes") && strcmp(key, "layer_start") && strcmp(key, "layer_end"))
                return unknown_member(e, path, key);
        }
        long idx = stage_int(st, "stage", path, BODY_PLAN_MAX_STAGES, e);
        long ls = stage_int(st, "layer_start", path, 1L << 20, e), le = stage_int(st, "layer_end", path, 1L << 20, e);
        if (idx == -2 || ls == -2 || le == -2)
            return -1;
        if (idx >= 0 && idx != (long)s)
            return err_set(e, 422, "invalid_field", path, "%s.stage is %ld; stages are listed in order", path, idx);
        if ((ls >= 0) != (le >= 0) || (s > 0 && (ls >= 0) != with_layers))
            return err_set(e, 422, "invalid_field", path, "give layer_start and layer_end with every stage or "
                           "with none (then the cost model splits the layers)");
        with_layers = ls >= 0;
        start[s] = (int)ls;
        end[s] = (int)le;
        json_t *nodes = json_object_get(st, "nodes");
        size_t D = json_array_size(nodes);
        if (!json_is_array(nodes) || D == 0 || D > BODY_PLAN_MAX_REPLICAS)
            return err_set(e, json_is_array(nodes) ? 422 : 400, "invalid_field", path,
                           "%s.nodes must be an array of 1 to %d node ids, one per replica", path,
                           BODY_PLAN_MAX_REPLICAS);
        if (s == 0) {
            f->replicas = (int)D;
            if (!(ids = calloc(P * D, sizeof *ids)))
                return err_set(e, 500, "internal", NULL, "out of memory");
            f->node_ids = ids;
        } else if ((int)D != f->replicas) {
            return err_set(e, 422, "invalid_field", path, "every stage needs as many nodes (replicas) as stage 0");
        }
        for (size_t r = 0; r < D; r++) {
            json_t *id = json_array_get(nodes, r);
            if (!json_is_integer(id) || json_integer_value(id) < 1)
                return err_set(e, 400, "invalid_field", path, "%s.nodes[%zu] must be a node id", path, r);
            ids[s * D + r] = json_integer_value(id);
        }
    }
    if (!with_layers) {
        free(start);
        f->layer_start = f->layer_end = NULL;
        free(end);
    }
    return 0;
}

int body_plan_parse(const json_t *body, struct plan_request *req, struct plan_force *f, struct shoal_err *e)
{
    memset(req, 0, sizeof *req);
    memset(f, 0, sizeof *f);
    req->fill_latency_ms = req->fill_bandwidth_gbps = INPUT_NO_FILL;
    snprintf(req->cost_model, sizeof req->cost_model, "shoal");
    /* The members besides `stages` go through the table, on a copy without it. */
    json_t *rest = json_deep_copy(body);
    json_object_del(rest, "stages");
    int rc = jv_object(rest, plan_fields, "", req, e) != 0 ||
             plan_stages_parse(json_object_get(body, "stages"), f, e) != 0 ? -1 : 0;
    json_decref(rest);
    return rc;
}

void body_plan_free(struct plan_force *f)
{
    free((void *)f->node_ids);
    free((void *)f->layer_start);
    free((void *)f->layer_end);
    memset(f, 0, sizeof *f);
}
