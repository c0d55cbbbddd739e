@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import GRDB
import HTTPClient
import TestOrigin
import Testing

@_spi(DownloadKitInternal) @testable import DownloadKitManager

/// Piece checksums on manager tasks (issue #48): the task keeps its piece table (``ManagedTask/pieceChecksums``,
/// the store's `taskPieces` row written once at enqueue), its transfer verifies each piece, and a damaged
/// row fails the task by name instead of dropping the check.
@Suite("Manager: piece checksums", .serialized, .timeLimit(.minutes(3)))
struct ManagerPieceTests {
    static let size: Int64 = 8 << 20
    static let piece: Int64 = 1 << 20
    static let seed: UInt64 = 0x48

    /// SHA-256 of each 1 MiB piece of the pattern.
    static func table(size: Int64 = size) -> PieceChecksums {
        let digests = stride(from: Int64(0), to: size, by: Int(piece)).map { start in
            DKDigest.hash(.sha256, TestPattern.bytes(offset: start, count: Int(min(piece, size - start)), seed: seed))
        }
        return PieceChecksums(algorithm: .sha256, pieceLength: piece, digests: digests)
    }

    /// Two connections, one per source, 4 MiB segments (no steal): each origin serves one segment, so every
    /// further request in the logs is a piece fetched again.
    static func configuration(startsRestoredTasks: Bool = false) -> DownloadManagerConfiguration {
        var configuration = managerConfiguration(startsRestoredTasks: startsRestoredTasks)
        configuration.download.connections = 2
        configuration.download.connectionsPerSource = 1
        configuration.download.minimumSegmentSize = 4 << 20
        return configuration
    }

    /// The ranges asked of `origin`, the probe's `bytes=0-0` left out.
    static func ranges(_ origin: FaultOrigin) -> [Range<Int64>] {
        origin.requests("/p").compactMap(\.byteRange).filter { $0 != 0..<1 }
    }

    /// The `taskPieces` rows in the state directory's database.
    static func pieceRows(_ state: String) throws -> Int {
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        defer { try? queue.close() }
        return try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM taskPieces") ?? -1 }
    }

    /// A task with a piece table and two sources, the mirror corrupting 16 bytes at the start of each
    /// segment: the file ends right, and only the bad piece is asked again, of the good origin. Before, the
    /// manager's task dropped its pieces (`ManagedTask.download` set no `pieceChecksums`) and completed
    /// with the mirror's corrupt bytes in place.
    @Test func aCorruptMirrorCostsOnePieceOfAManagedTask() async throws {
        let good = try FaultOrigin()
        let corrupt = try FaultOrigin()
        defer {
            good.shutdown()
            corrupt.shutdown()
        }
        good.serve("/p", .resource(Resource(size: Self.size, seed: Self.seed, bytesPerSecond: 4 << 20)))
        corrupt.serve(
            "/p",
            .resource(
                Resource(
                    size: Self.size, seed: Self.seed, bytesPerSecond: 4 << 20,
                    faults: [0, 4 << 20].map { Int64($0) }.map { .corruptBytes($0..<$0 + 16) })))
        let scratch = try ScratchDirectory()
        let manager = try await DownloadManager(stateDirectory: scratch.file("state"), configuration: Self.configuration())
        var request = DownloadManager.TaskRequest(url: good.url("/p"), destination: .file(scratch.file("p")))
        request.mirrors = [corrupt.url("/p")]
        request.pieceChecksums = Self.table()
        let id = try await manager.enqueue([request])[0]
        let done = try await manager.handle(forTask: id).result()
        await manager.close()
        #expect(done.state == .completed)
        #expect(fileMatchesPattern(scratch.file("p"), size: Self.size, seed: Self.seed))
        let fromCorrupt = Self.ranges(corrupt)
        let bad = try #require(fromCorrupt.first.map { $0.lowerBound / Self.piece }, "\(fromCorrupt)")
        let badRange = bad * Self.piece..<(bad + 1) * Self.piece
        #expect(Self.ranges(good).filter { $0 == badRange }.count == 1, "piece \(bad) asked again of the good origin")
        let asked = (Self.ranges(good) + fromCorrupt).reduce(Int64(0)) { $0 + Int64($1.count) }
        #expect(asked == Self.size + Self.piece, "everything once, the bad piece twice: \(asked)")
    }

    /// The piece table survives the store: enqueued, the manager closed and a new one opened on the same
    /// directory, the task has the same table; removing the task deletes its `taskPieces` row. A task
    /// without pieces writes no row.
    @Test func aTaskKeepsItsPiecesAcrossARestartAndLosesThemWithTheTask() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: Self.configuration())
        var request = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/p", destination: .file(scratch.file("p")))
        request.pieceChecksums = Self.table()
        request.startsPaused = true
        var plain = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/q", destination: .file(scratch.file("q")))
        plain.startsPaused = true
        let ids = try await first.enqueue([request, plain])
        // A later write of the task (a state change) keeps the row as it was.
        try await first.setPriority(taskID: ids[0], .high)
        await first.close()
        #expect(try Self.pieceRows(state) == 1)

        let second = try await DownloadManager(stateDirectory: state, configuration: Self.configuration())
        #expect(await second.task(ids[0])?.pieceChecksums == Self.table())
        #expect(await second.task(ids[0])?.state == .paused)
        #expect(await second.task(ids[1])?.pieceChecksums == nil)
        try await second.remove(taskID: ids[0])
        await second.close()
        #expect(try Self.pieceRows(state) == 0)
    }

    /// A piece table that cannot describe a file is refused at enqueue, naming the field; nothing is added.
    @Test func aPieceTableWithADigestOfTheWrongSizeIsRefusedAtEnqueue() async throws {
        let scratch = try ScratchDirectory()
        let manager = try await DownloadManager(stateDirectory: scratch.file("state"), configuration: Self.configuration())
        var request = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/p", destination: .file(scratch.file("p")))
        request.pieceChecksums = PieceChecksums(algorithm: .sha256, pieceLength: Self.piece, digests: [[1, 2, 3]])
        await #expect {
            try await manager.enqueue([request])
        } throws: { error in
            let error = error as? DownloadManagerError
            return error?.code == .invalidPieceChecksums && error?.detail.contains("piece 0 has 3 bytes") == true
        }
        #expect(await manager.allTasks().isEmpty)
        await manager.close()
    }

    /// A damaged `taskPieces` row (written with raw SQL: digests that are not a whole number of SHA-256
    /// digests, an algorithm this build does not know, a zero piece length, digests that are not bytes)
    /// restores its task failed with `invalidPieceChecksums` naming the cause — never running it with its
    /// pieces unchecked — and the partial the task had is kept.
    @Test(arguments: [
        ("digests = x'00'", "its digests take 1 bytes, not a multiple of sha256's 32"),
        ("algorithm = 'sha3-999'", "its algorithm \"sha3-999\" is not one this build computes"),
        ("pieceLength = 0", "its piece length is 0, not positive"),
        ("digests = 'text'", "its digests are not bytes"),
    ])
    func aDamagedPieceRowFailsItsTaskNamingIt(damage: String, cause: String) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/p", .resource(Resource(size: Self.size, seed: Self.seed, bytesPerSecond: 1 << 20)))
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: Self.configuration())
        var request = DownloadManager.TaskRequest(url: origin.url("/p"), destination: .file(scratch.file("p")))
        request.pieceChecksums = Self.table()
        let id = try await first.enqueue([request])[0]
        #expect(await eventually { await first.task(id)?.bytesReceived ?? 0 > 0 })
        try await first.pause(taskID: id)
        await first.close()
        let partial = try #require(scratch.size("p.dkpart"))

        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        try await queue.write { db in try db.execute(sql: "UPDATE taskPieces SET \(damage) WHERE taskID = ?", arguments: [id]) }
        try queue.close()

        let second = try await DownloadManager(stateDirectory: state, configuration: Self.configuration(startsRestoredTasks: true))
        let task = try #require(await second.task(id))
        #expect(task.state == .failed)
        #expect(task.error?.code == .invalidPieceChecksums, "\(String(describing: task.error))")
        #expect(task.error?.message == "the stored piece table is damaged: " + cause, "\(String(describing: task.error))")
        #expect(task.bytesReceived > 0)
        await second.close()
        #expect(scratch.size("p.dkpart") == partial)
        #expect(!scratch.contents.contains("p"))
    }
}
