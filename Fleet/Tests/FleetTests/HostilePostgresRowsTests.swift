import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Testing
import TestOrigin

/// Rows of the fleet's queue are input too (issue #44, a hostile or damaged database row): written by
/// another host's older version, by hand in `psql`, or damaged. A worker claims them, and each one that
/// cannot run as stored ends failed with a typed error naming the column, while the worker goes on with
/// the rest; nothing is written for it. The same rule as the SQLite store's
/// (`HostileStoreRowsTests.aChecksumThatDoesNotParseRestoresFailedNotUnverified`).
@Suite(.serialized, .timeLimit(.minutes(5)))
struct HostilePostgresRowsTests {
    /// Runs one SQL statement against `server` with psql (as the row's author would), failing on any error.
    static func execute(_ sql: String, on server: PostgresServer) async throws {
        let psql = try #require(ProcessRunner.findExecutable("psql"), "psql (Debian's postgresql-client) is missing")
        let result = try await offloaded {
            try ProcessRunner.run(
                psql, ["-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", String(server.port), "-U", "postgres",
                       "-d", "postgres", "-c", sql])
        }
        #expect(result.succeeded, "psql: \(result.output)")
    }

    /// A checksum that does not parse, a relative destination and a `file:` URL, beside a sound task: the
    /// three end failed with `invalidChecksum`, `invalidDestination` and `invalidURL`, the sound one
    /// completes, and no file appears for the others. Before, the damaged checksum was dropped as it was
    /// read and the file was downloaded unverified (the task completed).
    @Test func damagedRowsFailWithTheirColumnNamedAndTheWorkerGoesOn() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            for name in ["good", "checksum", "relative", "scheme"] {
                origin.serve("/\(name).bin", .resource(Resource(size: 100_000, seed: 7)))
            }
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            let added = try await store.add(
                ["good", "checksum", "relative", "scheme"].map {
                    DownloadManager.TaskRequest(url: origin.url("/\($0).bin"), destination: .file(scratch.file("\($0).bin")))
                }, defaultDirectory: scratch.path)
            let ids = added.map(\.id)
            try await Self.execute(
                "UPDATE downloadkit_task SET checksum = 'sha256=not-hex' WHERE id = '\(ids[1])'", on: server)
            try await Self.execute(
                "UPDATE downloadkit_task SET destination_path = 'relative.bin' WHERE id = '\(ids[2])'", on: server)
            try await Self.execute(
                "UPDATE downloadkit_task SET original_url = 'file:///etc/passwd', current_url = 'file:///etc/passwd' WHERE id = '\(ids[3])'",
                on: server)

            let worker = try FleetWorker(
                store: store, configuration: .init(workerID: "hostile-rows", maxConcurrent: 4, pollInterval: .milliseconds(100)))
            let summary = try await worker.run()
            #expect(summary.completed == [ids[0]])
            let failures = Dictionary(uniqueKeysWithValues: summary.failed.map { ($0.taskID, $0.error) })
            #expect(failures[ids[1]]?.code.name == "invalidChecksum", "\(String(describing: failures[ids[1]]))")
            #expect(failures[ids[1]]?.detail.contains("sha256=not-hex") == true)
            #expect(failures[ids[2]]?.code.name == "invalidDestination", "\(String(describing: failures[ids[2]]))")
            #expect(failures[ids[3]]?.code == .invalidURL, "\(String(describing: failures[ids[3]]))")

            let rows = Dictionary(uniqueKeysWithValues: try await store.fleetTasks().map { ($0.task.id, $0.task) })
            #expect(rows[ids[0]]?.state == .completed)
            for id in ids.dropFirst() {
                #expect(rows[id]?.state == .failed, "\(id): \(String(describing: rows[id]))")
            }
            #expect(rows[ids[1]]?.error?.code == .invalidChecksum)
            #expect(fileMatchesPattern(scratch.file("good.bin"), size: 100_000, seed: 7))
            for name in ["checksum.bin", "checksum.bin.dkpart", "relative.bin", "scheme.bin"] {
                #expect(!FileManager.default.fileExists(atPath: scratch.file(name)), "\(name) was written")
            }
            #expect(!FileManager.default.fileExists(atPath: FileManager.default.currentDirectoryPath + "/relative.bin"))
            #expect(!origin.requests().contains { $0.target == "/checksum.bin" || $0.target == "/relative.bin" })
            await store.close()
        }
    }
}
