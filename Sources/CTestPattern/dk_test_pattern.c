#include "dk_test_pattern.h"

#include <string.h>

void dk_test_pattern_fill(void *buffer, size_t count, uint64_t offset, uint64_t seed) {
    unsigned char *out = buffer;
    size_t position = 0;
    // A leading partial word, byte by byte.
    while (position < count && (offset & 7) != 0) {
        uint64_t word = dk_test_pattern_word(offset >> 3, seed);
        out[position++] = (unsigned char)(word >> ((offset & 7) * 8));
        offset++;
    }
    // Whole words, little-endian whatever the host's order.
    uint64_t index = offset >> 3;
    while (count - position >= 8) {
        uint64_t word = dk_test_pattern_word(index++, seed);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        word = __builtin_bswap64(word);
#endif
        memcpy(out + position, &word, 8);
        position += 8;
    }
    // A trailing partial word.
    if (position < count) {
        uint64_t word = dk_test_pattern_word(index, seed);
        while (position < count) {
            out[position++] = (unsigned char)word;
            word >>= 8;
        }
    }
}

int64_t dk_test_pattern_first_mismatch(const void *bytes, size_t count, uint64_t offset, uint64_t seed) {
    const unsigned char *given = bytes;
    unsigned char expected[16 * 1024];  // on the stack: 16 KiB fits any thread a test or the bench starts
    size_t start = 0;
    while (start < count) {
        size_t length = count - start < sizeof expected ? count - start : sizeof expected;
        dk_test_pattern_fill(expected, length, offset + start, seed);
        if (memcmp(expected, given + start, length) != 0) {
            for (size_t i = 0; i < length; i++) {
                if (expected[i] != given[start + i]) return (int64_t)(start + i);
            }
        }
        start += length;
    }
    return -1;
}
