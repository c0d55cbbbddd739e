@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Glibc
import Testing
import TestOrigin

/// `downloadkit-fleet queue --store postgres://…`: add, list, run and their refusals, and a worker stopped
/// with SIGTERM giving its task back to the queue.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct FleetCLITests {
    /// Whether a raw wait status is a normal exit with `code`.
    static func exited(_ status: Int32?, _ code: Int32) -> Bool {
        guard let status else { return false }
        return status & 0x7f == 0 && (status >> 8) & 0xff == code
    }

    @Test func addListAndRefusals() async throws {
        try await withPostgres { server in
            let scratch = try ScratchDirectory()
            let add = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-d", scratch.path, "http://127.0.0.1:1/a.iso", "http://127.0.0.1:1/b.iso"],
                in: scratch.path)
            #expect(add.status == 0, "\(add.output)")
            let ids = add.output.split(separator: "\n").map(String.init).filter { UUID(uuidString: $0) != nil }
            #expect(ids.count == 2)
            let again = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-d", scratch.path, "http://127.0.0.1:1/a.iso"], in: scratch.path)
            #expect(again.status == 0)
            #expect(again.output.contains("already in the queue as \(ids[0])"))

            let list = try await Fleet.run(["queue", "--store", server.url, "list", "--json"], in: scratch.path)
            #expect(list.status == 0, "\(list.output)")
            let objects = try #require(
                (try? JSONSerialization.jsonObject(with: Data(list.output.utf8))) as? [[String: Any]], "\(list.output)")
            #expect(objects.compactMap { $0["id"] as? String } == ids)
            #expect(objects.allSatisfy { $0["state"] as? String == "waiting" && ($0["leaseEpoch"] as? Int) == 0 })
            let table = try await Fleet.run(["queue", "--store", server.url, "list"], in: scratch.path)
            #expect(table.output.contains("WORKER"))
            #expect(table.output.contains("http://127.0.0.1:1/b.iso"))

            let remove = try await Fleet.run(["queue", "--store", server.url, "remove", "--all"], in: scratch.path)
            #expect(remove.status != 0)
            #expect(remove.output.contains("SQLite queue only"))
            let badURL = try await Fleet.run(["queue", "--store", "mysql://x@y/z", "list"], in: scratch.path)
            #expect(badURL.status != 0)
            #expect(badURL.output.contains("--store must be postgres://"))
            let notHTTP = try await Fleet.run(["queue", "--store", server.url, "add", "ftp://127.0.0.1/x"], in: scratch.path)
            #expect(notHTTP.status != 0)
            #expect(notHTTP.output.contains("not an http(s) URL"))
            // A server that is not there: a clear error naming it (no password), not a hang.
            let closedPort = try FreePort.allocate()[0]
            let unreachable = try await Fleet.run(
                ["queue", "--store", "postgres://nobody:secret@127.0.0.1:\(closedPort)/none?sslmode=disable", "list"],
                in: scratch.path)
            #expect(unreachable.status != 0)
            #expect(unreachable.output.contains("cannot open the queue at postgres://nobody@127.0.0.1:\(closedPort)/none"))
            #expect(!unreachable.output.contains("secret"))
        }
    }

    /// `queue pause` on a running task: its worker finds its lease gone at the next heartbeat and stops
    /// writing (bytes kept); after `queue resume` another worker continues from those bytes.
    @Test func pausingARunningTaskStopsItsWorkerAndResumingContinuesFromItsBytes() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            let size: Int64 = 2_000_000
            // The first worker's transfer stops after 500 kB until the end: the pause lands mid-transfer however late.
            let release = LockedBox(false)
            defer { release.mutate { $0 = true } }
            origin.serve(
                "/p.bin",
                Fleet.heldResource(size: size, seed: 35, bytesPerSecond: 250_000, holding: "first", after: 500_000, until: release))
            let shared = try ScratchDirectory()
            let logs = try ScratchDirectory()
            let add = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-o", shared.file("p.bin"), origin.url("/p.bin")], in: shared.path)
            #expect(add.status == 0, "\(add.output)")
            let store = try await openStore(server)
            let task = try #require(try await store.fleetTasks().first?.task)
            let files = try Fleet.workingFiles(task)
            let first = try Fleet.startWorker("first", store: server.url, logDirectory: logs.path, extra: ["--lease", "2", "--poll", "0.2"])
            #expect(await eventually { Fleet.size(files.partial) > 200_000 }, "\(first.output)")

            let pause = try await Fleet.run(["queue", "--store", server.url, "pause", String(task.id.prefix(8))], in: shared.path)
            #expect(pause.status == 0, "\(pause.output)")
            // Nothing waits or runs any more: the worker stops writing and exits.
            let status = try await Fleet.waitForExit(first)
            #expect(Self.exited(status, 0), "\(first.output)")
            #expect(first.output.contains("lost the lease on \(task.id)"))
            #expect(try await store.fleetTask(task.id)?.task.state == .paused)
            let kept = Fleet.size(files.partial)
            #expect(kept > 0)

            let resume = try await Fleet.run(["queue", "--store", server.url, "resume", "--all"], in: shared.path)
            #expect(resume.status == 0, "\(resume.output)")
            #expect(try await store.fleetTask(task.id)?.task.state == .waiting)
            let second = try Fleet.startWorker("second", store: server.url, logDirectory: logs.path, extra: ["--poll", "0.2"])
            let secondStatus = try await Fleet.waitForExit(second)
            #expect(Self.exited(secondStatus, 0), "\(second.output)")
            #expect(fileMatchesPattern(shared.file("p.bin"), size: size, seed: 35))
            let fromSecond = origin.requests("/p.bin").filter { $0.header("X-DownloadKit-Worker") == "second" }
            #expect(fromSecond.count == 1)
            #expect(fromSecond.allSatisfy { Fleet.rangeStart($0) > 0 && Fleet.rangeStart($0) <= kept })
            let history = try await store.leaseHistory()
            #expect(history.map(\.outcome) == ["paused", "completed"])
            #expect(Fleet.leasesNeverOverlap(history) == [])
            await store.close()
        }
    }

    /// `--user` reaches the origin of a task the worker claims (bound as it is claimed), after a 401.
    @Test func credentialsFromUserGoToTheClaimedTasksOrigin() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            origin.serve(
                "/secret.bin",
                .resource(
                    Resource(
                        size: 100_000, seed: 37,
                        faults: [.statusForRequests(status: 401, first: 1, headers: [("WWW-Authenticate", "Basic realm=\"fleet\"")])])))
            let shared = try ScratchDirectory()
            let logs = try ScratchDirectory()
            let add = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-o", shared.file("secret.bin"), origin.url("/secret.bin")], in: shared.path)
            #expect(add.status == 0, "\(add.output)")
            let worker = try Fleet.startWorker(
                "auth", store: server.url, logDirectory: logs.path, extra: ["--poll", "0.2", "--user", "fleet:s3cret"])
            let status = try await Fleet.waitForExit(worker)
            #expect(Self.exited(status, 0), "\(worker.output)")
            #expect(fileMatchesPattern(shared.file("secret.bin"), size: 100_000, seed: 37))
            let authorized = origin.requests("/secret.bin").compactMap { $0.header("Authorization") }
            #expect(authorized.contains("Basic " + Data("fleet:s3cret".utf8).base64EncodedString()))
        }
    }

    /// SIGTERM: the worker checkpoints, gives its task back (waiting, its bytes recorded) and exits 143;
    /// the next worker takes it at once and continues from those bytes.
    @Test func aWorkerStoppedWithSIGTERMGivesItsTaskBackForTheNextToContinue() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            let size: Int64 = 2_000_000
            // The first worker's transfer stops after 500 kB until the end: SIGTERM lands mid-transfer however late.
            let release = LockedBox(false)
            defer { release.mutate { $0 = true } }
            origin.serve(
                "/t.bin",
                Fleet.heldResource(size: size, seed: 33, bytesPerSecond: 250_000, holding: "first", after: 500_000, until: release))
            let shared = try ScratchDirectory()
            let logs = try ScratchDirectory()
            let add = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-o", shared.file("t.bin"), origin.url("/t.bin")], in: shared.path)
            #expect(add.status == 0, "\(add.output)")
            let store = try await openStore(server)
            let task = try #require(try await store.fleetTasks().first?.task)
            let files = try Fleet.workingFiles(task)
            let first = try Fleet.startWorker("first", store: server.url, logDirectory: logs.path, extra: ["--poll", "0.2"])
            #expect(await eventually { Fleet.size(files.partial) > 200_000 }, "\(first.output)")
            first.process.send(SIGTERM)
            let status = try await Fleet.waitForExit(first)
            #expect(Self.exited(status, 143), "\(String(describing: status)):\n\(first.output)")
            #expect(first.output.contains("released \(task.id)"))
            let row = try #require(try await store.fleetTask(task.id))
            #expect(row.task.state == .waiting)
            #expect(row.task.bytesReceived > 0)
            let kept = Fleet.size(files.partial)
            #expect(kept > 0)

            // --on-complete runs for the file before the worker exits (chmod: the engine leaves it 0644).
            let second = try Fleet.startWorker(
                "second", store: server.url, logDirectory: logs.path, extra: ["--poll", "0.2", "--on-complete", "chmod 600"])
            let secondStatus = try await Fleet.waitForExit(second)
            #expect(Self.exited(secondStatus, 0), "\(second.output)")
            #expect(fileMatchesPattern(shared.file("t.bin"), size: size, seed: 33))
            let mode = try FileManager.default.attributesOfItem(atPath: shared.file("t.bin"))[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let fromSecond = origin.requests("/t.bin").filter { $0.header("X-DownloadKit-Worker") == "second" }
            #expect(fromSecond.count == 1)
            #expect(fromSecond.allSatisfy { Fleet.rangeStart($0) > 0 && Fleet.rangeStart($0) <= kept })
            #expect(try await store.leaseHistory().map(\.outcome) == ["released", "completed"])
            await store.close()
        }
    }
}
