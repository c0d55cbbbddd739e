import DownloadKit
import Foundation
import HTTPClient

/// A task's destination as a task store keeps it: a kind (`file` or `directory`), a path, and for a
/// directory the naming rule and its file ID. One encoding for every store (SQLite's `TaskStore`,
/// `PostgresTaskStore`), so a row written by one reads back the same everywhere.
@_spi(DownloadKitInternal) public struct DestinationColumns: Sendable, Hashable {
    @_spi(DownloadKitInternal) public var kind: String
    @_spi(DownloadKitInternal) public var path: String
    @_spi(DownloadKitInternal) public var namingRule: String?
    @_spi(DownloadKitInternal) public var namingFileID: String?

    @_spi(DownloadKitInternal) public init(kind: String, path: String, namingRule: String?, namingFileID: String?) {
        self.kind = kind
        self.path = path
        self.namingRule = namingRule
        self.namingFileID = namingFileID
    }

    @_spi(DownloadKitInternal) public init(_ destination: DownloadDestination) {
        switch destination {
        case .file(let path):
            self.init(kind: "file", path: path, namingRule: nil, namingFileID: nil)
        case .directory(let path, let naming):
            switch naming {
            case .fromResponse: self.init(kind: "directory", path: path, namingRule: "fromResponse", namingFileID: nil)
            case .md5OfURL: self.init(kind: "directory", path: path, namingRule: "md5OfURL", namingFileID: nil)
            case .fileID(let id): self.init(kind: "directory", path: path, namingRule: "fileID", namingFileID: id)
            }
        }
    }

    /// Why a task with these columns cannot run, or nil. Every manager stores absolute paths (``absolute(_:)``
    /// at enqueue); a relative or empty one comes from a foreign or damaged row, and its task is restored
    /// failed with this error instead of writing relative to whatever directory the manager runs in.
    @_spi(DownloadKitInternal) public var refusal: ManagedTaskError? {
        guard !path.hasPrefix("/") else { return nil }
        return ManagedTaskError(
            code: .invalidDestination, message: "the stored destination path \"\(path.prefix(200))\" is not absolute")
    }

    /// `destination` with a relative path resolved against the current directory: what the caller meant when
    /// it enqueued the task, kept so whatever directory a later manager runs in.
    @_spi(DownloadKitInternal) public static func absolute(_ destination: DownloadDestination) -> DownloadDestination {
        func resolved(_ path: String) -> String {
            path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        }
        switch destination {
        case .file(let path): return .file(resolved(path))
        case .directory(let path, let naming): return .directory(resolved(path), naming: naming)
        }
    }

    /// The destination these columns describe. An unknown kind reads as a file and an unknown naming rule
    /// as `.fromResponse` (a newer schema's value must not make an older manager drop the task); a
    /// `fileID` rule without its ID falls back to `fileID`, then to the task's ID.
    @_spi(DownloadKitInternal) public func destination(fileID: String?, taskID: String) -> DownloadDestination {
        guard kind == "directory" else { return .file(path) }
        switch namingRule {
        case "md5OfURL": return .directory(path, naming: .md5OfURL)
        case "fileID": return .directory(path, naming: .fileID(namingFileID ?? fileID ?? taskID))
        default: return .directory(path, naming: .fromResponse)
        }
    }
}

/// The columns of a stored task that must make sense before the task may run: its destination
/// (``DestinationColumns/refusal``) and its checksum. One rule for every store (SQLite's `TaskStore`,
/// `PostgresTaskStore`): a row a store cannot stand behind is restored or claimed as a failure naming the
/// column, never run with the column ignored.
@_spi(DownloadKitInternal) public struct StoredTaskColumns: Sendable {
    @_spi(DownloadKitInternal) public var destination: DestinationColumns
    /// The `checksum` column as stored (`ALGO=HEX`), or nil for none.
    @_spi(DownloadKitInternal) public var checksum: String?
    /// The task's piece-table row as stored, or nil for a task without one.
    @_spi(DownloadKitInternal) public var pieces: StoredPieceTable?

    @_spi(DownloadKitInternal) public init(destination: DestinationColumns, checksum: String?, pieces: StoredPieceTable? = nil) {
        self.destination = destination
        self.checksum = checksum
        self.pieces = pieces
    }

    /// The piece table the task verifies; nil when it has none or its row is damaged (then ``refusal``
    /// says so).
    @_spi(DownloadKitInternal) public var parsedPieces: PieceChecksums? {
        guard case .table(let table)? = pieces?.decoded else { return nil }
        return table
    }

    /// The checksum the task verifies; nil when the column is empty or does not parse (then ``refusal``
    /// says so).
    @_spi(DownloadKitInternal) public var parsedChecksum: Checksum? { checksum.flatMap(Checksum.init(parsing:)) }

    /// Why the task cannot run, or nil. A checksum column that does not parse (a damaged or hand-edited
    /// row) fails the task with `invalidChecksum`: downloading it unverified would drop the one check the
    /// caller asked for. A damaged piece-table row fails it with `invalidPieceChecksums` for the same reason
    /// (``StoredPieceTable/decoded``).
    @_spi(DownloadKitInternal) public var refusal: ManagedTaskError? {
        if let refusal = destination.refusal { return refusal }
        if let checksum, parsedChecksum == nil {
            return ManagedTaskError(
                code: .invalidChecksum,
                message: "the stored checksum \"\(checksum.prefix(200))\" is not ALGO=HEX with a known algorithm")
        }
        if case .refused(let refusal)? = pieces?.decoded { return refusal }
        return nil
    }
}

/// A task's piece table (``ManagedTask/pieceChecksums``) as a task store keeps it, in a row of its own
/// beside the task's (SQLite's `taskPieces`): the algorithm's name, the piece length, and every digest
/// end to end in one blob. One encoding and one reading rule for every store.
@_spi(DownloadKitInternal) public struct StoredPieceTable: Sendable, Hashable {
    /// ``HTTPWire/DigestAlgorithm``'s raw value (`sha256`, `sha1`, …).
    @_spi(DownloadKitInternal) public var algorithm: String
    /// The piece length in bytes.
    @_spi(DownloadKitInternal) public var pieceLength: Int64
    /// The digests of piece 0, 1, 2, … one after the other; nil for a stored value that is not bytes.
    @_spi(DownloadKitInternal) public var digests: [UInt8]?

    @_spi(DownloadKitInternal) public init(algorithm: String, pieceLength: Int64, digests: [UInt8]?) {
        self.algorithm = algorithm
        self.pieceLength = pieceLength
        self.digests = digests
    }

    /// The row that stores `table`.
    @_spi(DownloadKitInternal) public init(_ table: PieceChecksums) {
        var digests: [UInt8] = []
        digests.reserveCapacity(table.digests.count * table.algorithm.byteCount)
        for digest in table.digests { digests += digest }
        self.init(algorithm: table.algorithm.rawValue, pieceLength: table.pieceLength, digests: digests)
    }

    /// What a row reads as: its table, or why it cannot be trusted.
    @_spi(DownloadKitInternal) public enum Decoded: Sendable, Hashable {
        /// The row holds this table.
        case table(PieceChecksums)
        /// The row is damaged: the task fails with this error.
        case refused(ManagedTaskError)
    }

    /// The table the row holds, or why it cannot be trusted: an algorithm this build does not compute, a
    /// piece length that is not positive, digests that are not bytes or whose length is not a whole number
    /// of digests (a damaged or hand-edited row). The task then fails with `invalidPieceChecksums` naming
    /// the field, never runs with its pieces unverified.
    @_spi(DownloadKitInternal) public var decoded: Decoded {
        func refused(_ cause: String) -> Decoded {
            .refused(ManagedTaskError(code: .invalidPieceChecksums, message: "the stored piece table is damaged: \(cause)"))
        }
        guard let algorithm = DigestAlgorithm(rawValue: algorithm) else {
            return refused("its algorithm \"\(self.algorithm.prefix(64))\" is not one this build computes")
        }
        guard pieceLength > 0 else { return refused("its piece length is \(pieceLength), not positive") }
        guard let digests else { return refused("its digests are not bytes") }
        let size = algorithm.byteCount
        guard digests.count % size == 0 else {
            return refused("its digests take \(digests.count) bytes, not a multiple of \(algorithm.rawValue)'s \(size)")
        }
        let table = stride(from: 0, to: digests.count, by: size).map { Array(digests[$0..<$0 + size]) }
        return .table(PieceChecksums(algorithm: algorithm, pieceLength: pieceLength, digests: table))
    }
}
