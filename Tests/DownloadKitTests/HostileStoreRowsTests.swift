import Foundation
import GRDB
import TestOrigin
import Testing

import DownloadKit
@testable import DownloadKitManager

/// Rows read back from the task store are input too (issue #20): a damaged or hand-edited
/// `tasks.sqlite` gets a typed error or a clamped value, never a trap.
@Suite("Manager: hostile task-store rows", .serialized)
struct HostileStoreRowsTests {
    /// Every column of the v1 schema, in order.
    static let columns = [
        "id", "originalURL", "currentURL", "fileID", "destinationKind", "destinationPath", "namingRule", "namingFileID",
        "finalPath", "state", "bytesReceived", "totalBytes", "priority", "queueOrder", "groupName", "checksum", "headers",
        "metadata", "requiresUnmeteredNetwork", "rateLimit", "errorCode", "errorMessage", "createdAt", "updatedAt",
        "finishedAt",
    ]

    /// A row that survived a broken schema: required columns NULL. Before, GRDB's `row["…"]` trapped on it
    /// while the manager opened (the process died); now the manager refuses to open with `.storage`.
    @Test func aNullInARequiredColumnIsAStorageErrorNotATrap() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        try await queue.write { db in
            // The table as a damaged copy might hold it: the same columns, no NOT NULL constraints; the
            // migration recorded as applied so the store does not recreate it.
            try db.execute(sql: "CREATE TABLE task (\(Self.columns.joined(separator: ", ")), PRIMARY KEY (id))")
            try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
            try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v1: tasks')")
            try db.execute(
                sql: "INSERT INTO task (id, originalURL, state, headers, metadata) VALUES ('t1', NULL, 'waiting', '{}', '{}')")
        }
        try queue.close()
        do {
            _ = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
            Issue.record("a manager opened on a row with NULL required columns")
        } catch let error as DownloadManagerError {
            #expect(error.code == .storage, "\(error)")
        }
    }

    /// A waiting row whose queue order is near Int64.max: restoring it added the order step and trapped
    /// on the overflow (Scheduler.restore). Now the order is clamped, the task runs and new tasks queue
    /// behind it.
    @Test func aQueueOrderNearTheLimitIsClampedNotAnOverflow() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/a.bin", .resource(Resource(size: 64 << 10, seed: 71)))
        origin.serve("/b.bin", .resource(Resource(size: 64 << 10, seed: 72)))
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        let id = try await first.enqueue(url: origin.url("/a.bin"), destination: .file(scratch.file("a.bin")))
        await first.close()
        // The row as a waiting task with a hostile order (whatever the first manager got to do).
        try? FileManager.default.removeItem(atPath: scratch.file("a.bin"))
        let store = try TaskStore(directory: state)
        var record = try #require(try store.loadAll().first { $0.id == id })
        record.state = "waiting"
        record.bytesReceived = 0
        record.finalPath = nil
        record.finishedAt = nil
        record.queueOrder = Int64.max - 1
        try store.write([record])

        let manager = try await DownloadManager(
            stateDirectory: state, configuration: managerConfiguration(startsRestoredTasks: true))
        let second = try await manager.enqueue(url: origin.url("/b.bin"), destination: .file(scratch.file("b.bin")))
        #expect(await eventually { await manager.task(id)?.state == .completed })
        #expect(await eventually { await manager.task(second)?.state == .completed })
        await manager.close()
        #expect(fileMatchesPattern(scratch.file("a.bin"), size: 64 << 10, seed: 71))
    }
}
