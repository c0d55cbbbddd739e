@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Testing
import TestOrigin

/// The PostgreSQL task store against a real server each test starts itself: migrations, claims in the
/// fleet's order, limits, lease expiry and epochs, fencing of late writers, events, and a
/// `DownloadManager` keeping its tasks there. One test at a time: each starts its own server, and the
/// rest of the suite runs beside them on two cores.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct PostgresTaskStoreTests {
    static func request(_ url: String, priority: Int = 0, directory: String = "/tmp/dk-fleet-unused") -> DownloadManager.TaskRequest {
        DownloadManager.TaskRequest(url: url, destination: .directory(directory, naming: .fromResponse), priority: DownloadPriority(rawValue: priority))
    }

    @Test func migrationsApplyOnceWhenSeveralWorkersOpenTogether() async throws {
        try await withPostgres { server in
            let url = try #require(PostgresStoreURL(server.url))
            let stores = try await withThrowingTaskGroup(of: PostgresTaskStore.self) { group in
                for _ in 0..<3 { group.addTask { try await PostgresTaskStore.open(url) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for store in stores {
                #expect(try await store.appliedMigrations() == PostgresTaskStore.migrationNames)
            }
            let again = try await PostgresTaskStore.open(url)
            #expect(try await again.appliedMigrations() == PostgresTaskStore.migrationNames)
            await again.close()
            for store in stores { await store.close() }
        }
    }

    @Test func addingTheSameURLOrFileIDTwiceKeepsOneTask() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            let first = try await store.add([Self.request("http://127.0.0.1:1/a.bin")], defaultDirectory: "/tmp")
            var withFileID = Self.request("http://127.0.0.1:1/b.bin")
            withFileID.fileID = "b"
            var sameFileID = Self.request("http://127.0.0.1:1/other.bin")
            sameFileID.fileID = "b"
            let second = try await store.add(
                [Self.request("http://127.0.0.1:1/a.bin"), withFileID, sameFileID], defaultDirectory: "/tmp")
            #expect(first.map(\.added) == [true])
            #expect(second.map(\.added) == [false, true, false])
            #expect(second[0].id == first[0].id)
            #expect(second[2].id == second[1].id)
            #expect(try await store.fleetTasks().count == 2)
            await store.close()
        }
    }

    @Test func claimsFollowPriorityThenQueueOrderAcrossWorkersAndNeverHandOutATaskTwice() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            let added = try await store.add(
                (0..<8).map { Self.request("http://127.0.0.1:1/t\($0).bin", priority: $0 == 5 ? 10 : ($0 == 6 ? -10 : 0)) },
                defaultDirectory: "/tmp")
            let ids = added.map(\.id)
            let a = try await store.claim(worker: "a", count: 3, lease: .seconds(60))
            let b = try await store.claim(worker: "b", count: 3, lease: .seconds(60))
            let c = try await store.claim(worker: "c", count: 3, lease: .seconds(60))
            // The high-priority task first, then the line in order, the low-priority task last.
            #expect(a.map(\.task.id) == [ids[5], ids[0], ids[1]])
            #expect(b.map(\.task.id) == [ids[2], ids[3], ids[4]])
            #expect(c.map(\.task.id) == [ids[7], ids[6]])
            #expect((a + b + c).allSatisfy { $0.epoch == 1 })
            #expect(try await store.claim(worker: "d", count: 3, lease: .seconds(60)).isEmpty)
            let owners = Dictionary(uniqueKeysWithValues: try await store.fleetTasks().map { ($0.task.id, $0.leaseOwner) })
            for lease in a { #expect(owners[lease.task.id] == "a") }
            for lease in b { #expect(owners[lease.task.id] == "b") }
            await store.close()
        }
    }

    @Test func theFleetWideLimitHoldsForEveryWorker() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            _ = try await store.add((0..<6).map { Self.request("http://127.0.0.1:1/l\($0).bin") }, defaultDirectory: "/tmp")
            try await store.setFleetMaxConcurrent(3)
            #expect(try await store.fleetMaxConcurrent() == 3)
            let a = try await store.claim(worker: "a", count: 2, lease: .seconds(60))
            let b = try await store.claim(worker: "b", count: 2, lease: .seconds(60))
            #expect(a.count == 2)
            #expect(b.count == 1)
            #expect(try await store.claim(worker: "c", count: 2, lease: .seconds(60)).isEmpty)
            let result = DownloadResult(
                path: "/tmp/x", bytes: 1, resumedFrom: 0, bytesTransferred: 1, finalURL: a[0].task.originalURL,
                checksumHex: nil, isResumable: true)
            #expect(try await store.finish(a[0], worker: "a", as: .completed(result)))
            #expect(try await store.claim(worker: "c", count: 2, lease: .seconds(60)).count == 1)
            try await store.setFleetMaxConcurrent(nil)
            #expect(try await store.claim(worker: "c", count: 5, lease: .seconds(60)).count == 2)
            await store.close()
        }
    }

    @Test func anExpiredLeaseGoesToAnotherWorkerWithTheNextEpochAndTheOldHolderIsFencedOut() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            _ = try await store.add([Self.request("http://127.0.0.1:1/e.bin")], defaultDirectory: "/tmp")
            let old = try #require(try await store.claim(worker: "old", count: 1, lease: .seconds(1)).first)
            #expect(old.epoch == 1)
            // Live: nobody else gets it.
            #expect(try await store.claim(worker: "new", count: 1, lease: .seconds(60)).isEmpty)
            #expect(try await eventually { try await store.fleetTask(old.task.id)?.leaseIsLive == false })
            let new = try #require(try await store.claim(worker: "new", count: 1, lease: .seconds(60)).first)
            #expect(new.task.id == old.task.id)
            #expect(new.epoch == 2)
            // What a fence asks before a checkpoint or the final rename.
            #expect(try await store.holds(new, worker: "new"))
            #expect(try await store.holds(old, worker: "old") == false)
            // The old holder can neither renew, nor record progress, completion or release.
            #expect(try await store.renew(worker: "old", leases: [(old.task.id, old.epoch, 999)], lease: .seconds(60)).isEmpty)
            let result = DownloadResult(
                path: "/tmp/e.bin", bytes: 5, resumedFrom: 0, bytesTransferred: 5, finalURL: old.task.originalURL,
                checksumHex: nil, isResumable: true)
            #expect(try await store.finish(old, worker: "old", as: .completed(result)) == false)
            #expect(try await store.finish(old, worker: "old", as: .released(bytes: 5, totalBytes: 5)) == false)
            let row = try #require(try await store.fleetTask(old.task.id))
            #expect(row.task.state == .running)
            #expect(row.leaseOwner == "new")
            #expect(row.task.bytesReceived == 0)
            #expect(try await store.renew(worker: "new", leases: [(new.task.id, new.epoch, 7)], lease: .seconds(60)) == [new.task.id])
            #expect(try await store.finish(new, worker: "new", as: .completed(result)))
            #expect(try await store.fleetTask(old.task.id)?.task.state == .completed)
            let history = try await store.leaseHistory()
            #expect(history.map(\.epoch) == [1, 2])
            #expect(history.map(\.worker) == ["old", "new"])
            #expect(history.map(\.outcome) == ["expired", "completed"])
            #expect(Fleet.leasesNeverOverlap(history).isEmpty)
            await store.close()
        }
    }

    @Test func aReleasedTaskIsTakenAtOnceFromItsBytes() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            _ = try await store.add([Self.request("http://127.0.0.1:1/r.bin")], defaultDirectory: "/tmp")
            let first = try #require(try await store.claim(worker: "a", count: 1, lease: .seconds(60)).first)
            #expect(try await store.finish(first, worker: "a", as: .released(bytes: 4096, totalBytes: 8192)))
            let row = try #require(try await store.fleetTask(first.task.id))
            #expect(row.task.state == .waiting)
            #expect(row.task.bytesReceived == 4096)
            #expect(row.task.totalBytes == 8192)
            let second = try #require(try await store.claim(worker: "b", count: 1, lease: .seconds(60)).first)
            #expect(second.epoch == 2)
            #expect(try await store.leaseHistory().map(\.outcome) == ["released", nil])
            await store.close()
        }
    }

    @Test func aListenerSeesEveryStateChangeOfTheWholeFleet() async throws {
        try await withPostgres { server in
            let store = try await openStore(server)
            let events = store.taskEvents()
            var iterator = events.makeAsyncIterator()
            #expect(try await iterator.next() == .listening)
            let other = try await openStore(server)  // another host's store
            let added = try await other.add(
                [Self.request("http://127.0.0.1:1/n1.bin"), Self.request("http://127.0.0.1:1/n2.bin")], defaultDirectory: "/tmp")
            let leases = try await other.claim(worker: "w", count: 2, lease: .seconds(60))
            let result = DownloadResult(
                path: "/tmp/n", bytes: 1, resumedFrom: 0, bytesTransferred: 1, finalURL: "", checksumHex: nil, isResumable: true)
            #expect(try await other.finish(leases[0], worker: "w", as: .completed(result)))
            #expect(try await other.finish(leases[1], worker: "w", as: .failed(DownloadError(.httpStatus, "404"), bytes: 0)))
            var seen: [FleetTaskEvent] = []
            while seen.count < 6, let event = try await iterator.next() { seen.append(event) }
            let ids = added.map(\.id)
            #expect(seen.contains(.changed(taskID: ids[0], state: "waiting", epoch: 0, worker: nil)))
            #expect(seen.contains(.changed(taskID: ids[1], state: "waiting", epoch: 0, worker: nil)))
            #expect(seen.contains(.changed(taskID: ids[0], state: "running", epoch: 1, worker: "w")))
            #expect(seen.contains(.changed(taskID: ids[1], state: "running", epoch: 1, worker: "w")))
            #expect(seen.contains(.changed(taskID: ids[0], state: "completed", epoch: 1, worker: "w")))
            #expect(seen.contains(.changed(taskID: ids[1], state: "failed", epoch: 1, worker: "w")))
            await other.close()
            await store.close()
        }
    }

    /// The ``TaskStoring`` protocol: a single `DownloadManager` keeps its tasks in PostgreSQL as it does in
    /// SQLite, and a new manager on the same store finds them.
    @Test func aDownloadManagerKeepsItsTasksInPostgreSQL() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            origin.serve("/m.bin", .resource(Resource(size: 300_000, seed: 41)))
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            let manager = try await DownloadManager(stateDirectory: scratch.file("state"), store: store)
            let id = try await manager.enqueue(url: origin.url("/m.bin"), destination: .file(scratch.file("m.bin")))
            #expect(await eventually { await manager.task(id)?.state == .completed })
            await manager.close()
            #expect(fileMatchesPattern(scratch.file("m.bin"), size: 300_000, seed: 41))
            let reopened = try await DownloadManager(stateDirectory: scratch.file("state"), store: store)
            let task = try #require(await reopened.task(id))
            #expect(task.state == .completed)
            #expect(task.bytesReceived == 300_000)
            #expect(task.path == scratch.file("m.bin"))
            try await reopened.remove(taskID: id)
            await reopened.close()
            #expect(try await store.loadTasks().isEmpty)
            await store.close()
        }
    }
}
