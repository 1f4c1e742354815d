#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define V100_TFLOPS 100.0
#define V100_MEM_BYTES (32.0 * 1024 * 1024 * 1024)

int scenario_alloc(struct scenario *sc, int n)
{
    sc->n = n;
    sc->nodes = calloc((size_t)n, sizeof *sc->nodes);
    sc->latency_ms = calloc((size_t)n * (size_t)n, sizeof(double));
    sc->bandwidth_gbps = calloc((size_t)n * (size_t)n, sizeof(double));
    if (!sc->nodes || !sc->latency_ms || !sc->bandwidth_gbps) {
        scenario_free(sc);
        return -1;
    }
    return 0;
}

void scenario_free(struct scenario *sc)
{
    free(sc->nodes);
    free(sc->latency_ms);
    free(sc->bandwidth_gbps);
    memset(sc, 0, sizeof *sc);
}

/* Inter-region links of one scenario: regions named, and the latency (ms)
 * and bandwidth (Gbit/s) of every pair, upper triangle in row order. */
struct region_table {
    const char *name;
    int regions, per_region;
    double in_lat, in_bw;
    const char *const *labels;
    const double *across;   /* pairs (lat, bw), for a < b in row order */
};

static const char *const regional_labels[] = { "virginia", "oregon", "california", "ohio" };
static const double regional_across[] = {
    67, 1.15,  59, 1.05,  11, 1.12,     /* VA-OR, VA-CA, VA-OH */
    12, 1.25,  49, 1.10,                /* OR-CA, OR-OH */
    52, 1.02,                           /* CA-OH */
};
static const char *const world_labels[] = { "oregon", "virginia", "ohio", "tokyo", "seoul",
                                            "london", "frankfurt", "ireland" };
static const double world_across[] = {
    67, 0.79,  49, 1.10,  96, 0.523, 124, 0.46, 136, 0.42, 143, 0.404, 124, 0.482,  /* OR-* */
    11, 1.12,  143, 0.524, 172, 0.500, 76, 1.16, 90, 1.02, 67, 1.05,                /* VA-* */
    130, 0.694, 159, 0.529, 86, 1.05, 99, 0.799, 77, 1.14,                          /* OH-* */
    34, 1.10,  210, 0.366, 223, 0.36, 199, 0.465,                                   /* TY-* */
    238, 0.342, 235, 0.358, 228, 0.335,                                             /* SE-* */
    14, 1.14,  12, 1.09,                                                            /* LO-* */
    24, 1.08,                                                                       /* FR-IR */
};
static const char *const multi_labels[] = { "ohio", "virginia" };
static const double multi_across[] = { 11, 1.12 };

static const struct region_table region_tables[] = {
    { "multi", 2, 32, 1, 5, multi_labels, multi_across },
    { "regional", 4, 16, 5, 2, regional_labels, regional_across },
    { "world", 8, 8, 5, 2, world_labels, world_across },
};

static void set_link(struct scenario *sc, int i, int j, double lat, double bw)
{
    sc->latency_ms[i * sc->n + j] = sc->latency_ms[j * sc->n + i] = lat;
    sc->bandwidth_gbps[i * sc->n + j] = sc->bandwidth_gbps[j * sc->n + i] = bw;
}

static void fill_regions(struct scenario *sc, const struct region_table *t)
{
    for (int i = 0; i < sc->n; i++) {
        int a = i / t->per_region;
        snprintf(sc->nodes[i].region, sizeof sc->nodes[i].region, "%s", t->labels[a]);
        for (int j = i + 1; j < sc->n; j++) {
            int b = j / t->per_region;
            if (a == b) {
                set_link(sc, i, j, t->in_lat, t->in_bw);
                continue;
            }
            /* index of pair (a, b), a < b, in the upper triangle */
            int k = a * t->regions - a * (a + 1) / 2 + (b - a - 1);
            set_link(sc, i, j, t->across[2 * k], t->across[2 * k + 1]);
        }
    }
}

int scenario_paper(const char *name, struct scenario *sc, struct shoal_err *err)
{
    if (scenario_alloc(sc, 64) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory");
    for (int i = 0; i < 64; i++) {
        sc->nodes[i].id = i;
        sc->nodes[i].tflops = V100_TFLOPS;
        sc->nodes[i].mem_bytes = V100_MEM_BYTES;
    }
    if (strcmp(name, "dc") == 0) {
        for (int i = 0; i < 64; i++) {
            snprintf(sc->nodes[i].region, sizeof sc->nodes[i].region, "instance-%d", i / 8);
            for (int j = i + 1; j < 64; j++)
                set_link(sc, i, j, 0, i / 8 == j / 8 ? 100 : 3.125);
        }
        return 0;
    }
    if (strcmp(name, "spot") == 0) {
        for (int i = 0; i < 64; i++) {
            if (i < 32)
                snprintf(sc->nodes[i].region, sizeof sc->nodes[i].region, "instance-%d", i / 4);
            else
                snprintf(sc->nodes[i].region, sizeof sc->nodes[i].region, "spot-%d", i);
            for (int j = i + 1; j < 64; j++)
                set_link(sc, i, j, 0, i < 32 && j < 32 && i / 4 == j / 4 ? 100 : 1.25);
        }
        return 0;
    }
    for (size_t t = 0; t < sizeof region_tables / sizeof region_tables[0]; t++) {
        if (strcmp(name, region_tables[t].name) == 0) {
            fill_regions(sc, &region_tables[t]);
            return 0;
        }
    }
    scenario_free(sc);
    return err_set(err, 422, "invalid_field", "scenario",
                   "unknown scenario '%s'; use dc, spot, multi, regional or world", name);
}

int scenario_generated(int n, int regions, uint64_t seed, struct scenario *sc, struct shoal_err *err)
{
    if (regions < 1 || n < 1 || scenario_alloc(sc, n) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory or bad size");
    uint64_t rng = seed;
    double lat[regions * regions], bw[regions * regions];
    for (int a = 0; a < regions; a++) {
        for (int b = a; b < regions; b++) {
            double l = a == b ? 5 : 20 + (double)rng_below(&rng, 181);
            double w = a == b ? 10 : 0.2 + (double)rng_below(&rng, 1801) / 1000.0;
            lat[a * regions + b] = lat[b * regions + a] = l;
            bw[a * regions + b] = bw[b * regions + a] = w;
        }
    }
    for (int i = 0; i < n; i++) {
        int a = i * regions / n;
        sc->nodes[i].id = i;
        sc->nodes[i].tflops = V100_TFLOPS;
        sc->nodes[i].mem_bytes = V100_MEM_BYTES;
        snprintf(sc->nodes[i].region, sizeof sc->nodes[i].region, "region-%d", a);
        for (int j = i + 1; j < n; j++) {
            int b = j * regions / n;
            set_link(sc, i, j, lat[a * regions + b], bw[a * regions + b]);
        }
    }
    return 0;
}
