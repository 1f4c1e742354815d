/* eval.c - the validation pass (eval.h). */
#include "eval.h"

#include "../../common/log.h"
#include "tasklet.h"

int eval_due(const struct assignment *as, int64_t t)
{
    return as->has_validation && ((t + 1) % as->eval_interval == 0 || t + 1 == as->steps);
}

int eval_run(struct tasklet *k, uint64_t t, struct shoal_err *err)
{
    const struct assignment *as = k->as;
    struct kern_err ke = {{0}};
    int B = as->micro_batch_size, T = kern_stage_spec(k->st)->seq_len;
    int first = as->stage == 0, last = as->stage == as->stages - 1;
    int batches = as->val_sequences / B;
    double sum = 0;
    k->val_count = 0;
    for (int v = as->replica; v < batches; v += as->replicas) {
        const void *input = k->x;
        float loss;
        if (k->have_val && data_eval_batch(&k->val, (uint64_t)as->val_sequences, (uint64_t)v * (uint64_t)B, B, T,
                                           k->tokens, k->targets, err) != 0)
            return -1;
        if (first)
            input = k->tokens;
        else if (tasklet_recv_tensor(k, k->prev, WIRE_EVAL, t, v, k->x, err) != 0)
            return -1;
        /* Slot 0 is free after the step's AdamW; nothing is kept for a backward. */
        int rc = kern_stage_forward(k->st, 0, input, last ? k->targets : NULL, last ? &loss : k->y, &ke);
        kern_stage_drop_in_flight(k->st);
        if (rc != 0)
            return tasklet_kern_failed(&ke, err);
        if (last) {
            sum += loss;
            k->val_count++;
        } else if (tasklet_send_tensor(k, k->next, WIRE_EVAL, t, v, k->y, err) != 0) {
            return -1;
        }
    }
    if (last && k->val_count > 0) {
        k->val_loss = sum / k->val_count;
        log_info("validation job=%lld step=%llu replica=%d val_loss=%.6f micro_batches=%d", (long long)as->job_id,
                 (unsigned long long)t, as->replica, k->val_loss, k->val_count);
    }
    return 0;
}
