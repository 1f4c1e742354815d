/* import.h - `shoal-agent import`: a job's starting weights from a GPT-2
 * checkpoint people already hold.
 *
 * Reads llm.c's checkpoint (gpt2_124M.bin and its family) or Hugging Face's
 * model.safetensors (with the config.json beside it, or --config), checks
 * the model against the job's spec, splits it into the job's stages (an
 * even split of the layers; the agents assemble any other split the plan
 * picks, tensor by tensor) and uploads each stage file as the job's step-0
 * checkpoint (the parameters alone: the AdamW moments of a step-0 stage
 * are zero and left out, models/checkpoint.h), SHA-256 checked by the server.  The job must not have been
 * scheduled yet; when it is, every stage trains on from these weights (the
 * head starts as a copy of the tied embedding), and a failure before its
 * first checkpoint recovers from them too.
 *
 * A Hugging Face import keeps the folder's config.json whole and its
 * tokenizer files (--tokenizer, or --model's folder) in stage 0's file
 * (models/hf_source.h), for export to write back.
 *
 * Nothing is uploaded when the file cannot be read or holds another model:
 * V, d_model, heads and layers must equal the job's; the job's context may
 * be shorter than the file's (the position embedding's first rows are
 * kept, as nanoGPT's crop_block_size does), not longer. */
#ifndef SHOAL_AGENT_IMPORT_H
#define SHOAL_AGENT_IMPORT_H

#include <stdio.h>

/* Runs the subcommand with argv[first..] as its options; writes one line
 * per uploaded stage file to `out` and errors to stderr.  Returns the
 * process exit status: 0, 1 when the file, the job or the server refuses,
 * 2 for bad options. */
int import_main(int argc, char **argv, int first, FILE *out);

#endif
