/* hex.h - bytes as lowercase hexadecimal digits and back. */
#ifndef SHOAL_HEX_H
#define SHOAL_HEX_H

#include <stddef.h>

/* 0-15 for '0'-'9', 'a'-'f', 'A'-'F'; -1 for anything else. */
static inline int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Writes the n bytes at p as 2n lowercase hex digits and a NUL into out. */
static inline void hex_encode(const void *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Decodes hex, which must be exactly 2n hex digits (either case), into the
 * n bytes at out.  Returns 0, or -1 (out unspecified) when it is not. */
static inline int hex_decode(const char *hex, void *out, size_t n)
{
    unsigned char *b = out;
    for (size_t i = 0; i < n; i++) {
        int hi = hex ? hex_value(hex[2 * i]) : -1, lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);
        if (lo < 0)
            return -1;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return hex && hex[2 * n] == '\0' ? 0 : -1;
}

#endif
