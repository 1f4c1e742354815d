/* test_assign.c - agent/train/assign.h: an assignment as the server sends it
 * becomes the tasklet's neighbours; the group's all-reduce decides whether
 * there is a TCP ring at all; a live resume's root is taken under either;
 * malformed answers are refused with a reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>
#include <time.h>

#include "../../agent/train/assign.h"

/* A link key: 32 bytes of the one given in hex. */
#define KEY4(b) b b b b
#define KEY(b) KEY4(KEY4(b)) KEY4(KEY4(b))

/* Stage 1 of 2, replica 1 of 3, with `allreduce` ("" leaves it out). */
static json_t *assignment(const char *allreduce)
{
    json_error_t je;
    json_t *a = json_loads(
        "{\"job_id\": 7, \"epoch\": 2, \"state\": \"running\", \"stage\": 1, \"replica\": 1,"
        " \"stages\": 2, \"replicas\": 3, \"layer_start\": 2, \"layer_end\": 4,"
        " \"spec\": {\"model\": {\"vocab_size\": 256, \"context_length\": 16, \"d_model\": 32, \"heads\": 2,"
        "   \"layers\": 4}, \"parallelism\": {\"micro_batches\": 4, \"micro_batch_size\": 2, \"schedule\": \"1f1b\"},"
        "   \"training\": {\"steps\": 10, \"learning_rate\": 0.001, \"warmup_steps\": 2, \"weight_decay\": 0.1,"
        "   \"grad_clip\": 1.0, \"seed\": 5}, \"data\": {\"path\": \"/tmp/x.txt\", \"format\": \"text\"},"
        "   \"checkpoint_interval\": 5},"
        " \"pipeline\": [{\"stage\": 0, \"node_id\": 10, \"peer_address\": \"h0:1\", \"link_key\": \"" KEY("0a") "\"},"
        "   {\"stage\": 1, \"node_id\": 21, \"peer_address\": \"h1:1\"}],"
        " \"group\": [{\"replica\": 0, \"node_id\": 20, \"peer_address\": \"g0:1\", \"link_key\": \"" KEY("20") "\"},"
        "   {\"replica\": 1, \"node_id\": 21, \"peer_address\": \"g1:1\"},"
        "   {\"replica\": 2, \"node_id\": 22, \"peer_address\": \"g2:1\", \"link_key\": \"" KEY("2B") "\"}],"
        " \"resume\": null}", 0, &je);
    assert_non_null(a);
    if (allreduce[0])
        json_object_set_new(a, "allreduce", json_string(allreduce));
    return a;
}

static void test_ring_group(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    json_t *a = assignment("ring");
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.allreduce, ASSIGN_ALLREDUCE_RING);
    assert_string_equal(o.prev_stage.addr, "h0:1");
    assert_int_equal(o.prev_stage.node, 10);
    assert_int_equal(o.prev_stage.stage, 0);
    assert_int_equal(o.prev_stage.replica, 1);
    assert_string_equal(o.next_stage.addr, "");
    assert_string_equal(o.ring_next.addr, "g2:1");
    assert_int_equal(o.ring_next.node, 22);
    assert_int_equal(o.ring_next.replica, 2);
    assert_string_equal(o.ring_prev.addr, "g0:1");
    assert_int_equal(o.ring_prev.node, 20);
    assert_int_equal(o.ring_prev.stage, 1);
    assert_int_equal(o.node_id, 21);
    char role[PEER_ROLE_MAX];
    wire_role(o.stage, o.replica, o.node_id, role);
    assert_string_equal(role, "stage=1 replica=1 node=21");
    /* each neighbour with the key of our link to it */
    assert_int_equal(o.prev_stage.key[0], 0x0a);
    assert_int_equal(o.prev_stage.key[31], 0x0a);
    assert_int_equal(o.ring_prev.key[0], 0x20);
    assert_int_equal(o.ring_next.key[31], 0x2b);
    assert_int_equal(o.schedule, PIPE_1F1B);
    json_decref(a);
}

static void test_nccl_group_has_no_ring(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    json_t *a = assignment("nccl");
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.allreduce, ASSIGN_ALLREDUCE_NCCL);
    assert_string_equal(o.ring_next.addr, "");
    assert_string_equal(o.ring_prev.addr, "");
    assert_string_equal(o.prev_stage.addr, "h0:1");
    json_decref(a);
}

static void test_older_server_means_ring(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    json_t *a = assignment("");
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.allreduce, ASSIGN_ALLREDUCE_RING);
    assert_string_equal(o.ring_next.addr, "g2:1");
    json_decref(a);
}

/* Puts the server's ticket for one end of a relayed link of job 7, epoch 2
 * (expiring in a minute) into entry e's `name`. */
static void put_ticket(json_t *e, const char *name, int side, unsigned channel, struct relay_end dialer,
                       struct relay_end listener)
{
    struct relay_secret s;
    struct shoal_err err;
    char hex[RELAY_TICKET_HEX];
    struct relay_ticket t = { .side = side, .channel = channel, .epoch = 2, .job_id = 7,
                              .expires = (int64_t)time(NULL) + 60, .dialer = dialer, .listener = listener };
    assert_int_equal(relay_secret_set("test_assign_relay_secret_0123456789", &s, &err), 0);
    relay_ticket_sign(&s, &t);
    relay_ticket_hex(&t, hex);
    json_object_set_new(e, name, json_string(hex));
}

/* Each connection's way, from this end (stage 1, replica 1 of 3): the
 * plan's "dial" has the sender dial, "reverse" the receiver, "relay" both
 * dial the plan's relay; a ring edge's channel says who sends on it.  An
 * older server's "dials_next": false reverses the pipeline link; no way at
 * all: the sender dials; an unknown way, or a relay with none named, is
 * refused.  A relayed link takes the server's ticket for this end: none,
 * or another end's, is refused. */
static void test_link_ways(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    json_t *a = assignment("ring");
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.prev_stage.way, ASSIGN_TAKE);             /* stage 0 dials us */
    assert_int_equal(o.prev_stage.channel, WIRE_CHANNEL_STAGE);
    assert_int_equal(o.ring_next.way, ASSIGN_DIAL);
    assert_int_equal(o.ring_next.channel, WIRE_CHANNEL_SENDS);
    assert_int_equal(o.ring_prev.way, ASSIGN_TAKE);
    assert_int_equal(o.ring_prev.channel, WIRE_CHANNEL_SENDS);
    json_t *pipeline = json_object_get(a, "pipeline"), *group = json_object_get(a, "group");
    json_object_set_new(json_array_get(pipeline, 0), "dials_next", json_false());
    json_object_set_new(json_array_get(group, 1), "up_way", json_string("reverse"));
    json_object_set_new(json_array_get(group, 0), "up_way", json_string("reverse"));
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.prev_stage.way, ASSIGN_DIAL);             /* we dial stage 0 */
    assert_int_equal(o.ring_next.way, ASSIGN_TAKE);              /* replica 2 dials us to receive */
    assert_int_equal(o.ring_next.channel, WIRE_CHANNEL_RECEIVES);
    assert_int_equal(o.ring_prev.way, ASSIGN_DIAL);              /* we dial replica 0 to receive */
    assert_int_equal(o.ring_prev.channel, WIRE_CHANNEL_RECEIVES);
    json_object_set_new(json_array_get(pipeline, 0), "next_way", json_string("relay"));
    json_object_set_new(json_array_get(group, 1), "up_way", json_string("relay"));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.code, "bad_assignment");
    assert_non_null(strstr(err.message, "names no relay"));
    json_object_set_new(a, "relay", json_string("relay.example:7946"));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_non_null(strstr(err.message, "has no next_ticket for it"));
    struct relay_end s0 = { 0, 1, 10 }, s1 = { 1, 1, 21 }, r2 = { 1, 2, 22 };
    put_ticket(json_array_get(pipeline, 0), "next_ticket", RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE, s0, s1);
    put_ticket(json_array_get(group, 1), "up_ticket", RELAY_SIDE_DIALER, WIRE_CHANNEL_SENDS, s1, r2);
    assert_int_equal(assign_parse(a, &o, &err), -1);   /* stage 0's ticket: the dialer's */
    assert_non_null(strstr(err.message, "next_ticket is not for this node's end"));
    put_ticket(json_array_get(pipeline, 0), "next_ticket", RELAY_SIDE_LISTENER, WIRE_CHANNEL_STAGE, s0, s1);
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_string_equal(o.relay, "relay.example:7946");
    assert_int_equal(o.prev_stage.ticket.side, RELAY_SIDE_LISTENER);
    assert_int_equal(o.ring_next.ticket.listener.node, 22);
    assert_int_equal(o.prev_stage.way, ASSIGN_RELAY_TAKE);
    assert_int_equal(o.ring_next.way, ASSIGN_RELAY_DIAL);
    assert_int_equal(o.ring_next.channel, WIRE_CHANNEL_SENDS);
    json_object_set_new(json_array_get(group, 0), "up_way", json_string("sideways"));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_non_null(strstr(err.message, "up_way is not dial, reverse or relay"));
    json_decref(a);
}

/* The epoch's micro-batches win over the spec's (a re-plan short of nodes
 * trains fewer replicas, each more); absent (an older server): the spec's;
 * not a positive integer: refused. */
static void test_epoch_micro_batches(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    json_t *a = assignment("ring");
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.micro_batches, 4);
    json_object_set_new(a, "micro_batches", json_integer(12));
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.micro_batches, 12);
    json_object_set_new(a, "micro_batches", json_integer(0));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.code, "bad_assignment");
    json_object_set_new(a, "micro_batches", json_string("8"));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    json_decref(a);
}

/* A live resume's root hands the state over whichever way the group
 * sums: round the ring, or by NCCL; only diloco (replicas that differ) and
 * a root that is no replica are refused. */
static void test_live_root(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    const char *ways[] = { "ring", "nccl" };
    for (int i = 0; i < 2; i++) {
        json_t *a = assignment(ways[i]);
        json_object_set_new(a, "live", json_pack("{s:i, s:i}", "step", 6, "root", 2));
        assert_int_equal(assign_parse(a, &o, &err), 0);
        assert_int_equal(o.live, 1);
        assert_int_equal(o.live_root, 2);
        assert_int_equal(o.resume_step, 6);
        json_decref(a);
    }
    json_t *a = assignment("nccl");
    json_object_set_new(a, "live", json_pack("{s:i, s:i}", "step", 6, "root", 3));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.field, "live");
    /* at the job's last step (10: trained, its final checkpoint to store
     * again), not past it */
    json_object_set_new(a, "live", json_pack("{s:i, s:i}", "step", 10, "root", 0));
    assert_int_equal(assign_parse(a, &o, &err), 0);
    assert_int_equal(o.resume_step, 10);
    json_object_set_new(a, "live", json_pack("{s:i, s:i}", "step", 11, "root", 0));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.field, "live");
    json_object_set_new(json_object_get(a, "spec"), "communication",
                        json_pack("{s:s, s:i}", "sync", "diloco", "inner_steps", 2));
    json_object_set_new(a, "allreduce", json_string("ring"));
    json_object_set_new(a, "live", json_pack("{s:i, s:n}", "step", 6, "root"));
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.field, "live");
    assert_non_null(strstr(err.message, "every_step"));
    json_decref(a);
}

static void test_refused(void **state)
{
    (void)state;
    struct assignment o;
    struct shoal_err err;
    json_t *a = assignment("mpi");
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.field, "allreduce");
    assert_non_null(strstr(err.message, "'mpi'"));
    json_decref(a);

    a = assignment("ring");
    json_array_remove(json_object_get(a, "group"), 2);
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.code, "bad_assignment");
    json_decref(a);

    /* a neighbour must be named by its node id */
    a = assignment("ring");
    json_object_del(json_array_get(json_object_get(a, "pipeline"), 0), "node_id");
    assert_int_equal(assign_parse(a, &o, &err), -1);
    assert_string_equal(err.field, "stage");
    json_decref(a);

    /* a neighbour must come with a link key of 32 bytes in hex */
    const char *bad_keys[] = { "xyz", "0a", KEY("0a") "0a", KEY("zz"), NULL };
    for (int i = 0; i <= 4; i++) {
        a = assignment("ring");
        json_t *e = json_array_get(json_object_get(a, "group"), 2);
        if (bad_keys[i])
            json_object_set_new(e, "link_key", json_string(bad_keys[i]));
        else
            json_object_del(e, "link_key");
        assert_int_equal(assign_parse(a, &o, &err), -1);
        assert_string_equal(err.field, "replica");
        assert_non_null(strstr(err.message, "no key"));
        json_decref(a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_group),
        cmocka_unit_test(test_nccl_group_has_no_ring),
        cmocka_unit_test(test_older_server_means_ring),
        cmocka_unit_test(test_link_ways),
        cmocka_unit_test(test_epoch_micro_batches),
        cmocka_unit_test(test_live_root),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
