/* bpe_pattern.h - a pre-tokenizer's split pattern made to mean in PCRE2
 * what it means to tiktoken and Hugging Face's library.
 *
 * `\s` is Unicode's White_Space property in Rust's regex crate (tiktoken)
 * and in Oniguruma (Hugging Face): U+0009..U+000D, U+0020, U+0085, U+00A0,
 * U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.  PCRE2's
 * `\s` (with UCP) also holds U+180E, MONGOLIAN VOWEL SEPARATOR, which left
 * White_Space in Unicode 6.3; so every `\s` and `\S` of a pattern is
 * spelled out as that class before PCRE2 compiles it. */
#ifndef SHOAL_AGENT_BPE_PATTERN_H
#define SHOAL_AGENT_BPE_PATTERN_H

#include <stddef.h>

/* Unicode's White_Space, as the inside of a PCRE2 character class. */
#define BPE_WHITE_SPACE "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}" \
                        "\\x{205f}\\x{3000}"

/* Writes `pattern` to out (cap bytes, NUL-terminated) with each `\s` and
 * `\S` spelled as BPE_WHITE_SPACE: outside a class `[...]` and `[^...]`;
 * inside one, `\s` adds its characters, and a class holding `\S` becomes
 * a group (`[A\S]` is `(?:[^WS]|[A])`, `[^A\S]` is `(?:(?![A])[WS])`).
 * Text quoted by `\Q...\E` is left as it is.  Returns 0, or -1 with a
 * reason in why (why_cap bytes) when out is too small. */
int bpe_pattern_white_space(const char *pattern, char *out, size_t cap, char *why, size_t why_cap);

#endif
