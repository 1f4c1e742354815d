/* fuzz_dataset.c - the dataset shard reader (agent/train/data.c): data_check on
 * the bytes, as data_open does on a mapped file, then a few data_batch
 * calls on what it accepts, checking every token against the vocabulary.
 *
 * Input: byte 0 bit 0 picks the format (0 llmc, 1 text); bytes 1-2 the
 * vocabulary (little-endian, 0 meaning 65536); byte 3 the sequence length
 * T - 1 (so T is 1..256); the rest is the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/train/data.h"

#define BATCH_SEQUENCES 3

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_dataset: broken promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct data_source src;
    struct shoal_err err;
    int32_t tokens[BATCH_SEQUENCES * 256], targets[BATCH_SEQUENCES * 256];
    if (size < 4)
        return 0;
    enum data_format format = data[0] & 1 ? DATA_TEXT : DATA_LLMC;
    int vocab = data[1] | data[2] << 8;
    int T = data[3] + 1;
    if (vocab == 0)
        vocab = 65536;
    if (data_check(data + 4, size - 4, format, vocab, T, "fuzz", &src, &err) != 0) {
        expect(err.status == 422 && err.message[0], "a bad dataset is a 422 with a reason");
        return 0;
    }
    expect(src.n_tokens >= (size_t)T + 1, "an accepted dataset holds a sequence and its target");
    for (uint64_t step = 0; step < 3; step++) {
        expect(data_batch(&src, 1234, step, step * BATCH_SEQUENCES, BATCH_SEQUENCES, T, tokens, targets, &err) == 0,
               "one shard, checked at once, reads");
        for (int i = 0; i < BATCH_SEQUENCES * T; i++)
            expect(tokens[i] >= 0 && tokens[i] < vocab && targets[i] >= 0 && targets[i] < vocab,
                   "every token of a batch is in the vocabulary");
    }
    data_close(&src);
    return 0;
}
