import Foundation
import GRDB
import TestOrigin
import Testing

import DownloadKit
@testable import DownloadKitManager

/// The task store writes a row in place (`UPDATE`, no index touched) when its indexed columns are
/// unchanged and replaces it otherwise (issue #18's restore); either way the row reads back as written
/// and the table's indexes agree with it.
@Suite("Task store: rows written in place or replaced")
struct TaskStoreWriteTests {
    /// Two stored tasks (one in a group with a file id), as their rows.
    static func storedRecords(in state: String, scratch: ScratchDirectory) async throws -> (TaskStore, [TaskRecord]) {
        let offline = NetworkStatus(isReachable: false, isMetered: false)
        let manager = try await DownloadManager(
            stateDirectory: state, configuration: managerConfiguration(), networkMonitor: ManualNetworkMonitor(offline))
        var grouped = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/a.bin", destination: .file(scratch.file("a.bin")))
        grouped.group = "g1"
        grouped.fileID = "file-a"
        _ = try await manager.enqueue([
            grouped, .init(url: "http://127.0.0.1:1/b.bin", destination: .file(scratch.file("b.bin"))),
        ])
        await manager.close()
        let store = try TaskStore(directory: state)
        let records = try store.loadAll().sorted { $0.originalURL < $1.originalURL }
        try #require(records.count == 2)
        return (store, records)
    }

    /// `PRAGMA integrity_check` (every index entry matches its row) and the ids an indexed lookup finds.
    static func check(_ state: String, _ sql: String, _ argument: String) throws -> (integrity: String, ids: [String]) {
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        defer { try? queue.close() }
        return try queue.read { db in
            (
                try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "",
                try String.fetchAll(db, sql: sql, arguments: [argument])
            )
        }
    }

    @Test func aRowWhoseIndexedColumnsAreUnchangedIsWrittenInPlace() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let (store, records) = try await Self.storedRecords(in: state, scratch: scratch)
        var changed = records
        for index in changed.indices {
            changed[index].state = "paused"
            changed[index].bytesReceived = 12_345 + Int64(index)
            changed[index].headers = ["X-Token": "t\(index) \u{1F600}"]
            changed[index].errorMessage = ""  // empty text stays text, not NULL
            changed[index].finishedAt = nil
        }
        try store.write(changed)
        let read = try store.loadAll().sorted { $0.originalURL < $1.originalURL }
        #expect(read.map(\.state) == ["paused", "paused"])
        #expect(read.map(\.bytesReceived) == [12_345, 12_346])
        #expect(read.map(\.headers) == [["X-Token": "t0 \u{1F600}"], ["X-Token": "t1 \u{1F600}"]])
        #expect(read.map(\.errorMessage) == ["", ""])
        #expect(read.map(\.groupName) == ["g1", nil])
        #expect(read.map(\.fileID) == ["file-a", nil])
        let found = try Self.check(state, "SELECT id FROM task INDEXED BY task_groupName WHERE groupName = ?", "g1")
        #expect(found.integrity == "ok")
        #expect(found.ids == [records[0].id])
    }

    @Test func aRowWhoseIndexedColumnsChangedIsReplacedAndItsIndexesFollow() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let (store, records) = try await Self.storedRecords(in: state, scratch: scratch)
        var changed = records
        changed[0].groupName = nil
        changed[0].fileID = nil
        changed[1].groupName = "g2"
        changed[1].fileID = "file-b"
        changed[1].originalURL = "http://127.0.0.1:1/b2.bin"
        changed[1].state = "failed"
        try store.write(changed)
        let read = try store.loadAll().sorted { $0.id < $1.id }
        let expected = changed.sorted { $0.id < $1.id }
        #expect(read.map(\.groupName) == expected.map(\.groupName))
        #expect(read.map(\.fileID) == expected.map(\.fileID))
        #expect(read.map(\.originalURL) == expected.map(\.originalURL))
        #expect(read.map(\.state) == expected.map(\.state))
        #expect(try Self.check(state, "SELECT id FROM task INDEXED BY task_groupName WHERE groupName = ?", "g1").ids.isEmpty)
        let byGroup = try Self.check(state, "SELECT id FROM task INDEXED BY task_groupName WHERE groupName = ?", "g2")
        #expect(byGroup.integrity == "ok")
        #expect(byGroup.ids == [records[1].id])
        let byFile = try Self.check(state, "SELECT id FROM task INDEXED BY task_fileID WHERE fileID = ?", "file-b")
        #expect(byFile.ids == [records[1].id])
        let byURL = try Self.check(
            state, "SELECT id FROM task INDEXED BY task_originalURL WHERE originalURL = ?", "http://127.0.0.1:1/b2.bin")
        #expect(byURL.ids == [records[1].id])
        #expect(try store.loadAll().count == 2)
    }

    /// A row SQLite refuses (here a trigger aborts every update) is a `DatabaseError` with SQLite's
    /// message, and the batch's transaction is rolled back: a new row written before it is not kept.
    @Test func aRefusedRowIsAnErrorAndTheBatchIsRolledBack() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let (store, records) = try await Self.storedRecords(in: state, scratch: scratch)
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        try await queue.write { db in
            try db.execute(sql: "CREATE TRIGGER refuse BEFORE UPDATE ON task BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        }
        try queue.close()
        var fresh = records[1]
        fresh.id = "new-task"
        fresh.originalURL = "http://127.0.0.1:1/c.bin"
        var paused = records[0]
        paused.state = "paused"
        do {
            try store.write([fresh, paused])
            Issue.record("a write the database refused was reported as written")
        } catch let error as DatabaseError {
            #expect(error.message?.contains("refused by the test") == true, "\(error)")
        }
        let read = try store.loadAll()
        #expect(read.count == 2)
        #expect(read.first { $0.id == records[0].id }?.state == records[0].state)
    }

    /// A row this store has not seen goes straight to `INSERT OR REPLACE`; one it believes new but that
    /// another connection wrote meanwhile is replaced whole; one it knows but that another connection
    /// deleted is inserted again. Either way the table and its indexes hold exactly what was written.
    @Test func rowsTheStoreHasNotSeenAreWrittenWhetherOrNotTheyExist() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let (store, records) = try await Self.storedRecords(in: state, scratch: scratch)
        // A second store on the same directory has seen no row: both of its writes take the REPLACE path.
        let other = try TaskStore(directory: state)
        var elsewhere = records[0]
        elsewhere.state = "paused"
        elsewhere.groupName = "g3"
        var fresh = records[1]
        fresh.id = "fresh-task"
        fresh.originalURL = "http://127.0.0.1:1/fresh.bin"
        try other.write([elsewhere, fresh])
        // The first store still knows records[1]; delete its row behind the store's back.
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        try await queue.write { db in try db.execute(sql: "DELETE FROM task WHERE id = ?", arguments: [records[1].id]) }
        try queue.close()
        var revived = records[1]
        revived.state = "failed"
        try store.write([revived])
        let read = try store.loadAll().sorted { $0.id < $1.id }
        let expected = [elsewhere, fresh, revived].sorted { $0.id < $1.id }
        #expect(read.map(\.id) == expected.map(\.id))
        #expect(read.map(\.state) == expected.map(\.state))
        #expect(read.map(\.groupName) == expected.map(\.groupName))
        let byGroup = try Self.check(state, "SELECT id FROM task INDEXED BY task_groupName WHERE groupName = ?", "g3")
        #expect(byGroup.integrity == "ok")
        #expect(byGroup.ids == [records[0].id])
        let byURL = try Self.check(
            state, "SELECT id FROM task INDEXED BY task_originalURL WHERE originalURL = ?", "http://127.0.0.1:1/fresh.bin")
        #expect(byURL.ids == ["fresh-task"])
    }
}
