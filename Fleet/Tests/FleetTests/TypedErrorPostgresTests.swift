import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Testing
import TestOrigin

/// The PostgreSQL store keeps a task error's typed fields and the task's connection count in columns of
/// their own (migration v2, issue #46); rows written before them read as sensible typed values.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct TypedErrorPostgresTests {
    /// A worker's 404 is stored with its status and category, and the task's connection count round-trips.
    @Test func aFailedTasksTypedErrorAndConnectionsRoundTrip() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            var request = DownloadManager.TaskRequest(url: origin.url("/missing.bin"), destination: .file(scratch.file("m.bin")))
            request.connections = 5
            let id = try #require(try await store.add([request], defaultDirectory: scratch.path).first?.id)
            let worker = try FleetWorker(
                store: store, configuration: .init(workerID: "typed", maxConcurrent: 1, pollInterval: .milliseconds(100)))
            let summary = try await worker.run()
            #expect(summary.failed.map(\.taskID) == [id])

            let task = try #require(try await store.fleetTasks().first { $0.task.id == id }?.task)
            #expect(task.state == .failed && task.connections == 5)
            let error = try #require(task.error)
            #expect(error.code == .httpStatus && error.category == .httpStatus && error.httpStatus == 404, "\(error)")
            #expect(!error.isTransient)
            await store.close()
        }
    }

    /// A row as a v1 build wrote it (code and message only, the count as a metadata key) and one with
    /// hostile typed columns: both read, the first with the category its code gives and its count, the
    /// second with the damaged fields absent.
    @Test func aVersionOneRowAndHostileTypedColumnsRead() async throws {
        try await withPostgres { server in
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            let added = try await store.add(
                ["old", "hostile"].map {
                    DownloadManager.TaskRequest(url: "http://127.0.0.1:1/\($0)", destination: .file(scratch.file($0)))
                }, defaultDirectory: scratch.path)
            let ids = added.map(\.id)
            try await HostilePostgresRowsTests.execute(
                """
                UPDATE downloadkit_task SET state = 'failed', error_code = 'diskFull', error_message = 'the disk is full',
                    metadata = '{"downloadkit.connections":"3","title":"T"}', connections = NULL
                WHERE id = '\(ids[0])'
                """, on: server)
            try await HostilePostgresRowsTests.execute(
                """
                UPDATE downloadkit_task SET state = 'failed', error_code = 'httpStatus', error_message = 'x',
                    error_category = 'bogus', error_http_status = 99999, error_transient = true,
                    error_cause = 'not|a|cause|at|all|x', connections = 1000
                WHERE id = '\(ids[1])'
                """, on: server)
            let rows = Dictionary(uniqueKeysWithValues: try await store.fleetTasks().map { ($0.task.id, $0.task) })
            let old = try #require(rows[ids[0]])
            #expect(old.error?.code == .diskFull && old.error?.category == .space && old.error?.httpStatus == nil)
            #expect(old.connections == 3 && old.metadata == ["title": "T"])
            let hostile = try #require(rows[ids[1]])
            #expect(hostile.error?.category == .httpStatus && hostile.error?.httpStatus == nil)
            #expect(hostile.error?.isTransient == true && hostile.error?.cause == nil && hostile.connections == nil)
            await store.close()
        }
    }
}
