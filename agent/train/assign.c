/* assign.c - parsing and checking an assignment (assign.h). */
#include "assign.h"

#include <stdio.h>
#include <string.h>

#include "../../common/hex.h"
#include "../../common/model_json.h"

/* The neighbour at entry `index` of `list` (whose `key` must equal index),
 * which runs tasklet (stage, replica), with the key of our link to it. */
static int peer_at(const json_t *list, const char *key, int index, int stage, int replica, struct assign_peer *out,
                   struct shoal_err *err)
{
    const json_t *e = json_array_get(list, (size_t)index);
    const char *addr = json_string_value(json_object_get(e, "peer_address"));
    json_int_t node = json_integer_value(json_object_get(e, "node_id"));
    if (!addr || json_integer_value(json_object_get(e, key)) != index || strlen(addr) >= ASSIGN_ADDR_MAX ||
        node < 1)
        return err_set(err, 502, "bad_assignment", key, "the assignment has no valid peer for %s %d", key, index);
    if (hex_decode(json_string_value(json_object_get(e, "link_key")), out->key, sizeof out->key) != 0)
        return err_set(err, 502, "bad_assignment", key, "the assignment's link to %s %d has no key of %zu hex "
                       "bytes", key, index, sizeof out->key);
    snprintf(out->addr, ASSIGN_ADDR_MAX, "%s", addr);
    out->node = node, out->stage = stage, out->replica = replica;
    return 0;
}

/* The server's ticket for our end of relayed link p, entry e's
 * "<x>_ticket" beside its "<x>_way" `key`: it must admit our side of this
 * link (job, epoch, channel, the two tasklets), or the relay would refuse
 * it anyway, later and with less to go on. */
static int link_ticket(const json_t *e, const char *key, int we_send, const struct assignment *o,
                       struct assign_peer *p, struct shoal_err *err)
{
    char name[32], why[128];
    int stem = (int)(strlen(key) - strlen("_way"));
    struct relay_ticket want = { .side = we_send ? RELAY_SIDE_DIALER : RELAY_SIDE_LISTENER, .channel = p->channel,
                                 .epoch = o->epoch, .job_id = o->job_id };
    struct relay_end us = { o->stage, o->replica, o->node_id }, them = { p->stage, p->replica, p->node };
    want.dialer = we_send ? us : them;
    want.listener = we_send ? them : us;
    snprintf(name, sizeof name, "%.*s_ticket", stem, key);
    const char *hex = json_string_value(json_object_get(e, name));
    if (!hex)
        return err_set(err, 502, "bad_assignment", name, "the assignment relays a link but has no %s for it (a "
                       "server from before relay tickets: upgrade it)", name);
    if (relay_ticket_from_hex(hex, &p->ticket, why, sizeof why) != 0)
        return err_set(err, 502, "bad_assignment", name, "the assignment's %s is malformed: %s", name, why);
    if (p->ticket.side != want.side || !relay_ticket_same_link(&p->ticket, &want))
        return err_set(err, 502, "bad_assignment", name, "the assignment's %s is not for this node's end of the "
                       "link to stage %d replica %d", name, p->stage, p->replica);
    return 0;
}

/* Our end of a connection from the plan's way for it, entry e's `key`
 * ("dial", "reverse", "relay"; absent from an older server: "dial", or
 * for "next_way" what "dials_next" said): we_send 1 when we are the end
 * that dials unless the way is reversed (the lower stage, the ring edge's
 * or the tied head's sender).  An edge (ring, tied head) is told from the
 * pair's other connection by its channel; a pipeline link has one.  A
 * relayed link to a neighbour takes its ticket. */
static int link_end(const json_t *e, const char *key, int we_send, int edge, const struct assignment *o,
                    struct assign_peer *p, struct shoal_err *err)
{
    const json_t *v = json_object_get(e, key);
    const char *way = json_string_value(v);
    if (!v)
        way = strcmp(key, "next_way") == 0 && json_is_false(json_object_get(e, "dials_next")) ? "reverse" : "dial";
    int reverse = way && strcmp(way, "reverse") == 0, relay = way && strcmp(way, "relay") == 0;
    if (!way || (!reverse && !relay && strcmp(way, "dial") != 0))
        return err_set(err, 502, "bad_assignment", key, "the assignment's %s is not dial, reverse or relay", key);
    if (relay && !o->relay[0])
        return err_set(err, 502, "bad_assignment", "relay", "the assignment relays a link but names no relay");
    if (relay)
        p->way = we_send ? ASSIGN_RELAY_DIAL : ASSIGN_RELAY_TAKE;
    else
        p->way = we_send != reverse ? ASSIGN_DIAL : ASSIGN_TAKE;
    p->channel = !edge ? WIRE_CHANNEL_STAGE : reverse ? WIRE_CHANNEL_RECEIVES : WIRE_CHANNEL_SENDS;
    return relay && p->addr[0] ? link_ticket(e, key, we_send, o, p, err) : 0;
}

/* This tasklet's own entry in `list`: no link, no key. */
static int self_at(const json_t *list, const char *key, int index, int64_t *node, struct shoal_err *err)
{
    const json_t *e = json_array_get(list, (size_t)index);
    json_int_t n = json_integer_value(json_object_get(e, "node_id"));
    if (json_integer_value(json_object_get(e, key)) != index || n < 1)
        return err_set(err, 502, "bad_assignment", key, "the assignment does not name this node at %s %d", key,
                       index);
    *node = n;
    return 0;
}

/* The resume checkpoint's files and their layers: [{stage, layer_start,
 * layer_end}], by stage; a missing list or null layers leave them unknown
 * (-1), which means "the same split as now". */
static int resume_layers(const json_t *files, struct assignment *o, struct shoal_err *err)
{
    size_t i;
    json_t *f;
    o->resume_stages = (int)json_array_size(files);
    if (o->resume_stages > ASSIGN_STAGES_MAX)
        return err_set(err, 502, "bad_assignment", "resume", "the resume point has %d stage files", o->resume_stages);
    json_array_foreach(files, i, f) {
        json_t *ls = json_object_get(f, "layer_start"), *le = json_object_get(f, "layer_end");
        if (json_integer_value(json_object_get(f, "stage")) != (json_int_t)i)
            return err_set(err, 502, "bad_assignment", "resume", "the resume point's stage files are not in order");
        o->resume_layers[i].layer_start = json_is_integer(ls) ? (int)json_integer_value(ls) : -1;
        o->resume_layers[i].layer_end = json_is_integer(le) ? (int)json_integer_value(le) : -1;
        if (json_is_integer(ls) && (o->resume_layers[i].layer_start < 0 ||
                                    o->resume_layers[i].layer_end <= o->resume_layers[i].layer_start ||
                                    o->resume_layers[i].layer_end > o->model.layers))
            return err_set(err, 502, "bad_assignment", "resume", "the resume point's stage %zu holds no valid layers", i);
    }
    return 0;
}

/* The spec's "communication" object; absent (a spec from before it): f32
 * stage links, every step. */
static int parse_communication(const json_t *c, struct assignment *o, struct shoal_err *err)
{
    const char *link = "f32", *sync = "every_step", *sync_dtype = "f32";
    json_int_t H = 1;
    double lr = 1, mu = 0;
    json_error_t je;
    if (c && json_unpack_ex((json_t *)c, &je, 0, "{s?s, s?s, s?I, s?F, s?F, s?s}", "stage_link", &link, "sync", &sync,
                            "inner_steps", &H, "outer_learning_rate", &lr, "outer_momentum", &mu,
                            "sync_dtype", &sync_dtype) != 0)
        return err_set(err, 502, "bad_assignment", "spec.communication", "the job's communication is malformed: %s",
                       je.text);
    const struct codec *lc = codec_by_name(link), *sc = codec_by_name(sync_dtype);
    if (!lc || !sc)
        return err_set(err, 502, "bad_assignment", "spec.communication", "unknown wire type '%s': this agent knows "
                       "f32, bf16 and int8; upgrade it", lc ? sync_dtype : link);
    if (strcmp(sync, "every_step") == 0)
        o->sync = ASSIGN_SYNC_EVERY_STEP;
    else if (strcmp(sync, "diloco") == 0)
        o->sync = ASSIGN_SYNC_DILOCO;
    else
        return err_set(err, 502, "bad_assignment", "spec.communication", "unknown sync mode '%s'", sync);
    if (H < 1 || (o->sync == ASSIGN_SYNC_EVERY_STEP && H != 1) || !(lr > 0) || !(mu >= 0 && mu < 1))
        return err_set(err, 502, "bad_assignment", "spec.communication", "the job's communication is inconsistent");
    o->stage_link = lc->id;
    o->sync_codec = sc->id;
    o->inner_steps = H;
    o->outer_lr = lr;
    o->outer_momentum = mu;
    return 0;
}

/* The spec's "validation" object, or null. */
static int parse_validation(const json_t *v, struct assignment *o, struct shoal_err *err)
{
    const char *format = o->data_format;
    json_int_t n = 0, every = 0;
    json_t *pv = NULL, *hv = NULL;
    json_error_t je;
    if (!v || json_is_null(v))
        return 0;
    if (json_unpack_ex((json_t *)v, &je, 0, "{s?o, s?s, s?o, s:I, s:I}", "path", &pv, "format", &format,
                       "holdout", &hv, "sequences", &n, "eval_interval", &every) != 0)
        return err_set(err, 502, "bad_assignment", "spec.validation", "the job's validation is malformed: %s",
                       je.text);
    const char *path = json_string_value(pv);   /* NULL when null or absent */
    double holdout = json_is_number(hv) ? json_number_value(hv) : 0;
    if (n < 1 || n % o->micro_batch_size || n > 1 << 20 || every < 1 || !path == !(holdout > 0) ||
        holdout > 0.5 || (path && strlen(path) >= sizeof o->val_path) || strlen(format) >= sizeof o->val_format)
        return err_set(err, 502, "bad_assignment", "spec.validation", "the job's validation is inconsistent");
    o->has_validation = 1;
    snprintf(o->val_path, sizeof o->val_path, "%s", path ? path : "");
    snprintf(o->val_format, sizeof o->val_format, "%s", format);
    o->val_holdout = holdout;
    o->val_sequences = (int)n;
    o->eval_interval = every;
    return 0;
}

/* {step, root}: the epoch starts at `step` from the state its nodes hold
 * (the job's steps: trained, its final checkpoint to store again);
 * `root` (null: none) hands it to the stage's other replicas (live.h). */
static int parse_live(const json_t *live, struct assignment *o, struct shoal_err *err)
{
    json_int_t step, root = -1;
    json_t *r = json_object_get(live, "root");
    if (json_unpack((json_t *)live, "{s:I}", "step", &step) != 0 || step < 1 || step > o->steps ||
        (r && !json_is_null(r) && (!json_is_integer(r) || (root = json_integer_value(r)) < 0 ||
                                   root >= o->replicas)))
        return err_set(err, 502, "bad_assignment", "live", "the assignment's live resume is malformed");
    if (o->sync != ASSIGN_SYNC_EVERY_STEP)
        return err_set(err, 502, "bad_assignment", "live", "a live resume needs sync every_step (under diloco "
                       "the replicas differ between outer steps)");
    o->live = 1;
    o->live_root = (int)root;
    o->resume_step = step;
    return 0;
}

int assign_parse(const json_t *a, struct assignment *o, struct shoal_err *err)
{
    json_t *spec, *pipeline, *group, *resume = NULL, *live = NULL;
    json_int_t job, epoch, stage, replica, stages, replicas, ls, le;
    json_int_t M, B, steps, warmup, seed, ckpt;
    double lr, wd, clip;
    const char *schedule, *path, *format, *allreduce = "ring";
    json_error_t je;
    memset(o, 0, sizeof *o);
    if (json_unpack_ex((json_t *)a, &je, 0, "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s?s, s?o, s?o}",
                       "job_id", &job, "epoch", &epoch, "stage", &stage, "replica", &replica,
                       "stages", &stages, "replicas", &replicas, "layer_start", &ls, "layer_end", &le,
                       "spec", &spec, "pipeline", &pipeline, "group", &group,
                       "allreduce", &allreduce, "resume", &resume, "live", &live) != 0)
        return err_set(err, 502, "bad_assignment", NULL, "the server's assignment is malformed: %s", je.text);
    if (json_unpack_ex(spec, &je, 0,
                       "{s:{s:I, s:I, s:s},"
                       " s:{s:I, s:F, s:I, s:F, s:F, s:I}, s:{s:s, s:s}, s:I}",
                       "parallelism", "micro_batches", &M, "micro_batch_size", &B, "schedule", &schedule,
                       "training", "steps", &steps, "learning_rate", &lr, "warmup_steps", &warmup,
                       "weight_decay", &wd, "grad_clip", &clip, "seed", &seed,
                       "data", "path", &path, "format", &format, "checkpoint_interval", &ckpt) != 0)
        return err_set(err, 502, "bad_assignment", "spec", "the assignment's job spec is malformed: %s", je.text);
    struct shoal_err merr;
    if (model_json_parse(json_object_get(spec, "model"), "spec.model", &o->model, &merr) != 0)
        return err_set(err, 502, "bad_assignment", merr.field, "the assignment's model is not one this agent can "
                       "build: %s", merr.message);
    json_int_t L = o->model.layers;
    /* The epoch's micro-batches per replica: the spec's, unless a re-plan
     * short of nodes trains fewer replicas, each more (absent from a server
     * from before that: the spec's). */
    json_t *epoch_m = json_object_get(a, "micro_batches");
    if (epoch_m)
        M = json_is_integer(epoch_m) ? json_integer_value(epoch_m) : 0;
    if (stages < 1 || replicas < 1 || stage < 0 || stage >= stages || replica < 0 || replica >= replicas ||
        ls < 0 || le <= ls || le > L || epoch < 0 || epoch > UINT32_MAX || job < 1 || M < 1 || B < 1 ||
        steps < 1 || (json_int_t)json_array_size(pipeline) != stages ||
        (json_int_t)json_array_size(group) != replicas || strlen(path) >= sizeof o->data_path ||
        strlen(format) >= sizeof o->data_format || M > 1 << 20)
        return err_set(err, 502, "bad_assignment", NULL, "the server's assignment is inconsistent");
    /* A server from before NCCL groups sends no "allreduce": the ring. */
    if (strcmp(allreduce, "ring") == 0)
        o->allreduce = ASSIGN_ALLREDUCE_RING;
    else if (strcmp(allreduce, "nccl") == 0)
        o->allreduce = ASSIGN_ALLREDUCE_NCCL;
    else
        return err_set(err, 502, "bad_assignment", "allreduce", "unknown all-reduce '%s'", allreduce);
    if (pipe_parse(schedule, &o->schedule) != 0)
        return err_set(err, 502, "bad_assignment", "spec", "unknown pipeline schedule '%s'", schedule);
    o->job_id = job, o->epoch = (uint32_t)epoch, o->stage = (int)stage, o->replica = (int)replica;
    o->stages = (int)stages, o->replicas = (int)replicas, o->layer_start = (int)ls, o->layer_end = (int)le;
    o->micro_batches = (int)M, o->micro_batch_size = (int)B, o->steps = steps, o->learning_rate = lr;
    o->warmup_steps = warmup, o->weight_decay = wd, o->grad_clip = clip, o->seed = (uint64_t)seed;
    o->checkpoint_interval = ckpt;
    snprintf(o->data_path, sizeof o->data_path, "%s", path);
    snprintf(o->data_format, sizeof o->data_format, "%s", format);
    /* {data, validation}: hex or null; absent from a server from before it */
    json_t *ds = json_object_get(a, "dataset");
    const char *dsha = json_string_value(json_object_get(ds, "data"));
    const char *vsha = json_string_value(json_object_get(ds, "validation"));
    if ((dsha && strlen(dsha) != 64) || (vsha && strlen(vsha) != 64))
        return err_set(err, 502, "bad_assignment", "dataset", "the assignment's dataset digests are malformed");
    snprintf(o->data_sha256, sizeof o->data_sha256, "%s", dsha ? dsha : "");
    snprintf(o->val_sha256, sizeof o->val_sha256, "%s", vsha ? vsha : "");
    if (parse_communication(json_object_get(spec, "communication"), o, err) != 0 ||
        parse_validation(json_object_get(spec, "validation"), o, err) != 0)
        return -1;
    if (self_at(pipeline, "stage", o->stage, &o->node_id, err) != 0)
        return -1;
    if (stage > 0 && peer_at(pipeline, "stage", o->stage - 1, o->stage - 1, o->replica, &o->prev_stage, err) != 0)
        return -1;
    if (stage < stages - 1 &&
        peer_at(pipeline, "stage", o->stage + 1, o->stage + 1, o->replica, &o->next_stage, err) != 0)
        return -1;
    /* How each connection is made: stage s's "next_way" for its link to
     * s+1, a group entry's "up_way" for the ring edge from that replica to
     * the next, a pipeline entry's "tie_way" for the tied head's edge from
     * that stage to the other end. */
    const char *relay = json_string_value(json_object_get(a, "relay"));
    if (relay && (!relay[0] || strlen(relay) >= sizeof o->relay))
        return err_set(err, 502, "bad_assignment", "relay", "the assignment's relay is malformed");
    snprintf(o->relay, sizeof o->relay, "%s", relay ? relay : "");
    const json_t *mine = json_array_get(pipeline, (size_t)stage), *below = json_array_get(pipeline, (size_t)stage - 1);
    if (link_end(mine, "next_way", 1, 0, o, &o->next_stage, err) != 0 ||
        (stage > 0 && link_end(below, "next_way", 0, 0, o, &o->prev_stage, err) != 0))
        return -1;
    /* A head tied to the embedding across stages: the first and the last
     * stage of the replica sum the two copies' gradients every step. */
    int other_end = o->stage == 0 ? stages - 1 : 0;
    if (o->model.tied && stages > 1 && (o->stage == 0 || o->stage == stages - 1) &&
        (peer_at(pipeline, "stage", other_end, other_end, o->replica, &o->tie_peer, err) != 0 ||
         link_end(mine, "tie_way", 1, 1, o, &o->tie_peer, err) != 0))
        return -1;
    o->tie_back = o->tie_peer;
    if (o->tie_peer.addr[0] &&
        link_end(json_array_get(pipeline, (size_t)other_end), "tie_way", 0, 1, o, &o->tie_back, err) != 0)
        return -1;
    int up = (o->replica + 1) % o->replicas, down = (o->replica + o->replicas - 1) % o->replicas;
    if (replicas > 1 && o->allreduce == ASSIGN_ALLREDUCE_RING &&
        (peer_at(group, "replica", up, o->stage, up, &o->ring_next, err) != 0 ||
         peer_at(group, "replica", down, o->stage, down, &o->ring_prev, err) != 0 ||
         link_end(json_array_get(group, (size_t)o->replica), "up_way", 1, 1, o, &o->ring_next, err) != 0 ||
         link_end(json_array_get(group, (size_t)down), "up_way", 0, 1, o, &o->ring_prev, err) != 0))
        return -1;
    if (live && !json_is_null(live))
        return parse_live(live, o, err);
    if (resume && !json_is_null(resume)) {
        json_int_t rj, rs;
        if (json_unpack(resume, "{s:I, s:I}", "job_id", &rj, "step", &rs) != 0 || rj < 1 || rs < 0 || rs >= steps)
            return err_set(err, 502, "bad_assignment", "resume", "the assignment's resume point is malformed");
        o->resume_job = rj, o->resume_step = rs;
        json_t *rr = json_object_get(resume, "replicas");   /* absent from an older server: 1 */
        o->resume_replicas = json_is_integer(rr) ? (int)json_integer_value(rr) : 1;
        if (o->resume_replicas < 1 || o->resume_replicas > 65536)
            return err_set(err, 502, "bad_assignment", "resume", "the resume point has %d files a stage",
                           o->resume_replicas);
        return resume_layers(json_object_get(resume, "stages"), o, err);
    }
    return 0;
}
