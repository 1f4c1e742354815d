/* utf8.h - cutting UTF-8 text (an error's message and field, a client's
 * member path) without splitting a character, so that what is cut stays
 * valid UTF-8 and JSON. */
#ifndef SHOAL_UTF8_H
#define SHOAL_UTF8_H

#include <string.h>

/* 1 for a continuation byte (10xxxxxx): not the start of a character. */
static inline int utf8_continuation(unsigned char c)
{
    return (c & 0xc0) == 0x80;
}

/* Cuts `s` (valid UTF-8) to at most `max` (>= 4) bytes at a character
 * boundary, ending in "..." when it was cut. */
static inline void utf8_clip(char *s, size_t max)
{
    size_t cut;
    if (strlen(s) <= max)
        return;
    cut = max - 3;
    while (cut > 0 && utf8_continuation((unsigned char)s[cut]))
        cut--;
    memcpy(s + cut, "...", 4);
}

/* Ends `s` (a string snprintf may have cut at n - 1 bytes) before a
 * character the cut split. */
static inline void utf8_trim_partial(char *s, size_t n)
{
    size_t len = strlen(s), start = len;
    if (len + 1 < n)
        return;   /* not cut */
    while (start > 0 && utf8_continuation((unsigned char)s[start - 1]))
        start--;
    if (start == 0)
        return;
    unsigned char lead = (unsigned char)s[start - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (len - (start - 1) < want)
        s[start - 1] = '\0';
}

#endif
