@_spi(DownloadKitInternal) import DownloadKit
@_spi(DownloadKitInternal) import DownloadKitManager
import DownloadKitPostgres
import Foundation
import HTTPClient
import Testing
import TestOrigin

/// The fleet keeps a task's piece table as the SQLite store does: a `downloadkit_task_pieces` row written once
/// with the task's first row (by `add` or a manager's first save), read with the task, deleted with it; a
/// damaged row refuses the task by name; and a worker verifies each piece, so a corrupt mirror costs pieces,
/// not the file. Against a real PostgreSQL each test starts.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct FleetPiecesTests {
    static let size: Int64 = 8 << 20
    static let piece: Int64 = 1 << 20
    static let seed: UInt64 = 0x48

    /// SHA-256 of each 1 MiB piece of the pattern.
    static func table() -> PieceChecksums {
        let digests = stride(from: Int64(0), to: size, by: Int(piece)).map { start in
            DKDigest.hash(.sha256, TestPattern.bytes(offset: start, count: Int(min(piece, size - start)), seed: seed))
        }
        return PieceChecksums(algorithm: .sha256, pieceLength: piece, digests: digests)
    }

    @Test func aTaskKeepsItsPiecesWrittenOnceAndADamagedRowRefusesIt() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            var request = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/p.bin", destination: .file("/tmp/dk-fleet-unused/p.bin"))
            request.pieceChecksums = Self.table()
            let plain = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/q.bin", destination: .file("/tmp/dk-fleet-unused/q.bin"))
            let ids = try await store.add([request, plain], defaultDirectory: "/tmp").map(\.id)
            var tasks = try await store.loadTasks()
            var task = try #require(tasks.first { $0.id == ids[0] })
            #expect(task.pieceChecksums == Self.table())
            #expect(tasks.first { $0.id == ids[1] }?.pieceChecksums == nil)

            // A later save (progress) does not rewrite the row: a marker put in the row by hand stays.
            try await HostilePostgresRowsTests.execute(
                "UPDATE downloadkit_task_pieces SET piece_length = 524288 WHERE task_id = '\(ids[0])'", on: server)
            task.bytesReceived = 1234
            try await store.save([task], deleting: [])
            task = try #require(try await store.loadTasks().first { $0.id == ids[0] })
            #expect(task.pieceChecksums?.pieceLength == 524288 && task.bytesReceived == 1234)

            // A task a manager saves first (the TaskStoring side) gets its row with that first save.
            var saved = task
            saved.id = "fleet-pieces-saved"
            saved.originalURL = "http://127.0.0.1:1/s.bin"
            saved.pieceChecksums = Self.table()
            try await store.save([saved], deleting: [])
            tasks = try await store.loadTasks()
            #expect(tasks.first { $0.id == saved.id }?.pieceChecksums == Self.table())

            // Damaged rows (each on a task of its own): the task is refused naming the piece table, never run
            // unchecked.
            let damaged = ["digests = '\\x0102'::bytea", "algorithm = 'crc32'", "piece_length = 0"]
            for (index, assignment) in damaged.enumerated() {
                var victim = request
                victim.url = "http://127.0.0.1:1/d\(index).bin"
                victim.destination = .file("/tmp/dk-fleet-unused/d\(index).bin")
                let victimID = try #require(try await store.add([victim], defaultDirectory: "/tmp").first?.id)
                #expect(try await store.fleetTask(victimID)?.refusal == nil)
                try await HostilePostgresRowsTests.execute(
                    "UPDATE downloadkit_task_pieces SET \(assignment) WHERE task_id = '\(victimID)'", on: server)
                let row = try #require(try await store.fleetTask(victimID))
                #expect(row.refusal?.code == .invalidPieceChecksums, "\(assignment): \(String(describing: row.refusal))")
                #expect(row.task.pieceChecksums == nil)
                try await store.save([], deleting: [victimID])
            }

            // Deleting the task deletes its row.
            try await store.save([], deleting: [saved.id])
            try await HostilePostgresRowsTests.execute(
                "DO $$ BEGIN IF (SELECT count(*) FROM downloadkit_task_pieces WHERE task_id = '\(saved.id)') <> 0 THEN RAISE EXCEPTION 'piece row kept'; END IF; END $$",
                on: server)

            // A table that fits no file is refused at add, and nothing is added.
            var bad = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/b.bin", destination: .file("/tmp/dk-fleet-unused/b.bin"))
            bad.pieceChecksums = PieceChecksums(algorithm: .sha256, pieceLength: 0, digests: [[UInt8](repeating: 0, count: 32)])
            await #expect(throws: DownloadManagerError.self) { try await store.add([bad], defaultDirectory: "/tmp") }
            #expect(try await store.loadTasks().count == 2)
            await store.close()
        }
    }

    /// A worker downloads a task with a piece table from a good origin and a mirror that corrupts the start of
    /// every piece: the file is right, and the good origin was asked for little more than the file (the bad
    /// pieces again, not the whole). Before the fleet kept piece tables, the corrupt bytes landed in a task
    /// that reported completed.
    @Test func aWorkerVerifiesEachPieceAndACorruptMirrorCostsPiecesNotTheFile() async throws {
        try await withPostgres { server in
            let good = try FaultOrigin()
            let corrupt = try FaultOrigin()
            defer {
                good.shutdown()
                corrupt.shutdown()
            }
            good.serve("/p.bin", .resource(Resource(size: Self.size, seed: Self.seed, bytesPerSecond: 4 << 20)))
            corrupt.serve(
                "/p.bin",
                .resource(
                    Resource(
                        size: Self.size, seed: Self.seed, bytesPerSecond: 4 << 20,
                        faults: stride(from: Int64(0), to: Self.size, by: Int(Self.piece)).map { .corruptBytes($0..<$0 + 16) })))
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            var request = DownloadManager.TaskRequest(url: good.url("/p.bin"), destination: .file(scratch.file("p.bin")))
            request.mirrors = [corrupt.url("/p.bin")]
            request.connections = 2
            request.connectionsPerSource = 1
            request.pieceChecksums = Self.table()
            let id = try #require(try await store.add([request], defaultDirectory: scratch.path).first?.id)
            let worker = try FleetWorker(
                store: store, configuration: .init(workerID: "pieces", maxConcurrent: 1, pollInterval: .milliseconds(100)))
            let summary = try await worker.run()
            #expect(summary.completed == [id], "\(summary.failed)")
            #expect(fileMatchesPattern(scratch.file("p.bin"), size: Self.size, seed: Self.seed))
            let fromCorrupt = corrupt.requests("/p.bin").compactMap(\.byteRange).filter { $0 != 0..<1 }
            let fromGood = good.requests("/p.bin").compactMap(\.byteRange).filter { $0 != 0..<1 }
            let asked = (fromGood + fromCorrupt).reduce(Int64(0)) { $0 + Int64($1.count) }
            #expect(!fromCorrupt.isEmpty, "the mirror served nothing: the test proves nothing")
            #expect(asked < 2 * Self.size, "pieces again, not the file again: \(asked) bytes asked")
            await store.close()
        }
    }
}
