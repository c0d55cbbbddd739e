import DownloadKitDecisions

/// The piece table's checks as the library reports them: ``PieceChecksums`` is a value of the decisions
/// module; what throws ``DownloadError`` is here.
extension PieceChecksums {
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
}
