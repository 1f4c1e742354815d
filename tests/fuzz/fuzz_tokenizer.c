/* fuzz_tokenizer.c - llm.c's tokenizer file reader (agent/tools/tokenizer.c):
 * tokenizer_load on the bytes, as tokenizer_open does on a file's, then
 * every token decoded.
 *
 * Input: the file.  An accepted one must account for every byte of the
 * input (header, then a length byte and 1-255 bytes per token, nothing
 * after), hold eot below its vocabulary and give each id its own bytes;
 * ids outside it must have none.  A refused one is a 422 with a reason. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/tools/tokenizer.h"

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokenizer: broken promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tokenizer t;
    struct shoal_err err;
    if (tokenizer_load(data, size, "fuzz", &t, &err) != 0) {
        expect(err.status == 422 && strncmp(err.message, "tokenizer 'fuzz': ", 18) == 0 && err.message[18],
               "a bad tokenizer file is a 422 with a reason");
        expect(!t.pieces && !t.at && t.vocab == 0, "a refused file leaves nothing behind");
        return 0;
    }
    expect(t.vocab >= 1 && t.vocab <= TOKENIZER_VOCAB_MAX && t.eot < t.vocab, "vocab and eot in range");
    expect(t.version == 1 || t.version == 2, "version 1 or 2");
    size_t at = TOKENIZER_HEADER_BYTES;
    for (uint32_t i = 0; i < t.vocab; i++) {
        size_t n;
        const unsigned char *p = tokenizer_decode(&t, i, &n);
        expect(p != NULL && n >= 1 && n <= 255, "every token has 1 to 255 bytes");
        expect(at + 1 + n <= size && data[at] == n && memcmp(p, data + at + 1, n) == 0,
               "each token's bytes are the file's, in order");
        at += 1 + n;
    }
    expect(at == size, "the tokens end where the file does");
    size_t n = 1;
    expect(!tokenizer_decode(&t, t.vocab, &n) && n == 0 && !tokenizer_decode(&t, -1, &n),
           "ids outside the vocabulary have no bytes");
    tokenizer_free(&t);
    return 0;
}
