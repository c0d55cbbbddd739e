import Foundation
import GRDB

/// The manager's task table in SQLite (GRDB, WAL journal, versioned migrations).
///
/// One row per task; the schema is described in docs/MANAGER.md. Writes are batched: the manager hands
/// over every changed task at once and they are written in one transaction. `synchronous = NORMAL` in WAL
/// mode: a committed transaction survives a process crash (kill -9); only a power loss may lose the last
/// few, and those tasks' bytes are still found on disk by the engine.
final class TaskStore: Sendable {
    /// The database file name inside the state directory.
    static let fileName = "tasks.sqlite"

    private let database: DatabasePool

    /// Opens (creating if needed) `<directory>/tasks.sqlite` and migrates it to the newest schema.
    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        database = try DatabasePool(path: directory + "/" + Self.fileName, configuration: configuration)
        try Self.migrator.migrate(database)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: tasks") { db in
            try db.create(table: TaskRecord.databaseTableName) { table in
                table.primaryKey("id", .text)
                table.column("originalURL", .text).notNull()
                table.column("currentURL", .text).notNull()
                table.column("fileID", .text)
                table.column("destinationKind", .text).notNull()
                table.column("destinationPath", .text).notNull()
                table.column("namingRule", .text)
                table.column("namingFileID", .text)
                table.column("finalPath", .text)
                table.column("state", .text).notNull()
                table.column("bytesReceived", .integer).notNull().defaults(to: 0)
                table.column("totalBytes", .integer)
                table.column("priority", .integer).notNull().defaults(to: 0)
                table.column("queueOrder", .integer).notNull()
                table.column("groupName", .text)
                table.column("checksum", .text)
                table.column("headers", .text).notNull()
                table.column("metadata", .text).notNull()
                table.column("requiresUnmeteredNetwork", .boolean).notNull().defaults(to: false)
                table.column("rateLimit", .integer)
                table.column("errorCode", .text)
                table.column("errorMessage", .text)
                table.column("createdAt", .double).notNull()
                table.column("updatedAt", .double).notNull()
                table.column("finishedAt", .double)
            }
            try db.create(index: "task_originalURL", on: "task", columns: ["originalURL"])
            try db.create(index: "task_fileID", on: "task", columns: ["fileID"])
            try db.create(index: "task_groupName", on: "task", columns: ["groupName"])
        }
        return migrator
    }

    /// Every stored task.
    func loadAll() throws -> [TaskRecord] {
        try database.read { db in try TaskRecord.fetchAll(db) }
    }

    /// Inserts or updates `records` and deletes `deletions`, in one transaction.
    func write(_ records: [TaskRecord], deleting deletions: [String] = []) throws {
        guard !records.isEmpty || !deletions.isEmpty else { return }
        try database.write { db in
            for record in records { try record.upsert(db) }
            if !deletions.isEmpty { _ = try TaskRecord.deleteAll(db, keys: deletions) }
        }
    }

    /// The applied migrations (for tests and diagnostics).
    func appliedMigrations() throws -> [String] {
        try database.read { db in try Array(Self.migrator.appliedMigrations(db)) }
    }

    /// The journal mode (`wal`).
    func journalMode() throws -> String {
        try database.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "" }
    }
}

/// One row of the `task` table.
struct TaskRecord: Codable, FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "task"

    var id: String
    var originalURL: String
    var currentURL: String
    var fileID: String?
    /// `file` or `directory`.
    var destinationKind: String
    var destinationPath: String
    /// For directories: `fromResponse`, `md5OfURL` or `fileID`.
    var namingRule: String?
    var namingFileID: String?
    var finalPath: String?
    var state: String
    var bytesReceived: Int64
    var totalBytes: Int64?
    var priority: Int
    var queueOrder: Int64
    var groupName: String?
    /// `algo=hex`.
    var checksum: String?
    /// JSON object of header fields.
    var headers: [String: String]
    /// JSON object of caller metadata.
    var metadata: [String: String]
    var requiresUnmeteredNetwork: Bool
    var rateLimit: Int?
    var errorCode: String?
    var errorMessage: String?
    /// Seconds since 1970.
    var createdAt: Double
    var updatedAt: Double
    var finishedAt: Double?

    init(_ task: ManagedTask) {
        id = task.id
        originalURL = task.originalURL
        currentURL = task.currentURL
        fileID = task.fileID
        switch task.destination {
        case .file(let path):
            destinationKind = "file"
            destinationPath = path
        case .directory(let path, let naming):
            destinationKind = "directory"
            destinationPath = path
            switch naming {
            case .fromResponse: namingRule = "fromResponse"
            case .md5OfURL: namingRule = "md5OfURL"
            case .fileID(let id):
                namingRule = "fileID"
                namingFileID = id
            }
        }
        finalPath = task.path
        state = task.state.rawValue
        bytesReceived = task.bytesReceived
        totalBytes = task.totalBytes
        priority = task.priority.rawValue
        queueOrder = task.queueOrder
        groupName = task.group
        checksum = task.checksum?.description
        headers = task.headers
        metadata = task.metadata
        requiresUnmeteredNetwork = task.requiresUnmeteredNetwork
        rateLimit = task.rateLimit
        errorCode = task.error?.code
        errorMessage = task.error?.message
        createdAt = task.createdAt.timeIntervalSince1970
        updatedAt = task.updatedAt.timeIntervalSince1970
        finishedAt = task.finishedAt?.timeIntervalSince1970
    }

    /// The task this row describes; an unknown state reads as paused (a newer schema's state must not
    /// make an older manager run or drop the task).
    var task: ManagedTask {
        let destination: DownloadDestination
        if destinationKind == "directory" {
            let naming: FileNamingRule
            switch namingRule {
            case "md5OfURL": naming = .md5OfURL
            case "fileID": naming = .fileID(namingFileID ?? fileID ?? id)
            default: naming = .fromResponse
            }
            destination = .directory(destinationPath, naming: naming)
        } else {
            destination = .file(destinationPath)
        }
        return ManagedTask(
            id: id, originalURL: originalURL, currentURL: currentURL, fileID: fileID, destination: destination,
            path: finalPath, state: ManagedTaskState(rawValue: state) ?? .paused, bytesReceived: bytesReceived,
            totalBytes: totalBytes, priority: DownloadPriority(rawValue: priority), queueOrder: queueOrder,
            group: groupName, checksum: checksum.flatMap(Checksum.init(parsing:)), headers: headers,
            metadata: metadata, requiresUnmeteredNetwork: requiresUnmeteredNetwork, rateLimit: rateLimit,
            error: errorCode.map { ManagedTaskError(code: $0, message: errorMessage ?? "") },
            createdAt: Date(timeIntervalSince1970: createdAt), updatedAt: Date(timeIntervalSince1970: updatedAt),
            finishedAt: finishedAt.map(Date.init(timeIntervalSince1970:)))
    }
}
