#include "scenario.h"

#include <math.h>
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

/* Uniform in [0, 1). */
static double unit_draw(uint64_t *rng)
{
    return (double)(rng_next(rng) >> 11) / 9007199254740992.0;
}

/* Multiplicative noise: a factor in [1 - f, 1 + f). */
static double noise(uint64_t *rng, double f)
{
    return 1.0 - f + 2.0 * f * unit_draw(rng);
}

static double dist_km(const double *xy, int a, int b)
{
    double dx = xy[2 * a] - xy[2 * b], dy = xy[2 * a + 1] - xy[2 * b + 1];
    return sqrt(dx * dx + dy * dy);
}

/* One-way latency over `km` of fibre (about 100 km per ms with routing), ms. */
static double fibre_ms(double km)
{
    return 1.0 + km / 100.0;
}

static void set_node(struct scenario *sc, int i, const char *region, double tflops, double mem_gib)
{
    sc->nodes[i].id = i;
    sc->nodes[i].tflops = tflops;
    sc->nodes[i].mem_bytes = mem_gib * 1024.0 * 1024.0 * 1024.0;
    snprintf(sc->nodes[i].region, sizeof sc->nodes[i].region, "%s", region);
}

/* plane: every node at its own spot of an 8,000 km square; latency grows
 * with distance, bandwidth falls with it, each link with its own noise. */
static void family_plane(struct scenario *sc, uint64_t *rng, double *xy)
{
    int n = sc->n;
    for (int i = 0; i < n; i++) {
        xy[2 * i] = 8000.0 * unit_draw(rng);
        xy[2 * i + 1] = 8000.0 * unit_draw(rng);
        char label[32];
        snprintf(label, sizeof label, "x%.0f-y%.0f", xy[2 * i], xy[2 * i + 1]);
        set_node(sc, i, label, 60.0 + 80.0 * unit_draw(rng), 32);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double km = dist_km(xy, i, j);
            set_link(sc, i, j, fibre_ms(km) * noise(rng, 0.2), 10.0 / (1.0 + km / 300.0) * noise(rng, 0.3));
        }
}

/* regions: about n/6 regions of unequal size (region k drawn with weight
 * 1/(k+1), every region non-empty), each with its own inside links; one
 * draw per pair of regions across; 10% noise per link. */
static int family_regions(struct scenario *sc, uint64_t *rng, int *site)
{
    int n = sc->n, R = n / 6 > 2 ? n / 6 : 2;
    double weight = 0, in_lat[R], in_bw[R];
    for (int k = 0; k < R; k++) {
        weight += 1.0 / (k + 1);
        in_lat[k] = 0.5 + 4.5 * unit_draw(rng);
        in_bw[k] = 5.0 + 20.0 * unit_draw(rng);
    }
    for (int i = 0; i < n; i++) {
        int k = i;
        if (i >= R) {
            double u = unit_draw(rng) * weight;
            for (k = 0; k < R - 1 && (u -= 1.0 / (k + 1)) > 0; k++) {}
        }
        site[i] = k;
        char label[32];
        snprintf(label, sizeof label, "region-%d", k);
        set_node(sc, i, label, 100, 32);
    }
    double *lat = malloc(sizeof(double) * (size_t)R * (size_t)R), *bw = malloc(sizeof(double) * (size_t)R * (size_t)R);
    int rc = lat && bw ? 0 : -1;
    for (int a = 0; a < R && rc == 0; a++)
        for (int b = a + 1; b < R; b++) {
            lat[a * R + b] = 10.0 + 240.0 * unit_draw(rng);
            bw[a * R + b] = 0.1 + 1.9 * unit_draw(rng);
        }
    for (int i = 0; i < n && rc == 0; i++)
        for (int j = i + 1; j < n; j++) {
            int a = site[i] < site[j] ? site[i] : site[j], b = site[i] < site[j] ? site[j] : site[i];
            double l = a == b ? in_lat[a] : lat[a * R + b], w = a == b ? in_bw[a] : bw[a * R + b];
            set_link(sc, i, j, l * noise(rng, 0.1), w * noise(rng, 0.1));
        }
    free(lat);
    free(bw);
    return rc;
}

/* mixed: 3/8 data-centre GPUs (8 per site, 300 TFLOP/s, 80 GiB, 50 Gbit/s
 * inside, 5 Gbit/s uplinks), 3/8 university GPUs (4 per site, 100 TFLOP/s,
 * 32 GiB, 10 Gbit/s inside, 1 Gbit/s uplinks), the rest home machines
 * (alone, 70 TFLOP/s, 24 GiB, 0.05-0.5 Gbit/s uplinks).  Sites sit on an
 * 8,000 km square; between sites the slower uplink and the distance count. */
static int family_mixed(struct scenario *sc, uint64_t *rng, int *site, double *xy)
{
    int n = sc->n, dc = 3 * n / 8, uni = 3 * n / 8, sites = 0;
    double *uplink = malloc(sizeof(double) * (size_t)n);
    if (!uplink)
        return -1;
    for (int i = 0; i < n; i++) {
        int kind = i < dc ? 0 : i < dc + uni ? 1 : 2;
        int first = i == 0 || (kind == 0 && i % 8 == 0) || (kind == 1 && (i - dc) % 4 == 0) || kind == 2 ||
                    (kind == 1 && i == dc);
        if (first) {
            xy[2 * sites] = 8000.0 * unit_draw(rng);
            xy[2 * sites + 1] = 8000.0 * unit_draw(rng);
            uplink[sites] = kind == 0 ? 5.0 : kind == 1 ? 1.0 : 0.05 + 0.45 * unit_draw(rng);
            sites++;
        }
        site[i] = sites - 1;
        char label[32];
        snprintf(label, sizeof label, "%s-%d", kind == 0 ? "dc" : kind == 1 ? "uni" : "home", sites - 1);
        set_node(sc, i, label, kind == 0 ? 300 : kind == 1 ? 100 : 70, kind == 0 ? 80 : kind == 1 ? 32 : 24);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int a = site[i], b = site[j];
            if (a == b) {
                int in_dc = i < dc;
                set_link(sc, i, j, in_dc ? 0.1 : 0.5, in_dc ? 50 : 10);
                continue;
            }
            double up = uplink[a] < uplink[b] ? uplink[a] : uplink[b];
            set_link(sc, i, j, fibre_ms(dist_km(xy, a, b)) * noise(rng, 0.1) + (j >= dc + uni ? 5 : 0),
                     up * noise(rng, 0.1));
        }
    free(uplink);
    return 0;
}

int scenario_family(const char *family, int n, uint64_t seed, struct scenario *sc, struct shoal_err *err)
{
    int known = strcmp(family, "plane") == 0 || strcmp(family, "regions") == 0 || strcmp(family, "mixed") == 0;
    if (!known)
        return err_set(err, 422, "invalid_field", "family", "unknown family '%s'; use plane, regions or mixed",
                       family);
    if (n < 2 || scenario_alloc(sc, n) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory or fewer than 2 nodes");
    uint64_t rng = seed ^ 0xfa3117ULL;
    int *site = malloc(sizeof(int) * (size_t)n);
    double *xy = malloc(sizeof(double) * 2 * (size_t)n);
    int rc = -1;
    if (site && xy) {
        rc = 0;
        if (family[0] == 'p')
            family_plane(sc, &rng, xy);
        else if (family[0] == 'r')
            rc = family_regions(sc, &rng, site);
        else
            rc = family_mixed(sc, &rng, site, xy);
    }
    free(site);
    free(xy);
    if (rc != 0) {
        scenario_free(sc);
        return err_set(err, 500, "internal", NULL, "out of memory");
    }
    return 0;
}
