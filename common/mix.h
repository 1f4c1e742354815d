/* mix.h - splitmix64, the one 64-bit mixing function shoal uses for seeded
 * randomness and for hashing (seed, step, index) into a sample. kernels/
 * keeps its own copy because it depends on nothing else in shoal. */
#ifndef SHOAL_MIX_H
#define SHOAL_MIX_H

#include <stdint.h>

/* A bijection on 64 bits with full avalanche: splitmix64's output for the
 * state that follows x. */
static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
