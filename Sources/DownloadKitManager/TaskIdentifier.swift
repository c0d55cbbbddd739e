import CDownloadKitSystem

/// New task identifiers: random (version 4) UUIDs in lower case, `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`.
///
/// The randomness is the kernel's (`getrandom`), drawn in blocks: Foundation's `UUID()` opens, reads
/// and closes /dev/urandom for every call on Linux, and `SystemRandomNumberGenerator` makes one system
/// call per 8 bytes — 20,000 calls, an eighth of a 10,000-task enqueue. The text is written here
/// directly (`uuidString` goes through `sprintf`, then `lowercased()`).
@_spi(DownloadKitInternal) public enum TaskIdentifier {
    /// One new identifier.
    @_spi(DownloadKitInternal) public static func make() -> String {
        var generator = Generator(expected: 1)
        return generator.next()
    }

    /// Identifiers for a batch: one `getrandom` per 256 of them.
    @_spi(DownloadKitInternal) public struct Generator {
        private var pool: [UInt8] = []
        private var used = 0
        private let blockSize: Int

        /// - Parameter expected: How many identifiers the caller will probably take (sizes the first block).
        @_spi(DownloadKitInternal) public init(expected: Int) {
            blockSize = 16 * min(max(expected, 1), 256)
        }

        /// The next identifier.
        @_spi(DownloadKitInternal) public mutating func next() -> String {
            if used + 16 > pool.count { refill() }
            let start = used
            used += 16
            return pool.withUnsafeBufferPointer { random in
                TaskIdentifier.text(UnsafeBufferPointer(rebasing: random[start..<start + 16]))
            }
        }

        private mutating func refill() {
            pool = [UInt8](repeating: 0, count: blockSize)
            used = 0
            let filled = pool.withUnsafeMutableBytes { dk_random_bytes($0.baseAddress, $0.count) }
            if filled != 0 {
                // getrandom(2) has no failure mode on a seeded Linux kernel with a valid buffer; should
                // one appear (a seccomp filter), the standard generator still gives kernel randomness.
                var generator = SystemRandomNumberGenerator()
                for index in pool.indices { pool[index] = generator.next() }
            }
        }
    }

    /// The UUID text of 16 random bytes, with the version (4) and variant (RFC 9562) bits set.
    private static func text(_ random: UnsafeBufferPointer<UInt8>) -> String {
        String(unsafeUninitializedCapacity: 36) { text in
            let digits: StaticString = "0123456789abcdef"
            var position = 0
            for index in 0..<16 {
                var byte = random[index]
                if index == 6 { byte = byte & 0x0F | 0x40 }  // version 4
                if index == 8 { byte = byte & 0x3F | 0x80 }  // variant 10xxxxxx
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    text[position] = UInt8(ascii: "-")
                    position += 1
                }
                text[position] = digits.utf8Start[Int(byte >> 4)]
                text[position + 1] = digits.utf8Start[Int(byte & 0x0F)]
                position += 2
            }
            return position
        }
    }
}
