@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Glibc
import Testing
import TestOrigin

/// The fleet end to end: `downloadkit-fleet queue run --store postgres://…` worker processes on one queue in a
/// PostgreSQL server the test starts, downloading rate-limited files from the fault origin into one
/// shared directory. One worker is killed (SIGKILL) or paused past its lease (SIGSTOP) mid-transfer.
/// Nothing here is timed: the tests wait for states and then count bytes, requests and leases.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct FleetProcessTests {
    /// Three workers, 30 throttled downloads, one worker SIGKILLed while it holds tasks with durable bytes:
    /// every file arrives byte-identical, the killed worker's tasks are finished by the others from its
    /// bytes (their requests start past 0), and no task was ever leased to two workers at once.
    @Test func threeWorkersOneKilledEveryFileIntactAndItsTasksFinishedByOthersFromItsBytes() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            let size: Int64 = 600_000
            let count = 30
            // w1's transfers stop after 500 kB (past a checkpoint) until it is killed, so that it is killed
            // mid-transfer with durable bytes however late this test gets to look.
            let killed = LockedBox(false)
            defer { killed.mutate { $0 = true } }
            for index in 0..<count {
                origin.serve(
                    "/f\(index).bin",
                    Fleet.heldResource(
                        size: size, seed: UInt64(500 + index), bytesPerSecond: 200_000, holding: "w1", after: 500_000,
                        until: killed))
            }
            let shared = try ScratchDirectory()
            let logs = try ScratchDirectory()
            // A client of the store that watches the whole fleet's state changes (LISTEN/NOTIFY).
            let executable = try #require(Fleet.executable)
            let watchLog = logs.file("watch.log")
            let watcher = try ChildProcess(executable, ["queue", "--store", server.url, "watch"], outputPath: watchLog)
            defer { watcher.terminate() }
            #expect(await eventually { ((try? String(contentsOfFile: watchLog, encoding: .utf8)) ?? "").contains("\"listening\":true") })
            let add = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-d", shared.path] + (0..<count).map { origin.url("/f\($0).bin") },
                in: shared.path)
            #expect(add.status == 0, "\(add.output)")
            let store = try await openStore(server)
            #expect(try await store.fleetTasks().count == count)

            // 3 workers × 2 slots, but at most 5 tasks at once in the whole fleet.
            let options = ["--max-concurrent", "2", "--fleet-max-concurrent", "5", "--lease", "4", "--poll", "0.2"]
            let workers = try ["w1", "w2", "w3"].map {
                try Fleet.startWorker($0, store: server.url, logDirectory: logs.path, extra: options)
            }
            let victim = workers[0]
            // Kill w1 once one of its tasks has durable bytes (a resume info that records some) on disk.
            var durable: [String: Int64] = [:]
            let ready = try await eventually {
                durable = [:]
                for fleet in try await store.fleetTasks() where fleet.leaseOwner == "w1" && fleet.task.state == .running {
                    let files = try Fleet.workingFiles(fleet.task)
                    if let info = try? ResumeInfo.read(from: files.resumeInfo), info.bytesReceived > 0 {
                        durable[fleet.task.id] = info.bytesReceived
                    }
                }
                return !durable.isEmpty
            }
            #expect(ready, "w1 never held a task with durable bytes:\n\(victim.output)")
            victim.process.send(SIGKILL)
            _ = try await Fleet.waitForExit(victim, seconds: 60)
            killed.mutate { $0 = true }
            let held = try await store.fleetTasks().filter { $0.leaseOwner == "w1" && $0.task.state == .running }.map(\.task.id)
            #expect(!held.isEmpty)

            for worker in workers.dropFirst() {
                let status = try await Fleet.waitForExit(worker)
                #expect(status == 0, "\(worker.id) exited with \(String(describing: status)):\n\(worker.output)")
            }

            let tasks = try await store.fleetTasks()
            #expect(tasks.count == count)
            for fleet in tasks {
                #expect(fleet.task.state == .completed, "\(fleet.task.id): \(fleet.task.state) \(String(describing: fleet.task.error))")
                let path = try #require(fleet.task.path)
                let seed = UInt64(500 + Int(URL(string: fleet.task.originalURL)!.lastPathComponent.dropFirst().prefix { $0.isNumber })!)
                #expect(fileMatchesPattern(path, size: size, seed: seed), "\(path) differs")
            }
            #expect(!shared.contents.contains { $0.hasSuffix(".dkpart") || $0.hasSuffix(".dkresume") }, "\(shared.contents)")

            // The killed worker's tasks: finished by another worker, continuing from the bytes on disk.
            let history = try await store.leaseHistory()
            let byTask = Dictionary(grouping: history, by: \.taskID)
            for id in held {
                let last = try #require(byTask[id]?.max { $0.epoch < $1.epoch })
                #expect(last.worker != "w1")
                #expect(last.outcome == "completed")
                #expect(byTask[id]?.contains { $0.worker == "w1" && $0.outcome == "expired" } == true)
            }
            for (id, bytes) in durable {
                let task = try #require(tasks.first { $0.task.id == id }?.task)
                let path = try #require(URL(string: task.originalURL)?.path)
                let takeovers = origin.requests(path).filter {
                    $0.header("X-DownloadKit-Worker") != "w1" && Fleet.rangeStart($0) > 0
                }
                #expect(!takeovers.isEmpty, "\(path): no request past byte 0 from another worker (w1 had \(bytes) durable bytes)")
                #expect(takeovers.allSatisfy { Fleet.rangeStart($0) >= bytes })
            }
            // No task was ever leased to two workers at once, and every task ended under exactly one lease.
            #expect(Fleet.leasesNeverOverlap(history) == [])
            // The limits held: at most 2 live leases per worker, at most 5 in the fleet.
            #expect(Fleet.peakLiveLeases(history) <= 5)
            #expect(Fleet.peakLiveLeases(history) >= 2)
            for worker in ["w1", "w2", "w3"] {
                #expect(Fleet.peakLiveLeases(history.filter { $0.worker == worker }) <= 2, "\(worker)")
            }
            for (id, leases) in byTask {
                #expect(leases.filter { $0.outcome == "completed" }.count == 1, "\(id): \(leases)")
            }
            // The watcher saw every task's changes from every worker: waiting, running under each epoch, completed.
            let seen = ((try? String(contentsOfFile: watchLog, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }
            for fleet in tasks {
                let mine = seen.filter { $0["id"] as? String == fleet.task.id }
                #expect(mine.contains { $0["state"] as? String == "waiting" })
                #expect(mine.contains { $0["state"] as? String == "completed" })
                for lease in byTask[fleet.task.id] ?? [] {
                    #expect(mine.contains {
                        $0["state"] as? String == "running" && ($0["epoch"] as? Int).map(Int64.init) == lease.epoch
                            && $0["worker"] as? String == lease.worker
                    }, "\(fleet.task.id): epoch \(lease.epoch) of \(lease.worker) not seen")
                }
            }
            // Every request of the run came from a worker holding the task's lease at some point.
            for fleet in tasks {
                let path = try #require(URL(string: fleet.task.originalURL)?.path)
                let holders = Set((byTask[fleet.task.id] ?? []).map(\.worker))
                for request in origin.requests(path) {
                    #expect(holders.contains(request.header("X-DownloadKit-Worker") ?? "?"))
                }
            }
            await store.close()
        }
    }

    /// A worker paused (SIGSTOP) past its lease while another worker takes the task over, then resumed
    /// (SIGCONT): it writes nothing more — the partial and its resume info are exactly as it left them,
    /// it sends no further request — and the new holder finishes the file from those bytes.
    @Test func aWorkerPausedPastItsLeaseWritesNothingOnceAnotherHoldsTheTask() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            let size: Int64 = 3_000_000
            // a's transfer stops after 600 kB (past two checkpoints) until a is resumed below: the state looked
            // at stays put however late this test runs, and a has bytes waiting when it runs again.
            let release = LockedBox(false)
            defer { release.mutate { $0 = true } }
            origin.serve(
                "/big.bin",
                Fleet.heldResource(size: size, seed: 77, bytesPerSecond: 150_000, holding: "a", after: 600_000, until: release))
            let shared = try ScratchDirectory()
            let logs = try ScratchDirectory()
            let add = try await Fleet.run(
                ["queue", "--store", server.url, "add", "-o", shared.file("big.bin"), origin.url("/big.bin")], in: shared.path)
            #expect(add.status == 0, "\(add.output)")
            let store = try await openStore(server)
            let task = try #require(try await store.fleetTasks().first?.task)
            let files = try Fleet.workingFiles(task)

            let a = try Fleet.startWorker(
                "a", store: server.url, logDirectory: logs.path, extra: ["--max-concurrent", "1", "--lease", "3", "--poll", "0.2"])
            let started = try await eventually {
                guard try await store.fleetTask(task.id)?.leaseOwner == "a" else { return false }
                return ((try? ResumeInfo.read(from: files.resumeInfo))?.bytesReceived ?? 0) > 0
            }
            #expect(started, "a never got going:\n\(a.output)")
            // Stop a while its transfer has the partial open (not in the moment between two attempts, when a
            // late heartbeat on a busy machine made it start again).
            let stoppedWriting = await eventually {
                guard Fleet.holdsLock(pid: a.process.pid, on: files.partial) else { return false }
                a.process.send(SIGSTOP)
                _ = await eventually(seconds: 30) { Fleet.isStopped(a.process.pid) }
                if Fleet.holdsLock(pid: a.process.pid, on: files.partial) { return true }
                a.process.send(SIGCONT)
                return false
            }
            #expect(stoppedWriting, "a never held the partial's lock:\n\(a.output)")

            // b takes the task over once a's lease has run out; a's lock on the partial keeps b from writing.
            let b = try Fleet.startWorker(
                "b", store: server.url, logDirectory: logs.path, extra: ["--max-concurrent", "1", "--lease", "30", "--poll", "0.2"])
            let takenOver = try await eventually {
                let row = try await store.fleetTask(task.id)
                return row?.leaseOwner == "b" && row?.leaseEpoch == 2
            }
            #expect(takenOver, "b never took the task over:\n\(b.output)")
            #expect(Fleet.holdsLock(pid: a.process.pid, on: files.partial))
            b.process.send(SIGSTOP)  // so that every change to the files from here on can only be a's
            #expect(await eventually { Fleet.isStopped(b.process.pid) })

            let sizeBefore = Fleet.size(files.partial)
            let durableBefore = try ResumeInfo.read(from: files.resumeInfo).bytesReceived
            let requestsBefore = origin.requests("/big.bin").filter { $0.header("X-DownloadKit-Worker") == "a" }.count
            #expect(sizeBefore > 0)
            #expect(durableBefore > 0)

            release.mutate { $0 = true }
            a.process.send(SIGCONT)
            let gaveUp = await eventually {
                a.output.contains("lost the lease on \(task.id)") && !Fleet.holdsLock(pid: a.process.pid, on: files.partial)
            }
            #expect(gaveUp, "a did not give the task up:\n\(a.output)")
            #expect(Fleet.size(files.partial) == sizeBefore)
            #expect(try ResumeInfo.read(from: files.resumeInfo).bytesReceived == durableBefore)
            #expect(origin.requests("/big.bin").filter { $0.header("X-DownloadKit-Worker") == "a" }.count == requestsBefore)
            #expect(try await store.fleetTask(task.id)?.leaseOwner == "b")

            b.process.send(SIGCONT)
            for worker in [a, b] {
                let status = try await Fleet.waitForExit(worker)
                #expect(status == 0, "\(worker.id) exited with \(String(describing: status)):\n\(worker.output)")
            }
            #expect(fileMatchesPattern(shared.file("big.bin"), size: size, seed: 77))
            let row = try #require(try await store.fleetTask(task.id))
            #expect(row.task.state == .completed)
            // b continued from a's bytes.
            let fromB = origin.requests("/big.bin").filter { $0.header("X-DownloadKit-Worker") == "b" }
            #expect(!fromB.isEmpty)
            #expect(fromB.allSatisfy { Fleet.rangeStart($0) > 0 && Fleet.rangeStart($0) <= sizeBefore }, "\(fromB.map { $0.header("Range") ?? "-" })")
            let history = try await store.leaseHistory()
            #expect(history.map(\.worker) == ["a", "b"])
            #expect(history.map(\.outcome) == ["expired", "completed"])
            #expect(Fleet.leasesNeverOverlap(history) == [])
            await store.close()
        }
    }
}
