import Dispatch
import DownloadKit
import Foundation
import GRDB

/// The manager's task table in SQLite (GRDB, WAL journal, versioned migrations): the default ``TaskStoring``.
///
/// One row per task; the schema is described in docs/MANAGER.md. Writes are batched: the manager hands
/// over every changed task at once and they are written in one transaction. `synchronous = NORMAL` in WAL
/// mode: a committed transaction survives a process crash (kill -9); only a power loss may lose the last
/// few, and those tasks' bytes are still found on disk by the engine.
public final class TaskStore: TaskStoring {
    /// The database file name inside the state directory.
    static let fileName = "tasks.sqlite"

    /// The state directory.
    public let location: String

    private let database: DatabasePool

    /// Opens (creating if needed) `<directory>/tasks.sqlite` and migrates it to the newest schema.
    public init(directory: String) throws {
        location = directory
        // The rows hold request headers (Authorization, Cookie…): the state directory is 0700 and the
        // database 0600 (SQLite gives its -wal and -shm files the database's mode).
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = directory + "/" + Self.fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        if descriptor >= 0 { close(descriptor) }
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

    /// The store's own thread: every write of a running manager happens here, in the order it was handed
    /// over, never on Swift's cooperative pool (a SQLite commit blocks its thread; the pool has one per core).
    private let writer = DispatchQueue(label: "DownloadKit task store")

    /// Inserts or updates `records` and deletes `deletions`, in one transaction, on the calling thread
    /// (opening, restoring and tests).
    func write(_ records: [TaskRecord], deleting deletions: [String] = []) throws {
        guard !records.isEmpty || !deletions.isEmpty else { return }
        try database.write { db in
            let upsert = try db.cachedStatement(sql: TaskRecord.upsertSQL)
            for record in records { try upsert.execute(arguments: StatementArguments(record.columnValues)) }
            if !deletions.isEmpty { _ = try TaskRecord.deleteAll(db, keys: deletions) }
        }
    }

    /// The same transaction on the store's thread, after every write handed over before; returns once it
    /// is committed.
    func commit(_ records: [TaskRecord], deleting deletions: [String]) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            writer.async {
                do {
                    try self.write(records, deleting: deletions)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Hands the transaction to the store's thread and returns at once; `failed` is called there if it fails.
    func enqueue(_ records: [TaskRecord], deleting deletions: [String], failed: @escaping @Sendable (any Error) -> Void) {
        writer.async {
            do {
                try self.write(records, deleting: deletions)
            } catch {
                failed(error)
            }
        }
    }

    // MARK: - TaskStoring

    public func loadTasks() async throws -> [ManagedTask] {
        try loadAll().map(\.task)
    }

    public func save(_ tasks: [ManagedTask], deleting deletions: [String]) async throws {
        try await commit(tasks.map(TaskRecord.init), deleting: deletions)
    }

    public func saveInBackground(
        _ tasks: [ManagedTask], deleting deletions: [String], failed: @escaping @Sendable (any Error) -> Void
    ) {
        enqueue(tasks.map(TaskRecord.init), deleting: deletions, failed: failed)
    }

    /// Returns once every write handed over before has finished.
    public func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            writer.async { continuation.resume() }
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

/// One row of the `task` table. Rows are read and written column by column (no `Codable`): restoring
/// 10,000 tasks must take well under a second.
struct TaskRecord: FetchableRecord, PersistableRecord, Sendable {
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
    /// Header fields, stored as a JSON object.
    var headers: [String: String]
    /// Caller metadata, stored as a JSON object.
    var metadata: [String: String]
    var requiresUnmeteredNetwork: Bool
    var rateLimit: Int?
    var errorCode: String?
    var errorMessage: String?
    /// Seconds since 1970.
    var createdAt: Double
    var updatedAt: Double
    var finishedAt: Double?

    /// Reads a row column by column. A NULL, missing or unconvertible value in a required column (a
    /// damaged or hand-edited database) throws GRDB's decoding error instead of trapping — `row["…"]`
    /// traps — and the manager reports it as `DownloadManagerError` `.storage` naming the file.
    init(row: Row) throws {
        id = try row.decode(forColumn: "id")
        originalURL = try row.decode(forColumn: "originalURL")
        currentURL = try row.decode(forColumn: "currentURL")
        fileID = try row.decode(forColumn: "fileID")
        destinationKind = try row.decode(forColumn: "destinationKind")
        destinationPath = try row.decode(forColumn: "destinationPath")
        namingRule = try row.decode(forColumn: "namingRule")
        namingFileID = try row.decode(forColumn: "namingFileID")
        finalPath = try row.decode(forColumn: "finalPath")
        state = try row.decode(forColumn: "state")
        bytesReceived = try row.decode(forColumn: "bytesReceived")
        totalBytes = try row.decode(forColumn: "totalBytes")
        priority = try row.decode(forColumn: "priority")
        queueOrder = try row.decode(forColumn: "queueOrder")
        groupName = try row.decode(forColumn: "groupName")
        checksum = try row.decode(forColumn: "checksum")
        headers = StringDictionaryJSON.decode(try row.decode(String?.self, forColumn: "headers"))
        metadata = StringDictionaryJSON.decode(try row.decode(String?.self, forColumn: "metadata"))
        requiresUnmeteredNetwork = try row.decode(forColumn: "requiresUnmeteredNetwork")
        rateLimit = try row.decode(forColumn: "rateLimit")
        errorCode = try row.decode(forColumn: "errorCode")
        errorMessage = try row.decode(forColumn: "errorMessage")
        createdAt = try row.decode(forColumn: "createdAt")
        updatedAt = try row.decode(forColumn: "updatedAt")
        finishedAt = try row.decode(forColumn: "finishedAt")
    }

    /// The columns in the order of ``columnValues``: one list for the record's encoding and the store's
    /// prepared write.
    static let columnNames = [
        "id", "originalURL", "currentURL", "fileID", "destinationKind", "destinationPath", "namingRule", "namingFileID",
        "finalPath", "state", "bytesReceived", "totalBytes", "priority", "queueOrder", "groupName", "checksum", "headers",
        "metadata", "requiresUnmeteredNetwork", "rateLimit", "errorCode", "errorMessage", "createdAt", "updatedAt",
        "finishedAt",
    ]

    /// The row's values, in the order of ``columnNames``.
    var columnValues: [(any DatabaseValueConvertible)?] {
        [
            id, originalURL, currentURL, fileID, destinationKind, destinationPath, namingRule, namingFileID, finalPath,
            state, bytesReceived, totalBytes, priority, queueOrder, groupName, checksum,
            StringDictionaryJSON.encode(headers), StringDictionaryJSON.encode(metadata), requiresUnmeteredNetwork,
            rateLimit, errorCode, errorMessage, createdAt, updatedAt, finishedAt,
        ]
    }

    /// `INSERT OR REPLACE` of a whole row, prepared once per connection: GRDB's record insert builds a
    /// persistence container and its statement per row, which cost 25 µs a row (a restore that pauses
    /// 10,000 tasks writes them all; issue #18's 300 ms).
    static let upsertSQL =
        "INSERT OR REPLACE INTO task (\(columnNames.joined(separator: ", "))) VALUES (\(columnNames.map { _ in "?" }.joined(separator: ", ")))"

    func encode(to container: inout PersistenceContainer) {
        for (name, value) in zip(Self.columnNames, columnValues) { container[name] = value }
    }

    init(_ task: ManagedTask) {
        id = task.id
        originalURL = task.originalURL
        currentURL = task.currentURL
        fileID = task.fileID
        let columns = DestinationColumns(task.destination)
        destinationKind = columns.kind
        destinationPath = columns.path
        namingRule = columns.namingRule
        namingFileID = columns.namingFileID
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
        let columns = DestinationColumns(
            kind: destinationKind, path: destinationPath, namingRule: namingRule, namingFileID: namingFileID)
        let destination = columns.destination(fileID: fileID, taskID: id)
        let refusal = columns.refusal
        return ManagedTask(
            id: id, originalURL: originalURL, currentURL: currentURL, fileID: fileID, destination: destination,
            path: finalPath, state: refusal == nil ? ManagedTaskState(rawValue: state) ?? .paused : .failed,
            bytesReceived: bytesReceived,
            totalBytes: totalBytes, priority: DownloadPriority(rawValue: priority), queueOrder: queueOrder,
            group: groupName, checksum: checksum.flatMap(Checksum.init(parsing:)), headers: headers,
            metadata: metadata, requiresUnmeteredNetwork: requiresUnmeteredNetwork, rateLimit: rateLimit,
            error: refusal ?? errorCode.map { ManagedTaskError(code: $0, message: errorMessage ?? "") },
            createdAt: Date(timeIntervalSince1970: createdAt), updatedAt: Date(timeIntervalSince1970: updatedAt),
            finishedAt: finishedAt.map(Date.init(timeIntervalSince1970:)))
    }
}

/// JSON text for `[String: String]` (headers and metadata columns), written and read directly: Foundation's
/// JSON coders cost ~100 µs a row on Linux, which 10,000 rows cannot afford.
enum StringDictionaryJSON {
    static func encode(_ dictionary: [String: String]) -> String {
        var text = "{"
        for (index, key) in dictionary.keys.sorted().enumerated() {
            if index > 0 { text += "," }
            append(key, to: &text)
            text += ":"
            append(dictionary[key] ?? "", to: &text)
        }
        return text + "}"
    }

    /// Parses a JSON object whose values are strings; anything else (or nil) reads as empty.
    static func decode(_ text: String?) -> [String: String] {
        guard let text, text != "{}" else { return [:] }
        var parser = Parser(bytes: Array(text.utf8))
        return parser.object() ?? [:]
    }

    private static func append(_ string: String, to text: inout String) {
        text += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    text.unicodeScalars.append(scalar)
                }
            }
        }
        text += "\""
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func expect(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func object() -> [String: String]? {
            guard expect(UInt8(ascii: "{")) else { return nil }
            var result: [String: String] = [:]
            if expect(UInt8(ascii: "}")) { return result }
            while true {
                guard let key = string(), expect(UInt8(ascii: ":")), let value = string() else { return nil }
                result[key] = value
                if expect(UInt8(ascii: ",")) { continue }
                return expect(UInt8(ascii: "}")) ? result : nil
            }
        }

        mutating func hex4() -> UInt32? {
            guard index + 4 <= bytes.count,
                let value = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16)
            else { return nil }
            index += 4
            return value
        }

        mutating func string() -> String? {
            guard expect(UInt8(ascii: "\"")) else { return nil }
            var scalars = String.UnicodeScalarView()
            var run: [UInt8] = []
            func flush() {
                scalars.append(contentsOf: String(decoding: run, as: UTF8.self).unicodeScalars)
                run.removeAll(keepingCapacity: true)
            }
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    flush()
                    return String(scalars)
                case UInt8(ascii: "\\"):
                    flush()
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): scalars.append("\"")
                    case UInt8(ascii: "\\"): scalars.append("\\")
                    case UInt8(ascii: "/"): scalars.append("/")
                    case UInt8(ascii: "b"): scalars.append("\u{8}")
                    case UInt8(ascii: "f"): scalars.append("\u{C}")
                    case UInt8(ascii: "n"): scalars.append("\n")
                    case UInt8(ascii: "r"): scalars.append("\r")
                    case UInt8(ascii: "t"): scalars.append("\t")
                    case UInt8(ascii: "u"):
                        guard var value = hex4() else { return nil }
                        if (0xD800..<0xDC00).contains(value) {
                            // A UTF-16 surrogate pair: \uD83D\uDE00.
                            guard expect(UInt8(ascii: "\\")), expect(UInt8(ascii: "u")), let low = hex4(),
                                (0xDC00..<0xE000).contains(low)
                            else { return nil }
                            value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(value) else { return nil }
                        scalars.append(scalar)
                    default:
                        return nil
                    }
                default:
                    run.append(byte)
                }
            }
            return nil
        }
    }
}
