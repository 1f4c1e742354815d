/* pipeline.c - GPipe and 1F1B op orders (see pipeline.h). */
#include "pipeline.h"

#include <string.h>

int pipe_parse(const char *name, enum pipe_kind *out)
{
    if (strcmp(name, "gpipe") == 0)
        *out = PIPE_GPIPE;
    else if (strcmp(name, "1f1b") == 0)
        *out = PIPE_1F1B;
    else
        return -1;
    return 0;
}

int pipe_schedule(enum pipe_kind kind, int stage, int stages, int micro_batches, struct pipe_op *ops)
{
    int M = micro_batches, n = 0, fwd = 0, bwd = 0;
    /* Forwards before the first backward: all of them for GPipe; for 1F1B
     * enough to fill the pipe below this stage, plus the one whose backward
     * comes first. */
    int warmup = kind == PIPE_GPIPE ? M : stages - 1 - stage;
    if (warmup > M)
        warmup = M;
    for (; fwd < warmup; fwd++)
        ops[n++] = (struct pipe_op){ PIPE_FORWARD, fwd };
    while (bwd < M) {
        if (fwd < M)
            ops[n++] = (struct pipe_op){ PIPE_FORWARD, fwd++ };
        ops[n++] = (struct pipe_op){ PIPE_BACKWARD, bwd++ };
    }
    return kind == PIPE_GPIPE ? M : (warmup + 1 < M ? warmup + 1 : M);
}
