#ifndef DK_TEST_PATTERN_H
#define DK_TEST_PATTERN_H

#include <stddef.h>
#include <stdint.h>

/// The test resources' byte pattern (TestOrigin's `TestPattern` documents it): the byte at absolute offset `o`
/// is byte `o % 8` (little-endian) of `dk_test_pattern_word(o / 8, seed)`.
///
/// In C because the tests fill and check hundreds of MiB of it in debug builds, where the Swift loops ran at
/// 270 MB/s (fill) and 44 MB/s (check) against 740 and 1,540 MB/s here at -O0 (64 MiB each); the checks ran on
/// the cooperative pool's two threads and held every async test behind them (docs/TESTING.md, "The pool").

/// The 64-bit word covering absolute byte offsets `8 * index ..< 8 * index + 8`: SplitMix64's finaliser
/// (Steele, Lea, Flood 2014) of the index and the seed.
static inline uint64_t dk_test_pattern_word(uint64_t index, uint64_t seed) {
    uint64_t z = index * UINT64_C(0x9E3779B97F4A7C15) + (seed ^ UINT64_C(0xD1B54A32D192ED03));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/// Writes the pattern bytes for absolute offsets `offset ..< offset + count` to `buffer` (any alignment).
void dk_test_pattern_fill(void *buffer, size_t count, uint64_t offset, uint64_t seed);

/// The index into `bytes` of the first byte that differs from the pattern at absolute `offset`, or -1 when all
/// `count` bytes match.
int64_t dk_test_pattern_first_mismatch(const void *bytes, size_t count, uint64_t offset, uint64_t seed);

#endif
