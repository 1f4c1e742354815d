/* sample.h - `shoal-agent sample`: text from a trained job.
 *
 * Loads a job's complete checkpoint from the server (every stage's file,
 * SHA-256 checked), rebuilds the stages on the cpu from the files' own
 * headers, and generates tokens one at a time: each new token runs the
 * whole window (the last `context` tokens) through the stages in order and
 * draws from the last stage's logits at the newest position, softened by a
 * temperature.  Byte-level jobs ("text") print the bytes; token-shard jobs
 * ("llmc") print token ids, since shoal has no GPT-2 tokenizer.
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
