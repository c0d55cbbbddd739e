import DownloadKit
import Foundation
import GRDB
import GRDBSQLite
import HTTPClient

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
        if descriptor >= 0 {
            // A database created before (by hand, or a copy with wider permissions) is tightened too:
            // it holds the tasks' URLs with their userinfo, which the tasks need to download again.
            var status = stat()
            if fstat(descriptor, &status) == 0, status.st_uid == geteuid(), status.st_mode & 0o077 != 0 {
                _ = fchmod(descriptor, 0o600)
            }
            close(descriptor)
        }
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
        // The error's typed fields (ManagedTaskError) and the task's connection count, which v1 rows kept
        // only as `errorCode` + `errorMessage` and a metadata key: all nullable, so v1 rows read as before.
        migrator.registerMigration("v2: typed errors, connections") { db in
            try db.alter(table: TaskRecord.databaseTableName) { table in
                table.add(column: "errorCategory", .text)
                table.add(column: "errorHTTPStatus", .integer)
                table.add(column: "errorTransient", .boolean)
                table.add(column: "errorCause", .text)
                table.add(column: "connections", .integer)
            }
        }
        // The task's mirrors (``ManagedTask/mirrors``), a JSON array of strings; NULL for none.
        migrator.registerMigration("v3: mirrors") { db in
            try db.alter(table: TaskRecord.databaseTableName) { table in
                table.add(column: "mirrors", .text)
            }
        }
        // The task's connections per source (``ManagedTask/connectionsPerSource``); NULL for the
        // configuration's.
        migrator.registerMigration("v4: connections per source") { db in
            try db.alter(table: TaskRecord.databaseTableName) { table in
                table.add(column: "connectionsPerSource", .integer)
            }
        }
        // The tasks' piece tables (``ManagedTask/pieceChecksums``): up to hundreds of kilobytes each, so a
        // table of their own, written once at enqueue and never by the progress writes that rewrite the task
        // row. No foreign key: the store writes a task row with `INSERT OR REPLACE` when an indexed column
        // changes, and SQLite's REPLACE deletes the row first — `ON DELETE CASCADE` would take the piece
        // table with it. ``write(_:deleting:)`` deletes a task's pieces with the task instead.
        migrator.registerMigration("v5: piece tables") { db in
            try db.create(table: PieceTableRecord.databaseTableName) { table in
                table.primaryKey("taskID", .text)
                table.column("algorithm", .text).notNull()
                table.column("pieceLength", .integer).notNull()
                table.column("digests", .blob).notNull()
            }
        }
        return migrator
    }

    /// Every stored task, with its piece table when it has one.
    func loadAll() throws -> [TaskRecord] {
        let records = try database.read { db in
            var records = try TaskRecord.fetchAll(db, sql: TaskRecord.selectSQL)
            let pieces = try PieceTableRecord.fetchAll(db, sql: PieceTableRecord.selectSQL)
            guard !pieces.isEmpty else { return records }
            var byID = Dictionary(pieces.map { ($0.taskID, $0.table) }, uniquingKeysWith: { first, _ in first })
            for index in records.indices {
                records[index].pieces = byID.removeValue(forKey: records[index].id)
            }
            return records
        }
        storedIDs.withLock { ids in
            ids.reserveCapacity(records.count)
            for record in records { ids.insert(record.id) }
        }
        return records
    }

    /// The store's own thread: every write of a running manager happens here, in the order it was handed
    /// over, never on Swift's cooperative pool (a SQLite commit blocks its thread; the pool has one per core).
    private let writer = SerialThread()

    /// Inserts or updates `records` and deletes `deletions`, in one transaction, on the calling thread
    /// (opening, restoring and tests).
    func write(_ records: [TaskRecord], deleting deletions: [String] = []) throws {
        guard !records.isEmpty || !deletions.isEmpty else { return }
        let known = storedIDs.withLock { ids in records.map { ids.contains($0.id) } }
        // A piece table is written with its task's first row only: it never changes after enqueue, and the
        // rows written again (progress, state changes) are those of tasks this store has seen.
        let pieceTables = zip(records, known).compactMap { record, stored in
            stored ? nil : record.pieceChecksums.map { PieceTableRecord(taskID: record.id, table: StoredPieceTable($0)) }
        }
        try database.write { db in
            let update = try db.cachedStatement(sql: TaskRecord.updateSQL)
            let replace = try db.cachedStatement(sql: TaskRecord.replaceSQL)
            for (record, stored) in zip(records, known) {
                try record.write(update: update, replace: replace, rowMayExist: stored, in: db)
            }
            for pieces in pieceTables { try pieces.insert(db, onConflict: .replace) }
            if !deletions.isEmpty {
                _ = try TaskRecord.deleteAll(db, keys: deletions)
                _ = try PieceTableRecord.deleteAll(db, keys: deletions)
            }
        }
        storedIDs.withLock { ids in
            for record in records { ids.insert(record.id) }
            for id in deletions { ids.remove(id) }
        }
    }

    /// The ids of the rows this store has read or written, less those it deleted: only a choice of
    /// statement, never of outcome. A known id is written with `UPDATE` first (in place, no index touched);
    /// any other — a task enqueued since, 10,000 of them in one batch — goes straight to `INSERT OR
    /// REPLACE`, sparing a lookup that would find nothing (a sixth of writing a new batch). A wrong guess
    /// (another connection added or deleted the row) costs only speed: REPLACE writes a row whether or
    /// not it exists, and an `UPDATE` that changed nothing falls back to it.
    private let storedIDs = LockedValue(Set<String>())

    /// The same transaction on the store's thread, after every write handed over before; returns once it
    /// is committed.
    func commit(_ records: [TaskRecord], deleting deletions: [String]) async throws {
        try await writer.run { try self.write(records, deleting: deletions) }
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
        await writer.settle()
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
struct TaskRecord: FetchableRecord, TableRecord, Sendable {
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
    /// ``ManagedTaskError/category``'s raw value.
    var errorCategory: String?
    var errorHTTPStatus: Int64?
    var errorTransient: Bool?
    /// ``ManagedTaskError/Cause/storageText``.
    var errorCause: String?
    /// ``ManagedTask/connections``.
    var connections: Int64?
    /// ``ManagedTask/mirrors``.
    var mirrors: [String]
    /// ``ManagedTask/connectionsPerSource``.
    var connectionsPerSource: Int64?
    /// ``ManagedTask/pieceChecksums`` of a task handed over to be written (its `taskPieces` row is written
    /// with the task's first row only, ``TaskStore/write(_:deleting:)``).
    var pieceChecksums: PieceChecksums?
    /// The task's `taskPieces` row as read back, checked when the task is made (``task``).
    var pieces: StoredPieceTable?
    /// Seconds since 1970.
    var createdAt: Double
    var updatedAt: Double
    var finishedAt: Double?

    /// Reads a row column by column. A NULL, missing or unconvertible value in a required column (a
    /// damaged or hand-edited database) throws GRDB's decoding error instead of trapping — `row["…"]`
    /// traps — and the manager reports it as `DownloadManagerError` `.storage` naming the file.
    /// Columns are read by position from ``selectSQL`` (a name lookup per column was a fifth of a
    /// 10,000-task restore); a table without one of the columns fails that statement instead.
    init(row: Row) throws {
        id = try row.decode(atIndex: 0)
        originalURL = try row.decode(atIndex: 1)
        currentURL = try row.decode(atIndex: 2)
        fileID = try row.decode(atIndex: 3)
        destinationKind = try row.decode(atIndex: 4)
        destinationPath = try row.decode(atIndex: 5)
        namingRule = try row.decode(atIndex: 6)
        namingFileID = try row.decode(atIndex: 7)
        finalPath = try row.decode(atIndex: 8)
        state = try row.decode(atIndex: 9)
        bytesReceived = try row.decode(atIndex: 10)
        totalBytes = try row.decode(atIndex: 11)
        priority = try row.decode(atIndex: 12)
        queueOrder = try row.decode(atIndex: 13)
        groupName = try row.decode(atIndex: 14)
        checksum = try row.decode(atIndex: 15)
        headers = StringDictionaryJSON.decode(try row.decode(String?.self, atIndex: 16))
        metadata = StringDictionaryJSON.decode(try row.decode(String?.self, atIndex: 17))
        requiresUnmeteredNetwork = try row.decode(atIndex: 18)
        rateLimit = try row.decode(atIndex: 19)
        errorCode = try row.decode(atIndex: 20)
        errorMessage = try row.decode(atIndex: 21)
        createdAt = try row.decode(atIndex: 22)
        updatedAt = try row.decode(atIndex: 23)
        finishedAt = try row.decode(atIndex: 24)
        // The v2 columns are read leniently: a value of the wrong type reads as NULL (never a throw for
        // one optional field, never a trap).
        errorCategory = Self.text(row, 25)
        errorHTTPStatus = Self.integer(row, 26)
        errorTransient = Self.integer(row, 27).map { $0 != 0 }
        errorCause = Self.text(row, 28)
        connections = Self.integer(row, 29)
        mirrors = StringArrayJSON.decode(Self.text(row, 30))
        connectionsPerSource = Self.integer(row, 31)
    }

    private static func text(_ row: Row, _ index: Int) -> String? {
        let value: DatabaseValue = row[index]
        if case .string(let text) = value.storage { return text }
        return nil
    }

    private static func integer(_ row: Row, _ index: Int) -> Int64? {
        let value: DatabaseValue = row[index]
        if case .int64(let number) = value.storage { return number }
        return nil
    }

    /// The columns in the order of ``init(row:)``'s indexes and of the write statements' parameters.
    static let columnNames = [
        "id", "originalURL", "currentURL", "fileID", "destinationKind", "destinationPath", "namingRule", "namingFileID",
        "finalPath", "state", "bytesReceived", "totalBytes", "priority", "queueOrder", "groupName", "checksum", "headers",
        "metadata", "requiresUnmeteredNetwork", "rateLimit", "errorCode", "errorMessage", "createdAt", "updatedAt",
        "finishedAt", "errorCategory", "errorHTTPStatus", "errorTransient", "errorCause", "connections",
        "mirrors", "connectionsPerSource",
    ]

    /// Every column of the table, in ``columnNames``' order.
    static let selectSQL = "SELECT \(columnNames.joined(separator: ", ")) FROM task"

    /// The columns the table's indexes hold (the primary key `id` aside; see the v1 migration). Only a
    /// cost: SQLite maintains every index whose columns an `UPDATE` sets, so a column missing here (an
    /// index added by a later migration) still stays right, its index just updated in place.
    static let indexedColumns: Set = ["originalURL", "fileID", "groupName"]

    /// `INSERT OR REPLACE` of a whole row: parameter ?N is column N of ``columnNames``.
    static let replaceSQL =
        "INSERT OR REPLACE INTO task (\(columnNames.joined(separator: ", "))) VALUES (\(columnNames.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))"

    /// The same row written in place when it exists with the same indexed columns, with the same
    /// parameters: no index changes. SQLite's REPLACE deletes and reinserts the row in the table and in
    /// all four of its indexes; almost every write (progress, a state change, a restore pausing 10,000
    /// tasks) changes none of the indexed columns.
    static let updateSQL: String = {
        func parameter(_ column: String) -> String { "?\(columnNames.firstIndex(of: column)! + 1)" }
        let assignments = columnNames.filter { $0 != "id" && !indexedColumns.contains($0) }
            .map { "\($0) = \(parameter($0))" }
        let unchanged = indexedColumns.sorted().map { "\($0) IS \(parameter($0))" }
        return "UPDATE task SET \(assignments.joined(separator: ", ")) WHERE id = \(parameter("id")) AND "
            + unchanged.joined(separator: " AND ")
    }()

    /// Writes the row: ``updateSQL`` in place, or ``replaceSQL`` when that changed no row (a new task, or
    /// an indexed column changed) or when the row is known to be new (`rowMayExist` false: the store has
    /// not seen its id). Both statements are prepared once per connection by the caller.
    ///
    /// SQLite's own binding calls, not GRDB's `StatementArguments`: boxing 25 values per row as
    /// `DatabaseValueConvertible` existentials was two thirds of writing 10,000 rows (issue #18's restore).
    func write(update: Statement, replace: Statement, rowMayExist: Bool = true, in db: Database) throws {
        // The JSON columns are encoded once, whichever statements run.
        let json = (headers: StringDictionaryJSON.encode(headers), metadata: StringDictionaryJSON.encode(metadata))
        if rowMayExist {
            try run(update, sql: Self.updateSQL, json: json, in: db)
            if sqlite3_changes(db.sqliteConnection) > 0 { return }
        }
        try run(replace, sql: Self.replaceSQL, json: json, in: db)
    }

    /// Binds the row's columns as parameters 1…31 of `prepared` and steps it once.
    private func run(_ prepared: Statement, sql: String, json: (headers: String, metadata: String), in db: Database) throws {
        let statement = prepared.sqliteStatement
        var binder = ColumnBinder(statement: statement)
        binder.bind(id)
        binder.bind(originalURL)
        binder.bind(currentURL)
        binder.bind(fileID)
        binder.bind(destinationKind)
        binder.bind(destinationPath)
        binder.bind(namingRule)
        binder.bind(namingFileID)
        binder.bind(finalPath)
        binder.bind(state)
        binder.bind(bytesReceived)
        binder.bind(totalBytes)
        binder.bind(Int64(priority))
        binder.bind(queueOrder)
        binder.bind(groupName)
        binder.bind(checksum)
        binder.bind(json.headers)
        binder.bind(json.metadata)
        binder.bind(Int64(requiresUnmeteredNetwork ? 1 : 0))
        binder.bind(rateLimit.map(Int64.init))
        binder.bind(errorCode)
        binder.bind(errorMessage)
        binder.bind(createdAt)
        binder.bind(updatedAt)
        binder.bind(finishedAt)
        binder.bind(errorCategory)
        binder.bind(errorHTTPStatus)
        binder.bind(errorTransient.map { Int64($0 ? 1 : 0) })
        binder.bind(errorCause)
        binder.bind(connections)
        binder.bind(StringArrayJSON.encode(mirrors))
        binder.bind(connectionsPerSource)
        assert(binder.next == Int32(Self.columnNames.count) + 1, "every column bound once")
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        var failure = binder.failure
        if failure == SQLITE_OK {
            failure = sqlite3_step(statement)
            if failure == SQLITE_DONE { return }
        }
        throw DatabaseError(
            resultCode: ResultCode(rawValue: failure), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
            sql: sql)
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
        errorCode = task.error?.code.name
        errorMessage = task.error?.message
        errorCategory = task.error?.category.rawValue
        errorHTTPStatus = task.error?.httpStatus.map(Int64.init)
        errorTransient = task.error?.isTransient
        errorCause = task.error?.cause?.storageText
        connections = task.connections.map(Int64.init)
        mirrors = task.mirrors
        connectionsPerSource = task.connectionsPerSource.map(Int64.init)
        pieceChecksums = task.pieceChecksums
        createdAt = task.createdAt.timeIntervalSince1970
        updatedAt = task.updatedAt.timeIntervalSince1970
        finishedAt = task.finishedAt?.timeIntervalSince1970
    }

    /// The task this row describes; an unknown state reads as paused (a newer schema's state must not
    /// make an older manager run or drop the task).
    var task: ManagedTask {
        let columns = StoredTaskColumns(
            destination: DestinationColumns(
                kind: destinationKind, path: destinationPath, namingRule: namingRule, namingFileID: namingFileID),
            checksum: checksum, pieces: pieces)
        let destination = columns.destination.destination(fileID: fileID, taskID: id)
        let refusal = columns.refusal
        let stored = ManagedTask.connections(stored: self.connections, metadata: self.metadata)
        return ManagedTask(
            id: id, originalURL: originalURL, currentURL: currentURL, fileID: fileID, destination: destination,
            path: finalPath, state: refusal == nil ? ManagedTaskState(rawValue: state) ?? .paused : .failed,
            bytesReceived: bytesReceived,
            totalBytes: totalBytes, priority: DownloadPriority(rawValue: priority), queueOrder: queueOrder,
            group: groupName, checksum: columns.parsedChecksum, headers: headers,
            metadata: stored.metadata, requiresUnmeteredNetwork: requiresUnmeteredNetwork, rateLimit: rateLimit,
            error: refusal
                ?? errorCode.map {
                    ManagedTaskError(
                        storedCode: $0, message: errorMessage, category: errorCategory, httpStatus: errorHTTPStatus,
                        isTransient: errorTransient, cause: errorCause)
                },
            createdAt: Date(timeIntervalSince1970: createdAt), updatedAt: Date(timeIntervalSince1970: updatedAt),
            finishedAt: finishedAt.map(Date.init(timeIntervalSince1970:)), connections: stored.connections,
            mirrors: mirrors, connectionsPerSource: ManagedTask.connectionsPerSource(stored: connectionsPerSource),
            pieceChecksums: columns.parsedPieces ?? pieceChecksums)
    }
}

/// One row of the `taskPieces` table (migration v5): a task's piece table, ``StoredPieceTable``'s columns.
struct PieceTableRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "taskPieces"

    var taskID: String
    var table: StoredPieceTable

    init(taskID: String, table: StoredPieceTable) {
        self.taskID = taskID
        self.table = table
    }

    /// The columns by position, as ``init(row:)`` reads them (a table without one fails the statement).
    static let selectSQL = "SELECT taskID, algorithm, pieceLength, digests FROM taskPieces"

    /// Reads a row of ``selectSQL`` leniently: a value of the wrong type reads as one
    /// ``StoredPieceTable/decoded`` refuses (an empty algorithm, a zero length, no digests), so a damaged
    /// row fails its task by name instead of the store, and never traps.
    init(row: Row) {
        let id: DatabaseValue = row[0]
        let algorithm: DatabaseValue = row[1]
        let length: DatabaseValue = row[2]
        let digests: DatabaseValue = row[3]
        taskID = String.fromDatabaseValue(id) ?? ""
        table = StoredPieceTable(
            algorithm: String.fromDatabaseValue(algorithm) ?? "",
            pieceLength: { if case .int64(let value) = length.storage { value } else { 0 } }(),
            digests: { if case .blob(let data) = digests.storage { [UInt8](data) } else { nil } }())
    }

    func encode(to container: inout PersistenceContainer) {
        container["taskID"] = taskID
        container["algorithm"] = table.algorithm
        container["pieceLength"] = table.pieceLength
        container["digests"] = table.digests.map { Data($0) }
    }
}

/// Binds values to a prepared statement's parameters 1, 2, 3… in turn; the first failing call's result
/// code is kept.
struct ColumnBinder {
    let statement: SQLiteStatement
    private(set) var next: Int32 = 1
    private(set) var failure = SQLITE_OK

    init(statement: SQLiteStatement) { self.statement = statement }

    /// SQLite copies the bytes (`SQLITE_TRANSIENT`): the string's storage is only borrowed for the call.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    private static let empty: StaticString = ""

    private mutating func record(_ result: Int32) {
        if failure == SQLITE_OK && result != SQLITE_OK { failure = result }
        next += 1
    }

    mutating func bind(_ value: String?) {
        guard var value else { return record(sqlite3_bind_null(statement, next)) }
        let (statement, index) = (statement, next)
        let result = value.withUTF8 { bytes in
            // An empty buffer may have no address, and a NULL pointer would bind SQL NULL.
            bytes.isEmpty
                ? sqlite3_bind_text(
                    statement, index, UnsafeRawPointer(Self.empty.utf8Start).assumingMemoryBound(to: CChar.self), 0, nil)
                : sqlite3_bind_text(
                    statement, index, UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self),
                    Int32(bytes.count), Self.transient)
        }
        record(result)
    }

    mutating func bind(_ value: Int64?) {
        guard let value else { return record(sqlite3_bind_null(statement, next)) }
        record(sqlite3_bind_int64(statement, next, value))
    }

    mutating func bind(_ value: Double?) {
        guard let value else { return record(sqlite3_bind_null(statement, next)) }
        record(sqlite3_bind_double(statement, next, value))
    }
}

/// JSON text for `[String: String]` (headers and metadata columns), written and read directly: Foundation's
/// JSON coders cost ~100 µs a row on Linux, which 10,000 rows cannot afford.
/// A task's mirrors as the `mirrors` column holds them: a JSON array of strings, NULL for none. Read
/// leniently: anything that is not such an array (a damaged row) reads as no mirrors.
enum StringArrayJSON {
    static func encode(_ array: [String]) -> String? {
        guard !array.isEmpty, let data = try? JSONEncoder().encode(array) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    static func decode(_ text: String?) -> [String] {
        guard let text, !text.isEmpty else { return [] }
        return (try? JSONDecoder().decode([String].self, from: Data(text.utf8))) ?? []
    }
}

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
