/* crc32c.h - CRC-32C (Castagnoli), the checksum of peer frames.
 * Uses the SSE4.2 crc32 instruction when the CPU has it, else a table. */
#ifndef SHOAL_CRC32C_H
#define SHOAL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC over n more bytes; start with crc = 0.
 * crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

/* The portable table version, exposed so tests can compare the two. */
uint32_t crc32c_portable(uint32_t crc, const void *data, size_t n);

#endif
