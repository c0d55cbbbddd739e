@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Testing
import TestOrigin

/// The fleet keeps a task's mirrors and connections per source (issue #48), as the SQLite store does: written
/// by `add` and by a manager's saves, read back, hostile values read as none, and a worker downloads from
/// every source. Against a real PostgreSQL each test starts.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct FleetMirrorsTests {
    /// `add` keeps the mirrors and the per-source count, a save through the `TaskStoring` side replaces
    /// them, and damaged values (not a JSON array of strings, a count outside 1…64) read as none; a
    /// mirror that is not an http(s) URL is refused at `add` and nothing is added.
    @Test func mirrorsAndConnectionsPerSourceAreKeptAndDamagedValuesReadAsNone() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            var request = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/m.bin", destination: .file("/tmp/dk-fleet-unused/m.bin"))
            request.mirrors = ["http://127.0.0.1:2/m.bin", "https://127.0.0.1:3/pub/m.bin?x=\"y\""]
            request.connectionsPerSource = 3
            let id = try #require(try await store.add([request], defaultDirectory: "/tmp").first?.id)
            var task = try #require(try await store.loadTasks().first { $0.id == id })
            #expect(task.mirrors == request.mirrors)
            #expect(task.connectionsPerSource == 3)

            task.mirrors = ["http://127.0.0.1:4/m.bin"]
            task.connectionsPerSource = nil
            try await store.save([task], deleting: [])
            let saved = try #require(try await store.loadTasks().first { $0.id == id })
            #expect(saved.mirrors == ["http://127.0.0.1:4/m.bin"] && saved.connectionsPerSource == nil)

            let damaged: [(String, [String], Int?)] = [
                ("mirrors = '[\"http://127.0.0.1:5/a\", 5]', connections_per_source = 0", [], nil),
                ("mirrors = '[', connections_per_source = 65", [], nil),
                ("mirrors = '{\"a\":\"b\"}', connections_per_source = -1", [], nil),
                ("mirrors = '', connections_per_source = 9223372036854775807", [], nil),
                ("mirrors = '[\"http://127.0.0.1:5/a\"]', connections_per_source = 64", ["http://127.0.0.1:5/a"], 64),
            ]
            for (assignments, mirrors, perSource) in damaged {
                try await HostilePostgresRowsTests.execute("UPDATE downloadkit_task SET \(assignments) WHERE id = '\(id)'", on: server)
                let read = try #require(try await store.loadTasks().first { $0.id == id }, "\(assignments)")
                #expect(read.mirrors == mirrors && read.connectionsPerSource == perSource, "\(assignments): \(read.mirrors) \(String(describing: read.connectionsPerSource))")
            }

            var bad = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/n.bin", destination: .file("/tmp/dk-fleet-unused/n.bin"))
            bad.mirrors = ["ftp://127.0.0.1/n.bin"]
            await #expect(throws: DownloadManagerError.self) { try await store.add([bad], defaultDirectory: "/tmp") }
            #expect(try await store.loadTasks().count == 1)
            await store.close()
        }
    }

    /// A worker downloads a task with a mirror from both origins (each served ranges) and the file is right.
    @Test func aWorkerDownloadsFromTheTasksMirrorsToo() async throws {
        try await withPostgres { server in
            let size: Int64 = 4 << 20
            let origins = try (0..<2).map { _ in try FaultOrigin() }
            defer { for origin in origins { origin.shutdown() } }
            for origin in origins {
                origin.serve("/f.bin", .resource(Resource(size: size, seed: 48, bytesPerSecond: 1_500_000)))
            }
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            var request = DownloadManager.TaskRequest(url: origins[0].url("/f.bin"), destination: .file(scratch.file("f.bin")))
            request.mirrors = [origins[1].url("/f.bin")]
            request.connections = 4
            let id = try #require(try await store.add([request], defaultDirectory: scratch.path).first?.id)
            let worker = try FleetWorker(
                store: store, configuration: .init(workerID: "mirrors", maxConcurrent: 1, pollInterval: .milliseconds(100)))
            let summary = try await worker.run()
            #expect(summary.completed == [id], "\(summary.failed)")
            #expect(fileMatchesPattern(scratch.file("f.bin"), size: size, seed: 48))
            for (index, origin) in origins.enumerated() {
                let ranges = origin.requests("/f.bin").filter { $0.method == "GET" && $0.header("Range") != nil }
                #expect(!ranges.isEmpty, "origin \(index) served no range")
            }
            await store.close()
        }
    }
}
