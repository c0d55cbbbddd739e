import DownloadKitDecisions
import HTTPClient

/// Piece hashes of a file (Metalink `<pieces>`): the file cut into pieces of
/// ``pieceLength`` bytes (the last one shorter), each with its own digest. With them on
/// ``DownloadRequest/pieceChecksums`` every piece is hashed as soon as all its bytes are written, and a bad
/// piece costs that piece, not the file: it is fetched again from another source, and the source that sent
/// it is demoted, then dropped (docs/MIRRORS.md, "Piece checksums").
public struct PieceChecksums: Sendable, Hashable {
    /// The hash function of every piece digest.
    public var algorithm: DigestAlgorithm
    /// The piece length in bytes (positive); the last piece holds what is left.
    public var pieceLength: Int64
    /// The digest of piece 0, 1, 2, …, each ``DigestAlgorithm/byteCount`` bytes.
    public var digests: [[UInt8]]

    /// Creates piece hashes. Checked when the download starts (``validate(total:)``).
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

    /// Checks the table alone: a positive piece length, and digests of the algorithm's length.
    /// - Throws: ``DownloadError/Code/invalidPieceChecksums`` naming the field.
    public func validate() throws(DownloadError) {
        guard pieceLength > 0 else {
            throw DownloadError(.invalidPieceChecksums, "invalid piece checksums: the piece length is \(pieceLength), not positive")
        }
        if let index = digests.firstIndex(where: { $0.count != algorithm.byteCount }) {
            throw DownloadError(
                .invalidPieceChecksums,
                "invalid piece checksums: the digest of piece \(index) has \(digests[index].count) bytes; \(algorithm.rawValue) has \(algorithm.byteCount)")
        }
    }

    /// Checks the table against the file's length, once it is known (before any byte is written): one
    /// digest per piece.
    /// - Throws: ``DownloadError/Code/invalidPieceChecksums`` naming both counts.
    public func validate(total: Int64) throws(DownloadError) {
        try validate()
        if let failure = MachineFailure.pieceTable(digests: digests.count, pieceLength: pieceLength, total: total) {
            throw DownloadError(decided: failure)
        }
    }

    /// A fingerprint of the table (FNV-1a 64 of the algorithm, the length and the digests): journal records
    /// of verified pieces carry it, so a journal from another piece table is ignored.
    var fingerprint: Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        func mix(_ byte: UInt8) { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        for byte in algorithm.rawValue.utf8 { mix(byte) }
        for shift in stride(from: 0, to: 64, by: 8) { mix(UInt8(truncatingIfNeeded: UInt64(bitPattern: pieceLength) >> UInt64(shift))) }
        for digest in digests { for byte in digest { mix(byte) } }
        return Int64(bitPattern: hash)
    }

    /// The text a failed piece is named by: its index and bytes.
    static func name(_ index: Int, _ range: Range<Int64>) -> String {
        "piece \(index) (bytes \(range.lowerBound)-\(range.upperBound - 1))"
    }
}
