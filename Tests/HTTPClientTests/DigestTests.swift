import HTTPWire
import Testing
import TestThreads

@testable import HTTPClient

@Suite(.offPool) struct DigestTests {
    /// FIPS 180-2 / RFC 1321 test vectors.
    static let vectors: [(DigestAlgorithm, String, String)] = [
        (.sha256, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        (.sha256, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (.sha1, "", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        (.sha1, "abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        (.md5, "", "d41d8cd98f00b204e9800998ecf8427e"),
        (.md5, "abc", "900150983cd24fb0d6963f7d28e17f72"),
        (.md5, "The quick brown fox jumps over the lazy dog", "9e107d9d372bb6826bd81d3542a419d6"),
    ]

    @Test(arguments: 0..<vectors.count)
    func oneShotMatchesKnownVector(index: Int) {
        let (algorithm, message, expected) = Self.vectors[index]
        let digest = DKDigest.hash(algorithm, Array(message.utf8))
        #expect(DKDigest.hex(digest) == expected)
        #expect(digest.count == algorithm.byteCount)
    }

    @Test func millionTimesASHA256MatchesFIPSVector() {
        let digest = DKDigest(.sha256)
        let block = [UInt8](repeating: UInt8(ascii: "a"), count: 1000)
        for _ in 0..<1000 { digest.update(block) }
        #expect(DKDigest.hex(digest.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test(arguments: DigestAlgorithm.allCases)
    func incrementalEqualsOneShotForUnevenSplits(algorithm: DigestAlgorithm) {
        let message = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let digest = DKDigest(algorithm)
        var offset = 0
        var step = 1
        while offset < message.count {
            let end = min(message.count, offset + step)
            message[offset..<end].withUnsafeBytes { digest.update($0) }
            offset = end
            step = step * 3 + 1
        }
        #expect(digest.finalize() == DKDigest.hash(algorithm, message))
    }

    @Test func finalizeStartsOver() {
        let digest = DKDigest(.sha1)
        digest.update(Array("abc".utf8))
        _ = digest.finalize()
        digest.update(Array("abc".utf8))
        #expect(DKDigest.hex(digest.finalize()) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(DKDigest.hex(digest.finalize()) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
    }

    @Test func hexUsesLowercasePairs() {
        #expect(DKDigest.hex([0x00, 0x0f, 0xa0, 0xff]) == "000fa0ff")
        #expect(DKDigest.hex([]) == "")
    }
}
