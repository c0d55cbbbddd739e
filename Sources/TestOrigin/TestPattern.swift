import CTestPattern

/// A deterministic, position-dependent byte pattern used as the body of test resources.
///
/// The byte at absolute offset `o` is byte `o % 8` (little-endian) of `mix(seed, o / 8)`, where `mix` is
/// the SplitMix64 finaliser. Every 8-byte word therefore depends on both its position and the seed, so a
/// byte written at the wrong offset, a duplicated or dropped span, or a body from another version of the
/// resource (another seed) is detected by comparing against the pattern. Generating it costs a handful of
/// integer operations per 8 bytes, which lets the origin serve multi-GiB resources without holding them in
/// memory. Filling and checking are C (CTestPattern), fast in the tests' debug builds too, where the checks
/// run on the cooperative pool beside every other test.
public enum TestPattern {
    /// The 64-bit word covering absolute byte offsets `8 * wordIndex ..< 8 * wordIndex + 8` (SplitMix64's
    /// finaliser of the index and the seed; its one definition is `dk_test_pattern_word` in CTestPattern).
    @inline(__always)
    public static func word(at wordIndex: UInt64, seed: UInt64) -> UInt64 {
        dk_test_pattern_word(wordIndex, seed)
    }

    /// The pattern byte at one absolute offset.
    public static func byte(at offset: Int64, seed: UInt64) -> UInt8 {
        precondition(offset >= 0, "TestPattern offsets are non-negative")
        let word = word(at: UInt64(offset) >> 3, seed: seed)
        return UInt8(truncatingIfNeeded: word >> ((UInt64(offset) & 7) * 8))
    }

    /// Fills `buffer` with the pattern bytes for absolute offsets `offset ..< offset + buffer.count`.
    ///
    /// - Parameters:
    ///   - buffer: The destination; any alignment, any length.
    ///   - offset: The absolute offset (bytes, ≥ 0) of `buffer[0]` within the resource.
    ///   - seed: Selects the pattern (a "version" of the resource).
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer, offset: Int64, seed: UInt64) {
        precondition(offset >= 0, "TestPattern offsets are non-negative")
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        dk_test_pattern_fill(base, buffer.count, UInt64(offset), seed)
    }

    /// The pattern bytes for absolute offsets `offset ..< offset + count`.
    public static func bytes(offset: Int64, count: Int, seed: UInt64) -> [UInt8] {
        precondition(count >= 0, "count must be non-negative")
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            fill(UnsafeMutableRawBufferPointer(buffer), offset: offset, seed: seed)
            initialized = count
        }
    }

    /// The index of the first byte of `bytes` that differs from the pattern at `offset`, or `nil` if all match.
    ///
    /// - Parameters:
    ///   - bytes: Bytes claimed to be the resource's bytes starting at absolute `offset`.
    ///   - offset: The absolute offset of `bytes[0]`.
    ///   - seed: The pattern's seed.
    /// - Returns: An index into `bytes` (not an absolute offset), or `nil` when every byte matches.
    public static func firstMismatch(in bytes: UnsafeRawBufferPointer, offset: Int64, seed: UInt64) -> Int? {
        precondition(offset >= 0, "TestPattern offsets are non-negative")
        guard let base = bytes.baseAddress, bytes.count > 0 else { return nil }
        let index = dk_test_pattern_first_mismatch(base, bytes.count, UInt64(offset), seed)
        return index < 0 ? nil : Int(index)
    }

    /// Whether `bytes` equal the pattern bytes starting at absolute `offset`.
    public static func matches(_ bytes: [UInt8], offset: Int64, seed: UInt64) -> Bool {
        bytes.withUnsafeBytes { firstMismatch(in: $0, offset: offset, seed: seed) == nil }
    }
}
