/* tokenize.h - `shoal-agent tokenize`: text in, token shards and their
 * manifest out (or the ids printed).
 *
 * Documents: each plain text file is one; each line of a JSON-lines file
 * (a name ending in .jsonl) is one, its `text` field (--text-field).  Each
 * document starts with the separator (the tokenizer's begin-of-text token
 * where it has one, as llm.c does for Llama 3, else its end-of-text token,
 * as llm.c and nanoGPT do for GPT-2), then its ids.  Document i (0-based,
 * in input order) is held out for validation when a hash of i falls under
 * --val-fraction, so which documents are held out depends on nothing but
 * their order.  Ids are concatenated in document order and cut into shards
 * of --shard-tokens: the output is the same byte for byte whatever
 * --threads is.
 *
 * Shards are llm.c's format: 256 int32 of header ([0] magic, [1] version,
 * [2] tokens), then the tokens little-endian: uint16 (magic 20240520,
 * version 1) where the vocabulary fits, else uint32 (magic 20240801,
 * version 7, as llm.c writes Llama 3's).  The manifest, dataset.json
 * (data.h), lists the tokenizer (with the Unicode version of PCRE2's
 * tables, which decide what a letter is), the token type and every
 * shard's split, tokens and SHA-256; it is written last, so a directory
 * with one is complete.  --extend 1 adds documents to such a directory:
 * new shards after its own, document indices going on from its count, the
 * manifest rewritten by a rename; only a dataset of the same tokenizer
 * file, separator and Unicode version (a manifest that records none is
 * refused too). */
#ifndef SHOAL_AGENT_TOKENIZE_H
#define SHOAL_AGENT_TOKENIZE_H

#include <stdio.h>

int tokenize_main(int argc, char **argv, int first, FILE *out);

#endif
