import HTTPWire

/// A caller-supplied checksum that gates the final rename (`DownloadRequest.checksum`), or the one a
/// response's digest header states (``RFC6249/checksum(in:total:)``): a value the download machine compares
/// the file's digest with. DownloadKit computes the digest.
public struct Checksum: Sendable, Hashable, CustomStringConvertible {
    /// The digest algorithm.
    public var algorithm: DigestAlgorithm
    /// The expected digest, lowercase hexadecimal.
    public var expectedHex: String

    /// Creates a checksum from an algorithm and hexadecimal digest (any case).
    public init(algorithm: DigestAlgorithm, expectedHex: String) {
        self.algorithm = algorithm
        self.expectedHex = expectedHex.lowercased()
    }

    /// Parses `ALGO=HEX`, e.g. `sha256=9f86d0…`. Returns nil for an unknown algorithm or a digest of
    /// the wrong length or with non-hex characters.
    public init?(parsing text: String) {
        guard let equals = text.firstIndex(of: "=") else { return nil }
        guard let algorithm = DigestAlgorithm(rawValue: text[..<equals].lowercased()) else { return nil }
        let hex = text[text.index(after: equals)...].lowercased()
        guard hex.count == algorithm.byteCount * 2, hex.allSatisfy({ $0.isHexDigit }) else { return nil }
        self.init(algorithm: algorithm, expectedHex: hex)
    }

    /// `ALGO=HEX`, the form ``init(parsing:)`` reads.
    public var description: String { "\(algorithm.rawValue)=\(expectedHex)" }
}
