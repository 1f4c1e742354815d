/* export.h - `shoal-agent export`: a trained job's model in the formats
 * people load GPT-2 weights from.
 *
 * Loads a job's complete checkpoint as `sample` does (job_ckpt.h: every
 * stage file SHA-256 checked on the way down), joins the stages into the
 * whole model (models/model_io.h) and writes into --out:
 *
 *   model.safetensors   Hugging Face weights (GPT2LMHeadModel's or
 *                       LlamaForCausalLM's), F32 or --dtype bf16, with
 *                       lm_head.weight when the head is not tied (shoal
 *                       trains it apart from wte, so it almost never is);
 *   config.json         the config beside it: the one imported with the
 *                       model (models/hf_source.h) with what training
 *                       changed changed, else the family's own;
 *   generation_config.json  the token ids transformers derives from it;
 *   tokenizer files     those the import kept, or --tokenizer's;
 *   model.bin           with --llmc on: llm.c's checkpoint (version 3,
 *                       fp32), which holds one matrix for the embedding and
 *                       the head, so it is refused when they differ.
 *
 * Each file is written under a temporary name in --out and renamed when it
 * is complete, so a file of one of these names is never partial; one line
 * per file goes to `out`: its name, size in bytes and SHA-256. */
#ifndef SHOAL_AGENT_EXPORT_H
#define SHOAL_AGENT_EXPORT_H

#include <stdio.h>

/* Runs the subcommand with argv[first..] as its options; writes one line
 * per exported file to `out` and errors to stderr.  Returns the process
 * exit status: 0, 1 when the job, checkpoint, server or a write fails (or
 * --llmc on meets an untied head), 2 for bad options. */
int export_main(int argc, char **argv, int first, FILE *out);

#endif
