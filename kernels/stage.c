/* stage.c - the backend-neutral half of a stage: validation, device choice,
 * micro-batch slots, and the calls into the backend's operations table. */
#include "stage.h"

#include <errno.h>
#include <limits.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdlib.h>
#include <string.h>

int kern_cuda_built(void)
{
    return kern_cuda_ops != NULL;
}

void kern_set_threads(int n)
{
#ifdef _OPENMP   /* a build without OpenMP (the fuzz targets') runs one thread */
    if (n >= 1)
        omp_set_num_threads(n);   /* OpenBLAS's OpenMP build reads the same count */
#else
    (void)n;
#endif
}

int kern_device_parse(const char *name, struct kern_device *out, struct kern_err *err)
{
    if (!name || strcmp(name, "cpu") == 0) {
        out->kind = KERN_CPU;
        out->index = 0;
        return 0;
    }
    if (strncmp(name, "cuda", 4) != 0 || (name[4] != '\0' && name[4] != ':'))
        return kern_fail(err, "unknown device '%s': use cpu, cuda or cuda:N", name);
    long index = 0;
    if (name[4] == ':') {
        char *end;
        errno = 0;
        index = strtol(name + 5, &end, 10);
        if (errno || end == name + 5 || *end || index < 0 || index > 255)
            return kern_fail(err, "bad device '%s': N in cuda:N must be 0..255", name);
    }
    if (!kern_cuda_built())
        return kern_fail(err, "device '%s': this build has no CUDA backend "
                         "(rebuild where nvcc is installed, or use --device cpu)", name);
    struct kern_err cerr = {{0}};
    int count = kern_cuda_device_count(&cerr);
    if (count <= 0)
        return kern_fail(err, "device '%s': no CUDA device is usable: %s", name, cerr.msg);
    if (index >= count)
        return kern_fail(err, "device '%s': only %d CUDA device(s) present", name, count);
    out->kind = KERN_CUDA;
    out->index = (int)index;
    return 0;
}

int kern_device_describe(const struct kern_device *dev, char *name, size_t name_len,
                         size_t *memory_bytes, struct kern_err *err)
{
    if (dev->kind == KERN_CPU) {
        if (name_len)
            name[0] = '\0';
        *memory_bytes = 0;
        return 0;
    }
    return kern_cuda_describe(dev->index, name, name_len, memory_bytes, err);
}

int kern_model_check(const struct model_config *m, struct kern_err *err)
{
    struct model_config n = *m;
    const char *field = "";
    char msg[200];
    model_config_normalise(&n);
    if (model_config_check(&n, &field, msg, sizeof msg))
        return kern_fail(err, "model: %s", msg);
    return 0;
}

static int check_spec(const struct model_config *m, const struct kern_stage_spec *s,
                      struct kern_err *err)
{
    if (s->layer_start < 0 || s->layer_end < s->layer_start || s->layer_end > m->layers)
        return kern_fail(err, "stage: a layer range of layer_start %d and layer_end %d is not within the "
                         "model's layers " LAYER_RANGE_FMT, s->layer_start, s->layer_end, LAYER_RANGE(0, m->layers));
    if (!!s->first != (s->layer_start == 0))
        return kern_fail(err, "stage: the first stage, and only it, starts at layer 0");
    if (!!s->last != (s->layer_end == m->layers))
        return kern_fail(err, "stage: the last stage, and only it, ends at layer %d",
                         m->layers);
    if (s->micro_batch < 1 || s->seq_len < 1 || s->seq_len > m->context)
        return kern_fail(err, "stage: micro_batch must be >= 1 and seq_len in [1,%d]",
                         m->context);
    if (s->in_flight < 1 || s->in_flight > 4096)
        return kern_fail(err, "stage: in_flight must be in [1,4096]");
    if (!codec_get(s->link))
        return kern_fail(err, "stage: unknown link format %d (common/codec.h lists them)", (int)s->link);
    int64_t bt = (int64_t)s->micro_batch * s->seq_len;
    int64_t widest = m->vocab > 2 * m->ffn_dim ? m->vocab : 2 * m->ffn_dim;
    widest = widest > 3 * m->d_model ? widest : 3 * m->d_model;
    if (bt > INT_MAX / 4 || bt * widest > INT_MAX ||
        (int64_t)s->micro_batch * m->heads * s->seq_len * s->seq_len > INT_MAX)
        return kern_fail(err, "stage: micro-batch of %d x %d tokens is too large",
                         s->micro_batch, s->seq_len);
    return 0;
}

int kern_stage_new(const struct kern_device *dev, const struct model_config *model,
                   const struct kern_stage_spec *spec, struct kern_stage **out,
                   struct kern_err *err)
{
    struct kern_stage *st = NULL;
    float *params = NULL;
    int rc = -1;

    *out = NULL;
    struct model_config norm = *model;
    model_config_normalise(&norm);
    if (kern_model_check(&norm, err) || check_spec(&norm, spec, err))
        goto out;
    if (dev->kind == KERN_CUDA && !kern_cuda_ops) {
        kern_fail(err, "this build has no CUDA backend");
        goto out;
    }
    st = calloc(1, sizeof *st);
    if (!st) {
        kern_fail(err, "out of memory");
        goto out;
    }
    st->model = norm;
    st->spec = *spec;
    st->device = *dev;
    st->ops = dev->kind == KERN_CUDA ? kern_cuda_ops : &kern_cpu_ops;
    st->slot_mb = malloc((size_t)spec->in_flight * sizeof *st->slot_mb);
    if (!st->slot_mb) {
        kern_fail(err, "out of memory");
        goto out;
    }
    for (int i = 0; i < spec->in_flight; i++)
        st->slot_mb[i] = -1;
    if (kern_layout_build(st, err))
        goto out;
    if (spec->link != CODEC_F32 && !st->ops->encodes_links && !(spec->first && spec->last)) {
        size_t btc = (size_t)spec->micro_batch * spec->seq_len * norm.d_model;
        st->link_in = malloc(btc * sizeof(float));
        st->link_out = malloc(btc * sizeof(float));
        if (!st->link_in || !st->link_out) {
            kern_fail(err, "out of memory for the link's hidden states");
            goto out;
        }
    }
    params = malloc(st->n_params * sizeof *params);
    if (!params) {
        kern_fail(err, "out of memory for %zu parameters", st->n_params);
        goto out;
    }
    kern_layout_init_params(st, params);
    if (st->ops->init(st, params, err))
        goto out;
    *out = st;
    st = NULL;
    rc = 0;
out:
    free(params);
    kern_stage_free(st);
    return rc;
}

void kern_stage_free(struct kern_stage *st)
{
    if (!st)
        return;
    if (st->impl)
        st->ops->release(st);
    free(st->tensors);
    free(st->slot_mb);
    free(st->link_in);
    free(st->link_out);
    for (int i = 0; i < KERN_EXTRA_COUNT; i++)
        free(st->extra[i]);
    free(st->file_source);
    free(st);
}

float *kern_stage_extra(struct kern_stage *st, enum kern_extra which)
{
    if ((unsigned)which >= KERN_EXTRA_COUNT)
        return NULL;
    if (!st->extra[which])
        st->extra[which] = calloc(st->n_params ? st->n_params : 1, sizeof(float));
    return st->extra[which];
}

float *kern_stage_extra_if(const struct kern_stage *st, enum kern_extra which)
{
    return (unsigned)which < KERN_EXTRA_COUNT ? st->extra[which] : NULL;
}

const struct model_config *kern_stage_model(const struct kern_stage *st) { return &st->model; }
const struct kern_stage_spec *kern_stage_spec(const struct kern_stage *st) { return &st->spec; }
size_t kern_stage_param_count(const struct kern_stage *st) { return st->n_params; }
int kern_stage_tensor_count(const struct kern_stage *st) { return st->n_tensors; }
uint64_t kern_stage_step(const struct kern_stage *st) { return st->step; }

const struct kern_tensor *kern_stage_tensor(const struct kern_stage *st, int i)
{
    return i >= 0 && i < st->n_tensors ? &st->tensors[i] : NULL;
}

static int check_tokens(const int32_t *ids, size_t n, int vocab, const char *what,
                        struct kern_err *err)
{
    if (!ids)
        return kern_fail(err, "%s: missing", what);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return kern_fail(err, "%s: token %d at position %zu is outside [0,%d)",
                             what, ids[i], i, vocab);
    return 0;
}

/* Values of one hidden state (B,T,C). */
static size_t hidden_values(const struct kern_stage *st)
{
    return (size_t)st->spec.micro_batch * st->spec.seq_len * (size_t)st->model.d_model;
}

size_t kern_stage_link_bytes(const struct kern_stage *st)
{
    return (size_t)codec_bytes(st->spec.link, hidden_values(st), (uint64_t)st->model.d_model);
}

/* A hidden state arriving in the link's format, as the backend takes it:
 * unpacked into `into` on the host when the backend does not unpack it. */
static const void *link_unpack(struct kern_stage *st, const void *in, float *into)
{
    if (!into)
        return in;
    codec_decode(st->spec.link, in, hidden_values(st), (size_t)st->model.d_model, into, 0);
    return into;
}

/* A hidden state the backend wrote into `from` (the host buffer of a
 * backend that does not pack), packed into the caller's `out`. */
static void link_pack(struct kern_stage *st, const float *from, void *out)
{
    if (from)
        codec_encode(st->spec.link, from, hidden_values(st), (size_t)st->model.d_model, out, NULL);
}

int kern_stage_forward(struct kern_stage *st, int mb, const void *input,
                       const int32_t *targets, void *output, struct kern_err *err)
{
    size_t bt = (size_t)st->spec.micro_batch * st->spec.seq_len;
    if (mb < 0)
        return kern_fail(err, "forward: micro-batch %d is negative", mb);
    int slot = mb % st->spec.in_flight;
    if (st->slot_mb[slot] >= 0)
        return kern_fail(err, "forward: micro-batch %d would overwrite micro-batch %d, "
                         "which has not run backward (%d in flight at most)",
                         mb, st->slot_mb[slot], st->spec.in_flight);
    if (!input || !output)
        return kern_fail(err, "forward: input and output are required");
    if (st->spec.first && check_tokens(input, bt, st->model.vocab, "forward input", err))
        return -1;
    if (st->spec.last && check_tokens(targets, bt, st->model.vocab, "forward targets", err))
        return -1;
    float *in = st->spec.first ? NULL : st->link_in, *out = st->spec.last ? NULL : st->link_out;
    if (st->ops->forward(st, slot, link_unpack(st, input, in), targets, out ? (void *)out : output, err))
        return -1;
    link_pack(st, out, output);
    st->slot_mb[slot] = mb;
    return 0;
}

int kern_stage_backward(struct kern_stage *st, int mb, const void *grad_output,
                        void *grad_input, struct kern_err *err)
{
    if (mb < 0)
        return kern_fail(err, "backward: micro-batch %d is negative", mb);
    int slot = mb % st->spec.in_flight;
    if (st->slot_mb[slot] != mb)
        return kern_fail(err, "backward: micro-batch %d has no forward in flight", mb);
    if (!grad_output || (!st->spec.first && !grad_input))
        return kern_fail(err, "backward: grad_output%s is required",
                         st->spec.first ? "" : " and grad_input");
    float *in = st->spec.last ? NULL : st->link_out, *out = st->spec.first ? NULL : st->link_in;
    if (st->ops->backward(st, slot, link_unpack(st, grad_output, in), out ? (void *)out : grad_input, err))
        return -1;
    link_pack(st, out, grad_input);
    st->slot_mb[slot] = -1;
    return 0;
}

int kern_stage_logits(struct kern_stage *st, const void *input, float *logits,
                      struct kern_err *err)
{
    size_t bt = (size_t)st->spec.micro_batch * st->spec.seq_len;
    if (!st->spec.last)
        return kern_fail(err, "logits: the stage holds layers " LAYER_RANGE_FMT " but not the head",
                         LAYER_RANGE(st->spec.layer_start, st->spec.layer_end));
    if (st->device.kind != KERN_CPU)
        return kern_fail(err, "logits: only the cpu backend computes logits; load the stage on the cpu");
    if (st->slot_mb[0] >= 0)
        return kern_fail(err, "logits: micro-batch %d is in flight in slot 0", st->slot_mb[0]);
    if (!input || !logits)
        return kern_fail(err, "logits: input and output are required");
    if (st->spec.first && check_tokens(input, bt, st->model.vocab, "logits input", err))
        return -1;
    /* targets NULL: the cpu forward stops at the logits. */
    return st->ops->forward(st, 0, link_unpack(st, input, st->spec.first ? NULL : st->link_in), NULL, logits,
                            err);
}

void kern_stage_drop_in_flight(struct kern_stage *st)
{
    for (int i = 0; i < st->spec.in_flight; i++)
        st->slot_mb[i] = -1;
}

int kern_stage_zero_grad(struct kern_stage *st, struct kern_err *err)
{
    return st->ops->zero_grad(st, err);
}

int kern_stage_grad_norm2(struct kern_stage *st, double *out, struct kern_err *err)
{
    /* A tied head's gradient is wte's (kern_stage_tie_grads): counted once,
     * on the stage holding wte. */
    size_t n = st->n_params, from = n, to = n;
    double a = 0, b = 0;
    if (st->model.tied && st->spec.last) {
        from = st->off_head;
        to = from + (size_t)st->model.vocab * st->model.d_model;
    }
    if (st->ops->grad_norm2(st, 0, from, &a, err) || (to < n && st->ops->grad_norm2(st, to, n - to, &b, err)))
        return -1;
    *out = a + b;
    return 0;
}

int kern_stage_tied_tensor(const struct kern_stage *st, size_t *offset, size_t *count)
{
    if (!st->model.tied || st->spec.first == st->spec.last)
        return 0;
    *offset = st->spec.first ? st->off_wte : st->off_head;
    *count = (size_t)model_tied_params(&st->model);
    return 1;
}

int kern_stage_tie_grads(struct kern_stage *st, struct kern_err *err)
{
    if (!st->model.tied || !st->spec.first || !st->spec.last)
        return 0;
    if (!st->ops->tie_grads)
        return kern_fail(err, "tie: the %s backend cannot tie a head to its embedding",
                         st->device.kind == KERN_CUDA ? "cuda" : "cpu");
    return st->ops->tie_grads(st, st->off_wte, st->off_head, (size_t)model_tied_params(&st->model), err);
}

int kern_stage_adamw(struct kern_stage *st, const struct kern_adamw *h, struct kern_err *err)
{
    if (!(h->lr >= 0) || !(h->beta1 >= 0 && h->beta1 < 1) || !(h->beta2 >= 0 && h->beta2 < 1) ||
        !(h->eps > 0) || !(h->weight_decay >= 0) || !(h->grad_scale == h->grad_scale))
        return kern_fail(err, "adamw: need lr >= 0, betas in [0,1), eps > 0, "
                         "weight_decay >= 0 and a finite grad_scale");
    if (st->ops->adamw(st, h, st->step + 1, err))
        return -1;
    st->step++;
    return 0;
}

float *kern_stage_grad_buffer(struct kern_stage *st, int *on_device)
{
    if (on_device)
        *on_device = st->device.kind == KERN_CUDA;
    return st->ops->grad_buffer(st);
}

int kern_stage_read(struct kern_stage *st, enum kern_buffer which, float *dst,
                    struct kern_err *err)
{
    return st->ops->read(st, which, dst, err);
}

int kern_stage_range(struct kern_stage *st, enum kern_buffer which, size_t off, size_t count, float *host,
                     int to_host, struct kern_err *err)
{
    if (off > st->n_params || count > st->n_params - off)
        return kern_fail(err, "range [%zu,%zu) is outside the stage's %zu floats", off, off + count, st->n_params);
    return count ? st->ops->transfer_range(st, which, off, count, host, to_host, err) : 0;
}

int kern_stage_write(struct kern_stage *st, enum kern_buffer which, const float *src,
                     struct kern_err *err)
{
    return st->ops->write(st, which, src, err);
}

double kern_stage_flops(const struct kern_stage *st)
{
    double T = st->spec.seq_len;
    int blocks = st->spec.layer_end - st->spec.layer_start;
    return model_flops_per_token(&st->model, blocks, st->spec.last, T) * st->spec.micro_batch * T;
}
