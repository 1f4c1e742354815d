/* ranks.c - ranks as threads for test_nccl_host (ranks.h). */
#include "ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../host/cuda_runtime.h" /* the emulation: this test never runs on a device */
#include "../gpu_check.h"

char server_url[512];
int64_t job_id;
uint32_t epoch;
char tokens[SCENARIO_STAGES][RANKS][TOKEN_MAX];

void rank_init(struct rank *r, int rank, int size, int device, int stage, pthread_barrier_t *barrier)
{
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->size = size;
    r->device = device;
    r->stage = stage;
    r->barrier = barrier;
    snprintf(r->ctl.url, sizeof r->ctl.url, "%s", server_url);
    snprintf(r->ctl.token, sizeof r->ctl.token, "%s", tokens[stage][rank]);
    r->ctl.stop = &r->stop; /* the group keeps the ctl's flag from its open */
    for (int s = 0; s < STEPS; s++)
        r->rc[s] = -2;
}

void rank_free(struct rank *r)
{
    for (int s = 0; s < STEPS; s++)
        free(r->result[s]);
    free(r->state);
}

void rank_open(struct rank *r, double timeout_s)
{
    double t0 = ctl_now();
    r->open_rc = nccl_group_open(&r->ctl, &r->abort, job_id, epoch, r->stage, r->rank, r->size, r->device,
                                 timeout_s, &r->g, &r->open_err);
    r->open_s = ctl_now() - t0;
}

void rank_allreduce(struct rank *r, int step, float *data, size_t n, double timeout_s, int keep)
{
    if (!r->g)
        return;
    double t0 = ctl_now();
    r->rc[step] = nccl_allreduce_sum(r->g, data, n, timeout_s, &r->err[step]);
    r->secs[step] = ctl_now() - t0;
    if (keep && r->rc[step] == 0 && (r->result[step] = malloc(n * sizeof(float))) &&
        cudaMemcpy(r->result[step], data, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(r->result[step]);
        r->result[step] = NULL;
    }
}

void rank_close(struct rank *r)
{
    double t0 = ctl_now();
    nccl_group_close(r->g);
    r->g = NULL;
    r->close_s = ctl_now() - t0;
}

void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

float rank_value(int step, int rank, size_t i)
{
    uint64_t x = (uint64_t)(step * RANKS + rank) << 32 | i;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (float)((double)(x >> 40) / (double)(1u << 24) * 8.0 - 4.0);
}

float *device_values(int step, int rank, size_t n)
{
    float *host = malloc(n * sizeof *host), *dev = NULL;
    if (!host)
        return NULL;
    for (size_t i = 0; i < n; i++)
        host[i] = rank_value(step, rank, i);
    if (cudaMalloc((void **)&dev, n * sizeof *dev) != cudaSuccess ||
        cudaMemcpy(dev, host, n * sizeof *dev, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(dev);
        dev = NULL;
    }
    free(host);
    return dev;
}

void run_ranks(rank_fn fn, int stage, int n, const int *devices, struct rank *r)
{
    pthread_barrier_t barrier;
    pthread_t threads[RANKS];
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        rank_init(&r[i], i, n, devices[i], stage, &barrier);
        r[i].all = r;
    }
    for (int i = 0; i < n; i++)
        if (pthread_create(&threads[i], NULL, fn, &r[i]) != 0) {
            fprintf(stderr, "test_nccl_host: cannot start a rank thread\n");
            exit(2);
        }
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&barrier);
}

int err_is(const struct shoal_err *e, const char *code, const char *text)
{
    return strcmp(e->code, code) == 0 && (!text || strstr(e->message, text));
}

const char *outcome(int rc, const struct shoal_err *e)
{
    static char ring[4][sizeof e->code + sizeof e->message + 8];
    static int next;
    char *s = ring[next++ % 4];
    if (rc == 0)
        return "ok";
    if (rc == -2)
        return "not called";
    snprintf(s, sizeof ring[0], "%s: %s", e->code, e->message);
    return s;
}

int formed(const char *scenario, const struct rank *r, int n)
{
    char what[96], why[3 * 600] = "";
    int all = 1;
    for (int k = 0; k < n; k++) {
        size_t used = strlen(why);
        all &= r[k].open_rc == 0;
        snprintf(why + used, sizeof why - used, "%srank %d: %s", k ? "; " : "", r[k].rank,
                 outcome(r[k].open_rc, &r[k].open_err));
    }
    if (all)
        return 1;
    snprintf(what, sizeof what, "%s: the group forms", scenario);
    check("nccl", what, 0, "%s", why);
    return 0;
}
