import HTTPWire

/// Piece hashes of a file (Metalink `<pieces>`): the file cut into pieces of
/// ``pieceLength`` bytes (the last one shorter), each with its own digest. With them on
/// `DownloadRequest.pieceChecksums` every piece is hashed as soon as all its bytes are written, and a bad
/// piece costs that piece, not the file: it is fetched again from another source, and the source that sent
/// it is demoted, then dropped (docs/MIRRORS.md, "Piece checksums").
///
/// The table as a value (its pieces, their ranges, its fingerprint): the download machine reads it. The
/// checks that report the library's error (`validate()`, `validate(total:)`) are DownloadKit's.
public struct PieceChecksums: Sendable, Hashable {
    /// The hash function of every piece digest.
    public var algorithm: DigestAlgorithm
    /// The piece length in bytes (positive); the last piece holds what is left.
    public var pieceLength: Int64
    /// The digest of piece 0, 1, 2, …, each ``DigestAlgorithm/byteCount`` bytes.
    public var digests: [[UInt8]]

    /// Creates piece hashes. Checked when the download starts (DownloadKit's `validate(total:)`).
    public init(algorithm: DigestAlgorithm, pieceLength: Int64, digests: [[UInt8]]) {
        self.algorithm = algorithm
        self.pieceLength = pieceLength
        self.digests = digests
    }

    /// The number of pieces a file of `total` bytes has: ⌈total ÷ pieceLength⌉.
    public func pieceCount(forLength total: Int64) -> Int {
        PieceVerifier.pieceCount(total: total, pieceLength: pieceLength)
    }

    /// The bytes of piece `index` in a file of `total` bytes.
    public func range(ofPiece index: Int, total: Int64) -> Range<Int64> {
        let start = Int64(index) * pieceLength
        return start..<min(total, start + pieceLength)
    }

    /// A fingerprint of the table (FNV-1a 64 of the algorithm, the length and the digests): journal records
    /// of verified pieces carry it, so a journal from another piece table is ignored.
    package var fingerprint: Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        func mix(_ byte: UInt8) { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        for byte in algorithm.rawValue.utf8 { mix(byte) }
        for shift in stride(from: 0, to: 64, by: 8) { mix(UInt8(truncatingIfNeeded: UInt64(bitPattern: pieceLength) >> UInt64(shift))) }
        for digest in digests { for byte in digest { mix(byte) } }
        return Int64(bitPattern: hash)
    }

    /// The text a failed piece is named by: its index and bytes.
    package static func name(_ index: Int, _ range: Range<Int64>) -> String {
        "piece \(index) (bytes \(range.lowerBound)-\(range.upperBound - 1))"
    }
}
