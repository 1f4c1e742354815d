/* sample.h - `shoal-agent sample`: text from a trained job.
 *
 * Loads a job's complete checkpoint from the server (every stage's file,
 * SHA-256 checked), rebuilds the stages on the cpu from the files' own
 * headers, and generates tokens one at a time: each new token runs the
 * whole window (the last `context` tokens) through the stages in order and
 * draws from the last stage's logits at the newest position, softened by a
 * temperature.  Byte-level jobs ("text") print the bytes and take a text
 * --prompt.  Token-shard jobs ("llmc") print token ids, or with --tokenizer
 * (any file bpe.h reads) each token's bytes; their prompt is text encoded
 * with that tokenizer, or token ids (--prompt-tokens).  The tokenizer must
 * be the model's: no more tokens than its vocabulary, and no fewer than
 * padding explains (a model pads its vocabulary by a few hundred rows);
 * ids it has no bytes for (the padding) are never drawn, and print as
 * "<|id|>" in a prompt.  Both kinds print control characters other than
 * newline and tab as '?'.  Loading says on stderr how far it is.
 *
 * It needs the admin token (checkpoints are an operator's to read) and
 * nothing else of the agent: no node identity, no peer port. */
#ifndef SHOAL_AGENT_SAMPLE_H
#define SHOAL_AGENT_SAMPLE_H

#include <stdio.h>

/* Runs the subcommand with argv[first..] as its options; writes the
 * sample to `out` and errors to stderr.  Returns the process exit status:
 * 0, 1 when the job, checkpoint or server fails, 2 for bad options. */
int sample_main(int argc, char **argv, int first, FILE *out);

#endif
