/* ranks.h - what the files of test_nccl_host share: the job on the server
 * whose tokens the ranks use, the stage each scenario runs on, and ranks
 * as threads that drive agent/net/nccl.c's groups on the host emulation.
 *
 * Each scenario uses a stage of its own, so that no rank can read an id
 * another scenario put. */
#ifndef SHOAL_TESTS_GPU_NCCL_RANKS_H
#define SHOAL_TESTS_GPU_NCCL_RANKS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../../../agent/control/control.h"
#include "../../../agent/net/nccl.h"

enum {
    STAGE_SUM,          /* two all-reduces, then a clean close */
    STAGE_DEADLINE,     /* rank 1 stays silent past rank 0's timeout */
    STAGE_ABORT,        /* rank 1's all-reduce is refused, so it aborts */
    STAGE_LEAVE,        /* rank 1 closes while rank 0's all-reduce waits */
    STAGE_COUNT,        /* the ranks pass different counts */
    STAGE_NO_ID,        /* rank 1 alone: replica 0 never puts the id (no scenario puts one here) */
    STAGE_SAME_DEVICE,  /* both ranks on device 0 */
    STAGE_STOP,         /* rank 0's agent stops while its all-reduce waits */
    STAGE_REPLAN,       /* rank 0's assignment is replaced while its all-reduce waits */
    STAGE_REPLAN_OPEN,  /* rank 0 alone: its assignment is replaced while the group forms */
    STAGE_LOSS,         /* three ranks pass their losses, then all-reduce (bytes.c) */
    STAGE_MISMATCH,     /* rank 0 passes its loss while rank 1 all-reduces (bytes.c) */
    STAGE_BROADCAST,    /* three ranks: rank 1's state to the others, then an all-reduce (bytes.c) */
    STAGE_LEN_MAX,      /* three ranks: rank 1 takes less state than rank 0 sends (bytes.c) */
    STAGE_ROOT_LEAVES,  /* three ranks: the root, driven by hand, leaves after the first chunk (bytes.c) */
    STAGE_TASKLET,      /* three tasklets: sync_open, live_share and sync_gradients over NCCL (tasklet.c) */
    SCENARIO_STAGES
};

#define RANKS 3             /* the most a scenario runs: replicas per stage, emulated devices */
#define SUM_FLOATS 4099     /* elements; odd, so no size is special */
#define STEPS 2             /* calls a rank makes in one scenario */
#define OPEN_S 20.0         /* s; a group that must form */
#define SLOW_S 10.0         /* s; a wait that a failure must cut short */
#define FAST_S 3.0          /* s; how soon "fails fast" must be */
#define DEADLINE_S 1.0      /* s; the timeout that must fire */
#define SETTLE_S 0.3        /* s a rank waits so that its peer's call is surely queued */

/* The job on the server (main's arguments). */
extern char server_url[512];
extern int64_t job_id;
extern uint32_t epoch;
extern char tokens[SCENARIO_STAGES][RANKS][TOKEN_MAX];

struct rank {
    int rank, size, device, stage;  /* rank of size, on CUDA device `device` */
    struct ctl ctl;
    atomic_int stop;              /* the agent's stop flag (ctl.stop) */
    atomic_int abort;             /* the tasklet's abort flag, passed to nccl_group_open */
    struct rank *all;             /* the scenario's ranks, by rank, so that one can raise another's flags */
    pthread_barrier_t *barrier;   /* shared by the scenario's ranks */
    struct nccl_group *g;
    int open_rc;
    double open_s;                /* s */
    struct shoal_err open_err;
    int rc[STEPS];                /* of the scenario's calls, -2 when not called */
    double secs[STEPS];           /* s */
    struct shoal_err err[STEPS];
    float *result[STEPS];         /* host copy of the buffer after an all-reduce */
    double from_prev;             /* what nccl_pass_loss gave */
    unsigned char *state;         /* what nccl_broadcast_bytes sends (the root's) or gave (malloc'd) */
    size_t state_len;             /* bytes */
    double done_at;               /* ctl_now() when its broadcast returned, or (a root driven by hand) it left */
    double close_s;               /* s */
};

/* Rank `rank` of `size` on `device` in `stage`, with that tasklet's token. */
void rank_init(struct rank *r, int rank, int size, int device, int stage, pthread_barrier_t *barrier);
void rank_free(struct rank *r);

/* nccl_group_open into r->g, with r's ctl and abort flag. */
void rank_open(struct rank *r, double timeout_s);

/* nccl_allreduce_sum of data[0..n) as call `step`, when the group formed;
 * with `keep`, the buffer is copied back into r->result[step]. */
void rank_allreduce(struct rank *r, int step, float *data, size_t n, double timeout_s, int keep);

void rank_close(struct rank *r);

void sleep_s(double s);

/* What rank `rank` all-reduces in step `step`: distinct per rank and step,
 * with low mantissa bits set, so that a missing or doubled rank shows. */
float rank_value(int step, int rank, size_t i);

/* A device buffer of n floats holding rank_value(step, rank, .), or NULL. */
float *device_values(int step, int rank, size_t n);

typedef void *(*rank_fn)(void *);

/* Runs fn on one thread per rank, rank i of n on devices[i] in `stage`. */
void run_ranks(rank_fn fn, int stage, int n, const int *devices, struct rank *r);

int err_is(const struct shoal_err *e, const char *code, const char *text);

/* What a call that returned rc said, for a check's detail: "ok", "not
 * called" or "CODE: message".  Valid for three more calls. */
const char *outcome(int rc, const struct shoal_err *e);

/* 1 when the n ranks r[0..n) of `scenario` formed their group; else a
 * failed check says why and the scenario has nothing more to check. */
int formed(const char *scenario, const struct rank *r, int n);

/* The scenarios of bytes.c: the losses' all-gather and the state
 * broadcast. */
void scenario_loss(void);
void scenario_mismatch(void);
void scenario_broadcast(void);
void scenario_len_max(void);
void scenario_root_leaves(void);

/* The scenario of tasklet.c: the agent's tasklets on a group. */
void scenario_tasklet(void);

#endif
