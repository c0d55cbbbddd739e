import DownloadKit
import Foundation
import Testing
import TestOrigin

/// `downloadkit queue` end to end: the built executable against the fault-injecting origin, with the
/// state directory and the downloads in scratch directories. Kills always land mid-download: the origin
/// stalls every response after a few MiB, and the tests wait for those bytes to be on disk.
@Suite(.timeLimit(.minutes(3)))
struct QueueCLITests {
    /// A state directory and a download directory.
    struct Queue {
        let state: ScratchDirectory
        let downloads: ScratchDirectory

        init() throws {
            state = try ScratchDirectory()
            downloads = try ScratchDirectory()
        }
    }

    func queue(_ arguments: [String], _ queue: Queue, timeout: Double = 90) async throws -> CLITests.Run {
        let executable = try #require(CLITests.executable, "downloadkit executable not found next to the tests; run swift build --build-tests")
        let all = ["queue", "--state", queue.state.path] + arguments
        let downloads = queue.downloads
        let result = try await CLITests.runOffPool(executable, all, in: downloads, timeout: timeout)
        if result.exitCode == -1 { Issue.record("downloadkit \(all) did not finish within \(timeout) s") }
        return result
    }

    /// Starts `queue run` as a child process (output to a log next to the download directory).
    func startRun(_ arguments: [String], _ queue: Queue) throws -> (ChildProcess, String) {
        let executable = try #require(CLITests.executable)
        let log = queue.downloads.path + "/../queue-run-\(UUID().uuidString).log"
        let child = try ChildProcess(executable, ["queue", "--state", queue.state.path, "run"] + arguments, outputPath: log)
        return (child, log)
    }

    /// The task ids a command printed (stdout and stderr are captured together; ids are whole lines).
    static func ids(_ output: String) -> [String] {
        output.split(separator: "\n").map(String.init).filter { UUID(uuidString: $0) != nil }
    }

    /// `queue list --json`, decoded.
    func list(_ queue: Queue) async throws -> [[String: Any]] {
        let result = try await self.queue(["list", "--json"], queue)
        #expect(result.exitCode == 0, "\(result.output)")
        return try #require((try? JSONSerialization.jsonObject(with: Data(result.output.utf8))) as? [[String: Any]], "\(result.output)")
    }

    static func byID(_ tasks: [[String: Any]]) -> [String: [String: Any]] {
        Dictionary(uniqueKeysWithValues: tasks.compactMap { task in (task["id"] as? String).map { ($0, task) } })
    }

    /// Polls (without blocking the pool) until every file has at least `bytes` bytes.
    func waitForBytes(_ paths: [String], atLeast bytes: Int64, seconds: Double = 60) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let sizes = paths.map { (try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int64) ?? 0 }
            if sizes.allSatisfy({ $0 >= bytes }) { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// After a SIGKILL and a successful rerun only the files are left, apart from the library's known
    /// leftover: a kill that lands while a checkpoint is written leaves `NAME.dkresume.tmp-<pid>`
    /// (ResumeInfo.swift writes it, then renames it; nothing removes a dead process's temp file).
    static func expectOnly(_ names: [String], in directory: ScratchDirectory) {
        // Nothing else, not even a plist temp file a kill mid-checkpoint left behind (the engine
        // removes those of dead processes).
        #expect(directory.contents == names)
    }

    static func size(_ path: String) -> Int64 {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int64) ?? 0
    }

    // MARK: -

    @Test func addThenRunDownloadsEveryFileByteIdentical() async throws {
        let origin = try FaultOrigin()
        let names = (0..<4).map { "q\($0).bin" }
        for (i, name) in names.enumerated() {
            origin.serve("/" + name, .resource(Resource(size: Int64(1 << 20) + Int64(i) * 77_777, seed: UInt64(60 + i))))
        }
        let q = try Queue()
        let added = try await queue(["add"] + names.map { origin.url("/" + $0) } + ["-d", q.downloads.path, "--group", "g1"], q)
        #expect(added.exitCode == 0, "\(added.output)")
        let ids = Self.ids(added.output)
        #expect(ids.count == 4 && Set(ids).count == 4, "\(added.output)")
        #expect(origin.requests().isEmpty, "add only records tasks")

        let waiting = try await list(q)
        #expect(waiting.map { $0["state"] as? String } == Array(repeating: "waiting", count: 4))
        #expect(waiting.allSatisfy { $0["group"] as? String == "g1" })

        let run = try await queue(["run", "--max-concurrent", "2", "--progress", "json", "--on-complete", "echo completed:"], q)
        #expect(run.exitCode == 0, "\(run.output)")
        let events = run.output.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
        let finished = events.filter { $0["event"] as? String == "finished" }.compactMap { $0["path"] as? String }
        #expect(finished.sorted() == names.map { q.downloads.file($0) }, "\(run.output)")
        for name in names { #expect(run.output.contains("completed: " + q.downloads.file(name)), "\(run.output)") }
        #expect(q.downloads.contents == names)
        for (i, name) in names.enumerated() {
            #expect(fileMatchesPattern(q.downloads.file(name), size: Int64(1 << 20) + Int64(i) * 77_777, seed: UInt64(60 + i)))
        }
        let done = Self.byID(try await list(q))
        for (i, id) in ids.enumerated() {
            #expect(done[id]?["state"] as? String == "completed")
            #expect(done[id]?["path"] as? String == q.downloads.file(names[i]))
            #expect(done[id]?["bytesReceived"] as? Int == (1 << 20) + i * 77_777)
        }
        let text = try await queue(["list"], q)
        #expect(text.output.contains("ID") && text.output.contains("DESTINATION"), "\(text.output)")
        for id in ids { #expect(text.output.contains(id)) }

        // Nothing left to do: a second run returns at once without a request.
        let requests = origin.requests().count
        let again = try await queue(["run", "--progress", "none"], q)
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(origin.requests().count == requests)
    }

    @Test func addingTheSameURLOrFileIDTwiceGivesTheSameTask() async throws {
        let origin = try FaultOrigin()
        origin.serve("/d.bin", .resource(Resource(size: 1000, seed: 70)))
        let q = try Queue()
        let first = try await queue(["add", origin.url("/d.bin"), "-o", q.downloads.file("d.bin")], q)
        let second = try await queue(["add", origin.url("/d.bin"), "-d", q.downloads.path], q)
        #expect(first.exitCode == 0 && second.exitCode == 0, "\(first.output) \(second.output)")
        let id = try #require(Self.ids(first.output).first)
        #expect(Self.ids(second.output) == [id])
        #expect(second.output.contains("already in the queue as \(id)"), "\(second.output)")

        let byFileID = try await queue(["add", origin.url("/other"), "--file-id", "movie-1", "-d", q.downloads.path], q)
        let movie = try #require(Self.ids(byFileID.output).first, "\(byFileID.output)")
        let sameFileID = try await queue(["add", origin.url("/other?sig=2"), "--file-id", "movie-1"], q)
        #expect(Self.ids(sameFileID.output) == [movie], "\(sameFileID.output)")
        #expect(movie != id)
        #expect(try await list(q).count == 2)

        let bad = try await queue(["add", "ftp://example.com/x"], q)
        #expect(bad.exitCode == 64, "\(bad.output)")
    }

    /// The PostgreSQL queue is `downloadkit-fleet`'s (Fleet/): this `downloadkit` links no PostgreSQL client,
    /// so `--store` is refused for every queue command with a usage error that says where the fleet queue is,
    /// and no state directory or task is made.
    @Test func theFleetStoreIsRefusedNamingDownloadkitFleet() async throws {
        let q = try Queue()
        let store = "postgres://fleet@127.0.0.1:1/queue?sslmode=disable"
        for command in [["add", "http://127.0.0.1:1/a.bin"], ["list"], ["run"], ["pause", "--all"], ["resume", "--all"], ["remove", "--all"], ["watch"]] {
            let result = try await queue(["--store", store] + command, q)
            #expect(result.exitCode == 64, "\(command): \(result.output)")
            #expect(result.output.contains("downloadkit-fleet"), "\(command): \(result.output)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: q.state.path).isEmpty)
    }

    @Test func sigkilledRunThenRunAgainCompletesEveryTaskFromItsBytesOnDisk() async throws {
        let size: Int64 = 12 << 20
        let stall: Int64 = 3 << 20
        let origin = try FaultOrigin()
        let names = ["k0.bin", "k1.bin", "k2.bin"]
        for (i, name) in names.enumerated() {
            let stalled = Resource(size: size, seed: UInt64(80 + i), faults: [.stallAfter(bytes: stall, seconds: 120, times: 100)])
            origin.serve("/" + name, .resource(stalled))
        }
        let q = try Queue()
        var ids: [String] = []
        for name in names {
            let added = try await queue(["add", origin.url("/" + name), "-o", q.downloads.file(name)], q)
            ids += Self.ids(added.output)
        }
        #expect(ids.count == 3)

        let (child, log) = try startRun(["--max-concurrent", "3", "--progress", "json"], q)
        defer { try? FileManager.default.removeItem(atPath: log) }
        let parts = names.map { q.downloads.file($0 + ".dkpart") }
        let stalledAll = try await waitForBytes(parts, atLeast: stall)
        kill(child.pid, SIGKILL)
        let exited = try await offloaded { child.waitForExit(timeout: 10) }
        #expect(exited.map { WaitStatus($0).signal } == SIGKILL)
        #expect(stalledAll, "every task reached the stall before the kill: \(parts.map(Self.size))")
        let killedAt = parts.map(Self.size)

        // The killed run's tasks are still in the line, their bytes taken from the partial files.
        let restored = Self.byID(try await list(q))
        for (i, id) in ids.enumerated() {
            #expect(restored[id]?["state"] as? String == "waiting", "\(restored[id] ?? [:])")
            #expect(restored[id]?["bytesReceived"] as? Int == Int(killedAt[i]))
        }

        let before = names.map { origin.requests("/" + $0).count }
        for (i, name) in names.enumerated() { origin.serve("/" + name, .resource(Resource(size: size, seed: UInt64(80 + i)))) }
        let rerun = try await queue(["run", "--progress", "none"], q)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        for (i, name) in names.enumerated() {
            #expect(fileMatchesPattern(q.downloads.file(name), size: size, seed: UInt64(80 + i)))
            let ranges = origin.requests("/" + name).dropFirst(before[i]).map { $0.header("Range") }
            #expect(!ranges.isEmpty)
            #expect(ranges.allSatisfy { $0 != nil && $0 != "bytes=0-" }, "\(name) was not fetched from the start again: \(ranges)")
            #expect(ranges.first == "bytes=\(killedAt[i])-", "\(name) resumed from its \(killedAt[i]) bytes on disk: \(ranges)")
        }
        Self.expectOnly(names, in: q.downloads)
        let final = Self.byID(try await list(q))
        #expect(ids.allSatisfy { final[$0]?["state"] as? String == "completed" })
    }

    @Test(arguments: [(SIGINT, Int32(130)), (SIGTERM, Int32(143))])
    func signalCheckpointsExitsWithItsStatusAndTheTasksResume(signal: Int32, expected: Int32) async throws {
        let size: Int64 = 8 << 20
        let origin = try FaultOrigin()
        let names = ["i0.bin", "i1.bin"]
        for (i, name) in names.enumerated() {
            let stalled = Resource(size: size, seed: UInt64(90 + i), faults: [.stallAfter(bytes: 2 << 20, seconds: 120, times: 100)])
            origin.serve("/" + name, .resource(stalled))
        }
        let q = try Queue()
        let added = try await queue(["add"] + names.map { origin.url("/" + $0) } + ["-d", q.downloads.path], q)
        let ids = Self.ids(added.output)
        #expect(ids.count == 2, "\(added.output)")

        let (child, log) = try startRun(["--progress", "none"], q)
        defer { try? FileManager.default.removeItem(atPath: log) }
        // Directory destinations keep their partial data as dk-<md5 of URL>.dkpart until the name is known.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let parts = q.downloads.contents.filter { $0.hasSuffix(".dkpart") }
            if parts.count == 2 && parts.allSatisfy({ (q.downloads.size($0) ?? 0) >= 1 << 20 }) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        // While the run works, the other commands refuse (one manager per state directory).
        let busy = try await queue(["list"], q)
        #expect(busy.exitCode == 1 && busy.output.contains("in use"), "\(busy.output)")

        kill(child.pid, signal)
        let exited = try await offloaded { child.waitForExit(timeout: 20) }
        let status = try #require(exited, "queue run did not exit promptly after signal \(signal)")
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(WaitStatus(status).exitCode == expected, "\(output)")
        #expect(output.contains("error: interrupted"), "\(output)")

        let stopped = Self.byID(try await list(q))
        var offsets: [String: Int] = [:]
        for (i, id) in ids.enumerated() {
            #expect(stopped[id]?["state"] as? String == "waiting", "a signal is not a user's pause: \(stopped[id] ?? [:])")
            let bytes = stopped[id]?["bytesReceived"] as? Int ?? 0
            #expect(bytes >= 1 << 20)
            offsets["/" + names[i]] = bytes
        }
        #expect(q.downloads.contents.filter { $0.hasSuffix(".dkresume") }.count == 2, "\(q.downloads.contents)")

        let before = names.map { origin.requests("/" + $0).count }
        for (i, name) in names.enumerated() { origin.serve("/" + name, .resource(Resource(size: size, seed: UInt64(90 + i)))) }
        let rerun = try await queue(["run", "--progress", "none"], q)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(q.downloads.contents == names)
        for (i, name) in names.enumerated() {
            #expect(fileMatchesPattern(q.downloads.file(name), size: size, seed: UInt64(90 + i)))
            let ranges = origin.requests("/" + name).dropFirst(before[i]).map { $0.header("Range") }
            #expect(ranges.first == "bytes=\(offsets["/" + name] ?? -1)-", "\(name): \(ranges)")
        }
    }

    @Test func pausedTasksWaitRemovedTasksGoAndListShowsBoth() async throws {
        let origin = try FaultOrigin()
        for (i, name) in ["a", "b", "c"].enumerated() {
            origin.serve("/\(name).bin", .resource(Resource(size: 200_000, seed: UInt64(100 + i))))
        }
        let q = try Queue()
        var ids: [String: String] = [:]
        for (priority, name) in [("5", "a"), ("0", "b"), ("-5", "c")] {
            let added = try await queue(["add", origin.url("/\(name).bin"), "-d", q.downloads.path, "--priority", priority], q)
            let id = try #require(Self.ids(added.output).first, "\(added.output)")
            ids[name] = id
        }
        let a = try #require(ids["a"]), b = try #require(ids["b"]), c = try #require(ids["c"])

        #expect(try await queue(["pause", a], q).exitCode == 0)
        // A unique prefix is enough.
        #expect(try await queue(["remove", String(b.prefix(13))], q).exitCode == 0)
        let unknown = try await queue(["pause", "ffffffff-0000"], q)
        #expect(unknown.exitCode == 1 && unknown.output.contains("error: no task"), "\(unknown.output)")
        #expect(try await queue(["pause"], q).exitCode == 64)

        let listed = Self.byID(try await list(q))
        #expect(listed.keys.sorted() == [a, c].sorted())
        #expect(listed[a]?["state"] as? String == "paused")
        #expect(listed[a]?["priority"] as? Int == 5)
        #expect(listed[c]?["state"] as? String == "waiting")
        let text = try await queue(["list"], q)
        #expect(text.output.contains("paused") && !text.output.contains(b), "\(text.output)")

        let run = try await queue(["run", "--progress", "none"], q)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(q.downloads.contents == ["c.bin"])
        #expect(origin.requests("/a.bin").isEmpty && origin.requests("/b.bin").isEmpty)

        let idle = try await queue(["run", "--progress", "none"], q)
        #expect(idle.exitCode == 0 && idle.output.contains("1 paused"), "\(idle.output)")

        let withPaused = try await queue(["run", "--start-paused-tasks", "--progress", "none"], q)
        #expect(withPaused.exitCode == 0, "\(withPaused.output)")
        #expect(fileMatchesPattern(q.downloads.file("a.bin"), size: 200_000, seed: 100))
        #expect(fileMatchesPattern(q.downloads.file("c.bin"), size: 200_000, seed: 102))

        #expect(try await queue(["remove", "--all", "--delete-file"], q).exitCode == 0)
        #expect(try await list(q).isEmpty)
        #expect(q.downloads.contents.isEmpty)
    }

    @Test func aFailingTaskMakesRunExit3WhileTheOthersComplete() async throws {
        let origin = try FaultOrigin()
        origin.serve("/ok0.bin", .resource(Resource(size: 500_000, seed: 110)))
        origin.serve("/ok1.bin", .resource(Resource(size: 700_000, seed: 111)))
        let q = try Queue()
        let added = try await queue(
            ["add", origin.url("/ok0.bin"), origin.url("/missing.bin"), origin.url("/ok1.bin"), "-d", q.downloads.path], q)
        let ids = Self.ids(added.output)
        #expect(ids.count == 3, "\(added.output)")

        let run = try await queue(["run", "--max-concurrent", "1", "--progress", "none"], q)
        #expect(run.exitCode == 3, "\(run.output)")
        #expect(run.output.contains("error:") && run.output.contains("404"), "\(run.output)")
        #expect(fileMatchesPattern(q.downloads.file("ok0.bin"), size: 500_000, seed: 110))
        #expect(fileMatchesPattern(q.downloads.file("ok1.bin"), size: 700_000, seed: 111))
        #expect(q.downloads.contents == ["ok0.bin", "ok1.bin"])

        let failed = Self.byID(try await list(q))[ids[1]]
        #expect(failed?["state"] as? String == "failed")
        let error = failed?["error"] as? [String: Any]
        #expect(error?["code"] as? String == "httpStatus")
        // The typed fields, and the exit status `run` gives this error, from the stored error (issue #46).
        #expect(error?["category"] as? String == "httpStatus" && error?["httpStatus"] as? Int == 404, "\(String(describing: error))")
        #expect(error?["transient"] as? Bool == false && error?["exitStatus"] as? Int == 3, "\(String(describing: error))")

        // A failed task stays failed until resumed; then the next run fetches it.
        origin.serve("/missing.bin", .resource(Resource(size: 300_000, seed: 112)))
        #expect(try await queue(["resume", ids[1]], q).exitCode == 0)
        let retry = try await queue(["run", "--progress", "none"], q)
        #expect(retry.exitCode == 0, "\(retry.output)")
        #expect(fileMatchesPattern(q.downloads.file("missing.bin"), size: 300_000, seed: 112))
    }
}
