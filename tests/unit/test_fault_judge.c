/* test_fault_judge.c - which node a job's failed links point to
 * (job_link_suspect and job_excluded_nodes, sql/017_read_models.sql), on
 * judged link reports replayed epoch by epoch into a private PostgreSQL
 * (server/store/pgembed.h, as the server's own, with the server's own
 * migrations; make test needs PostgreSQL).
 * After every epoch only the node cut off from its peers may be left out,
 * and it must be by the epoch each sequence says. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/store/db.h"
#include "../../server/store/migrate.h"
#include "../../server/store/pgembed.h"

/* $1 jobs: nodes 1..63 (a bit each) and jobs 1..$1 for the reports to name. */
#define FLEET_SQL \
    "WITH n AS (INSERT INTO nodes (name, token_hash, peer_address, tflops, cpu_cores)" \
    "   SELECT 'n' || g, md5(g::text), '127.0.0.1:' || g, 1, 1 FROM generate_series(1, 63) g RETURNING id)" \
    " INSERT INTO jobs (name, spec, stages, replicas, total_steps, peer_secret, model_costs)" \
    " SELECT 'j' || g, '{}', 2, 2, 1, md5(g::text) || md5(g::text), '{}' FROM generate_series(1, $1::int) g"

/* $1 job, $2 epoch, $3 reporter, $4 the neighbour it named: a report the
 * judge found both ends of answering. */
#define LINK_REPORT_SQL \
    "INSERT INTO job_faults (job_id, epoch, stage, replica, reporter_node, suspect_node, reason, verdict)" \
    " VALUES ($1::bigint, $2::int, 0, 0, $3::bigint, $4::bigint, 'replayed', 'link')"

/* $1 job, $2 the epoch being recovered from: the nodes left out of its
 * next plan, ascending. */
#define EXCLUDED_SQL \
    "SELECT coalesce(json_agg(x.node_id ORDER BY x.node_id), '[]') FROM job_excluded_nodes($1, $2) x"

#define REPORTS_MAX 16

/* One report: the failed epoch, the reporting node, the neighbour named. */
struct report {
    int epoch, reporter, named;
};

/* A partition as test_partition.sh makes it, told by its reports. */
struct sequence {
    const char *what;
    int cut;            /* the node cut off from its peers; 0: none may be left out */
    int by_epoch;       /* it must be left out after this failed epoch (0: never) */
    struct report r[REPORTS_MAX];
};

static const struct sequence sequences[] = {
    /* The CI run that needed a third failure under the peers-first rank:
     * in epoch 1 cut node 4 and the node 5 that waited on node 1 both
     * named 1, which tied 4's one peer in each of epochs 1 and 2. */
    { "ci: the cut node's neighbour named twice in the first epoch", 4, 2,
      { { 1, 4, 1 }, { 1, 1, 4 }, { 1, 5, 1 }, { 2, 3, 4 }, { 2, 5, 2 },
        { 3, 4, 1 }, { 3, 3, 5 }, { 3, 5, 4 }, { 3, 1, 4 } } },
    /* Runs of test_partition.sh.  Here 2 and 5 share one peer in each of
     * two epochs, each named once; but only 5 being cut off explains
     * epoch 2 (2 waited on 4, which waited on 5). */
    { "run: a two-hop wait in the second epoch", 5, 2,
      { { 1, 5, 2 }, { 2, 2, 4 }, { 2, 4, 5 }, { 3, 3, 5 }, { 3, 1, 2 }, { 3, 5, 3 }, { 3, 2, 5 } } },
    { "run: the cut node and a neighbour name each other", 1, 2,
      { { 1, 1, 4 }, { 1, 2, 4 }, { 1, 4, 1 }, { 2, 5, 1 }, { 2, 1, 5 } } },
    { "run: two neighbours name it each time", 5, 2,
      { { 1, 2, 5 }, { 1, 4, 5 }, { 1, 3, 2 }, { 1, 5, 2 }, { 2, 1, 5 }, { 2, 3, 5 }, { 2, 4, 3 }, { 2, 5, 1 } } },
    { "run: a healthy pair fails too in the first epoch", 4, 2,
      { { 1, 5, 4 }, { 1, 1, 3 }, { 1, 3, 4 }, { 1, 4, 3 }, { 2, 2, 4 }, { 2, 4, 1 }, { 2, 5, 2 }, { 2, 1, 4 } } },
    { "run: its neighbour reports in both epochs", 3, 2,
      { { 1, 3, 4 }, { 1, 2, 4 }, { 1, 4, 3 }, { 2, 5, 3 }, { 2, 4, 1 }, { 2, 1, 3 }, { 2, 3, 5 } } },
    { "run: only the cut node reports at first", 3, 2, { { 1, 3, 2 }, { 2, 3, 5 }, { 2, 4, 1 } } },
    /* test_agent_api.sh's: equal peer counts, 3 named by more peers. */
    { "a spare named once, the cut node by three", 3, 2,
      { { 1, 2, 3 }, { 1, 3, 2 }, { 1, 5, 2 }, { 2, 1, 5 }, { 2, 5, 3 }, { 2, 3, 4 }, { 2, 4, 3 } } },
    /* The cut node times out first each time, and one who waited on the
     * neighbour it named names that one too. */
    { "the cut node reports first, echoes name its neighbours", 3, 2,
      { { 1, 3, 1 }, { 1, 2, 1 }, { 2, 3, 4 }, { 2, 5, 4 } } },
    { "its neighbours name it", 3, 2, { { 1, 1, 3 }, { 1, 4, 3 }, { 2, 2, 3 } } },
    { "it and its neighbour name each other", 3, 2,
      { { 1, 3, 1 }, { 1, 1, 3 }, { 2, 3, 4 }, { 2, 2, 3 } } },
    /* A node that waited on the cut node's neighbours in every epoch. */
    { "a waiter two hops off in every epoch", 4, 2,
      { { 1, 1, 4 }, { 1, 5, 1 }, { 2, 2, 4 }, { 2, 5, 2 }, { 3, 3, 4 }, { 3, 5, 3 } } },
    /* 4 and 5 both waited on 1, then both on 2: nothing tells them apart
     * until a third failure names 4. */
    { "two nodes alike for two epochs wait for a third", 4, 3,
      { { 1, 4, 1 }, { 1, 5, 1 }, { 2, 4, 2 }, { 2, 5, 2 }, { 3, 3, 4 } } },
    /* test_agent_api.sh's: either end of one link may be the one cut. */
    { "one link failing twice leaves nobody out", 0, 0,
      { { 1, 1, 2 }, { 1, 2, 1 }, { 2, 1, 2 }, { 2, 2, 1 } } },
    { "one failed epoch leaves nobody out", 0, 0, { { 1, 4, 1 }, { 1, 1, 4 }, { 1, 5, 1 }, { 1, 3, 4 } } },
};
#define N_SEQUENCES (sizeof sequences / sizeof sequences[0])

/* The private cluster: data dir, and a connection (NULL until db_up connects). */
static struct pgembed pg;
static char data_dir[] = "/tmp/shoal-test-fault-judge-XXXXXX";
static PGconn *conn;

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int db_up(void **state)
{
    (void)state;
    struct shoal_err e;
    char conninfo[1024];
    if (!mkdtemp(data_dir)) {
        data_dir[0] = '\0';
        fprintf(stderr, "# cannot make a data dir under /tmp\n");
        return -1;
    }
    if (pgembed_start(&pg, data_dir, NULL, NULL, conninfo, sizeof conninfo, &e) != 0) {
        fprintf(stderr, "# no PostgreSQL (make deps installs it): %s\n", e.message);
        return -1;
    }
    conn = PQconnectdb(conninfo);
    char p_jobs[24];
    const char *params[] = { db_param_i64(p_jobs, (int64_t)N_SEQUENCES) };
    int applied = 0;
    PGresult *res = migrate_apply(conn, &applied, &e) == 0 ? db_exec(conn, FLEET_SQL, 1, params, &e) : NULL;
    if (!res) {
        fprintf(stderr, "# cannot make the schema and its rows: %s\n", e.message);
        PQfinish(conn);
        conn = NULL;
        return -1;
    }
    PQclear(res);
    return 0;
}

static int db_down(void **state)
{
    (void)state;
    PQfinish(conn);
    pgembed_stop(&pg);
    if (data_dir[0])
        nftw(data_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* The nodes left out of job `job`'s next plan after epoch `epoch` failed,
 * as a bit set over node ids below 64. */
static uint64_t excluded(int job, int epoch)
{
    struct shoal_err e;
    char v[2][24];
    const char *params[] = { db_param_i64(v[0], job), db_param_i64(v[1], epoch) };
    json_t *ids = db_exec_json(conn, EXCLUDED_SQL, 2, params, "excluded nodes", &e);
    size_t i;
    json_t *id;
    uint64_t set = 0;
    assert_non_null(ids);
    json_array_foreach(ids, i, id) {
        json_int_t n = json_integer_value(id);
        assert_true(n > 0 && n < 64);
        set |= (uint64_t)1 << n;
    }
    json_decref(ids);
    return set;
}

/* Replays sequence `s` as job `job`, an epoch at a time: 0, or 1 when a
 * node was left out that should not be, or the cut node was not by its
 * epoch (said on stderr). */
static int replay(const struct sequence *s, int job)
{
    struct shoal_err e;
    int last = 0;
    for (int k = 0; k < REPORTS_MAX && s->r[k].epoch; k++)
        last = s->r[k].epoch;
    for (int epoch = 1, k = 0; epoch <= last; epoch++) {
        for (; k < REPORTS_MAX && s->r[k].epoch == epoch; k++) {
            char v[4][24];
            const char *params[] = { db_param_i64(v[0], job), db_param_i64(v[1], epoch),
                                     db_param_i64(v[2], s->r[k].reporter), db_param_i64(v[3], s->r[k].named) };
            PGresult *res = db_exec(conn, LINK_REPORT_SQL, 4, params, &e);
            assert_non_null(res);
            PQclear(res);
        }
        uint64_t out = excluded(job, epoch), cut = s->cut ? (uint64_t)1 << s->cut : 0;
        if ((out & ~cut) != 0 || (s->by_epoch && epoch >= s->by_epoch && out != cut)) {
            print_error("%s: after epoch %d the nodes left out are %#llx (bits), want %s node %d\n", s->what,
                        epoch, (unsigned long long)out, s->by_epoch && epoch >= s->by_epoch ? "just" : "at most",
                        s->cut);
            return 1;
        }
    }
    return 0;
}

static void test_sequences(void **state)
{
    (void)state;
    assert_non_null(conn);
    int wrong = 0;
    for (size_t i = 0; i < N_SEQUENCES; i++)
        wrong += replay(&sequences[i], (int)i + 1);
    assert_int_equal(wrong, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequences),
    };
    return cmocka_run_group_tests(tests, db_up, db_down);
}
