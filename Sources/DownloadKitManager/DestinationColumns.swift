import DownloadKit
import Foundation

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

    @_spi(DownloadKitInternal) public init(destination: DestinationColumns, checksum: String?) {
        self.destination = destination
        self.checksum = checksum
    }

    /// The checksum the task verifies; nil when the column is empty or does not parse (then ``refusal``
    /// says so).
    @_spi(DownloadKitInternal) public var parsedChecksum: Checksum? { checksum.flatMap(Checksum.init(parsing:)) }

    /// Why the task cannot run, or nil. A checksum column that does not parse (a damaged or hand-edited
    /// row) fails the task with `invalidChecksum`: downloading it unverified would drop the one check the
    /// caller asked for.
    @_spi(DownloadKitInternal) public var refusal: ManagedTaskError? {
        if let refusal = destination.refusal { return refusal }
        if let checksum, parsedChecksum == nil {
            return ManagedTaskError(
                code: .invalidChecksum,
                message: "the stored checksum \"\(checksum.prefix(200))\" is not ALGO=HEX with a known algorithm")
        }
        return nil
    }
}
