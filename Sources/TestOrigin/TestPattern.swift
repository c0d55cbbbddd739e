/// A deterministic, position-dependent byte pattern used as the body of test resources.
///
/// The byte at absolute offset `o` is byte `o % 8` (little-endian) of `mix(seed, o / 8)`, where `mix` is
/// the SplitMix64 finaliser. Every 8-byte word therefore depends on both its position and the seed, so a
/// byte written at the wrong offset, a duplicated or dropped span, or a body from another version of the
/// resource (another seed) is detected by comparing against the pattern. Generating it costs a handful of
/// integer operations per 8 bytes (several GB/s), which lets the origin serve multi-GiB resources
/// without holding them in memory.
public enum TestPattern {
    /// The 64-bit word covering absolute byte offsets `8 * wordIndex ..< 8 * wordIndex + 8`.
    @inline(__always)
    public static func word(at wordIndex: UInt64, seed: UInt64) -> UInt64 {
        // SplitMix64 (Steele, Lea, Flood 2014): a bijective mix with full avalanche.
        var z = wordIndex &* 0x9E37_79B9_7F4A_7C15 &+ (seed ^ 0xD1B5_4A32_D192_ED03)
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
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
        var position = 0
        let count = buffer.count
        var absolute = UInt64(offset)
        // Leading partial word, byte by byte.
        while position < count && absolute & 7 != 0 {
            let w = word(at: absolute >> 3, seed: seed)
            base.storeBytes(of: UInt8(truncatingIfNeeded: w >> ((absolute & 7) * 8)), toByteOffset: position, as: UInt8.self)
            position += 1
            absolute += 1
        }
        // Whole words. `storeBytes` allows unaligned destinations (SE-0349).
        var wordIndex = absolute >> 3
        while count - position >= 8 {
            base.storeBytes(of: word(at: wordIndex, seed: seed).littleEndian, toByteOffset: position, as: UInt64.self)
            position += 8
            wordIndex += 1
        }
        // Trailing partial word.
        if position < count {
            let w = word(at: wordIndex, seed: seed)
            var shift: UInt64 = 0
            while position < count {
                base.storeBytes(of: UInt8(truncatingIfNeeded: w >> shift), toByteOffset: position, as: UInt8.self)
                position += 1
                shift += 8
            }
        }
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
        let chunk = 64 * 1024
        var expected = [UInt8](repeating: 0, count: Swift.min(chunk, bytes.count))
        var start = 0
        while start < bytes.count {
            let length = Swift.min(chunk, bytes.count - start)
            let mismatch: Int? = expected.withUnsafeMutableBytes { scratch in
                let window = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<length])
                fill(window, offset: offset + Int64(start), seed: seed)
                for index in 0..<length where window[index] != bytes[start + index] {
                    return start + index
                }
                return nil
            }
            if let mismatch { return mismatch }
            start += length
        }
        return nil
    }

    /// Whether `bytes` equal the pattern bytes starting at absolute `offset`.
    public static func matches(_ bytes: [UInt8], offset: Int64, seed: UInt64) -> Bool {
        bytes.withUnsafeBytes { firstMismatch(in: $0, offset: offset, seed: seed) == nil }
    }
}
