/* sample.h - `shoal-agent sample`: text from a trained job.
 *
 * Loads a job's complete checkpoint from the server (every stage's file,
 * SHA-256 checked), rebuilds the stages on the cpu from the files' own
 * headers, and generates tokens one at a time: each new token runs the
 * whole window (the last `context` tokens) through the stages in order and
 * draws from the last stage's logits at the newest position, softened by a
 * temperature.  Byte-level jobs ("text") print the bytes and take a text
 * --prompt.  Token-shard jobs ("llmc") print token ids, or with --tokenizer
 * (llm.c's gpt2_tokenizer.bin, tokenizer.h) each token's bytes, "<|id|>"
 * for ids past the tokenizer's vocabulary (the rows a model pads its
 * vocabulary with); their prompt is token ids (--prompt-tokens), since
 * shoal decodes GPT-2's BPE but cannot encode text into it.  Both kinds
 * print control characters other than newline and tab as '?'.
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
