import DownloadKit
import Foundation
import Testing
import TestOrigin

/// The `downloadkit` executable end to end against the fault-injecting origin (issue #6):
/// downloads, interruptions by signal and SIGKILL then rerun, exit statuses and `error:` lines.
@Suite(.timeLimit(.minutes(3)))
struct CLITests {
    /// The built executable next to the test bundle (`swift build --build-tests` builds both).
    static let executable: String? = builtExecutable(named: "downloadkit")

    struct Run {
        var exitCode: Int32
        var signalled: Bool
        var output: String
    }

    /// Runs the CLI to completion (bounded by `timeout`) off the cooperative pool.
    func run(_ arguments: [String], in dir: ScratchDirectory, timeout: Double = 60) async throws -> Run {
        let executable = try #require(Self.executable, "downloadkit executable not found next to the tests; run swift build --build-tests")
        let result = try await Self.runOffPool(executable, arguments, in: dir, timeout: timeout)
        if result.exitCode == -1 { Issue.record("downloadkit \(arguments) did not finish within \(timeout) s") }
        return result
    }

    /// `runBlocking` on a thread of its own: the child's whole run would otherwise hold one of the cooperative
    /// pool's two threads (docs/TESTING.md).
    static func runOffPool(_ executable: String, _ arguments: [String], in dir: ScratchDirectory, timeout: Double) async throws -> Run {
        try await offloaded { try runBlocking(executable, arguments, in: dir, timeout: timeout) }
    }

    /// Runs the CLI to completion (bounded by `timeout`), capturing stdout and stderr together. Blocks the
    /// calling thread: from a test, call `runOffPool` (or `run`).
    static func runBlocking(_ executable: String, _ arguments: [String], in dir: ScratchDirectory, timeout: Double) throws -> Run {
        let log = dir.path + "/../" + UUID().uuidString + ".log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess(executable, arguments, outputPath: log)
        guard let status = child.waitForExit(timeout: timeout) else {
            child.terminate(grace: 1)
            return Run(exitCode: -1, signalled: true, output: "")
        }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return Run(exitCode: WaitStatus(status).exitCode, signalled: WaitStatus(status).signal != nil, output: output)
    }

    @Test func plainDownloadSucceedsAndLeavesOnlyTheFile() async throws {
        let origin = try FaultOrigin()
        origin.serve("/a.bin", .resource(Resource(size: 2 << 20, seed: 31)))
        let dir = try ScratchDirectory()
        let result = try await run(["get", origin.url("/a.bin"), "-o", dir.file("a.bin"), "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(fileMatchesPattern(dir.file("a.bin"), size: 2 << 20, seed: 31))
        #expect(dir.contents == ["a.bin"])
    }

    @Test func jsonProgressLinesAreParseable() async throws {
        let origin = try FaultOrigin()
        // One reset after 1 MiB: the stream carries a retrying state with its delay as a number of seconds.
        origin.serve(
            "/j.bin",
            .resource(Resource(size: 4 << 20, seed: 32, bytesPerSecond: 16 << 20, faults: [.resetAfter(bytes: 1 << 20, times: 1)])))
        let dir = try ScratchDirectory()
        let result = try await run(["get", origin.url("/j.bin"), "-d", dir.path, "--progress", "json"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        let objects = result.output.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
        let events = objects.compactMap { $0["event"] as? String }
        #expect(events.contains("progress"))
        #expect(events.last == "finished")
        let finished = try #require(objects.last)
        #expect(finished["bytes"] as? Int == 4 << 20)
        #expect(finished["path"] as? String == dir.file("j.bin"))
        let progress = objects.filter { $0["event"] as? String == "progress" }
        #expect(progress.allSatisfy { $0["total"] as? Int == 4 << 20 })
        let retrying = try #require(objects.first { $0["reason"] as? String == "retrying" }, "\(result.output)")
        #expect(retrying["delay"] is Double)
        #expect(retrying["attempt"] as? Int == 1)
    }

    @Test func sigkillAtRandomMomentsThenRerunEndsByteIdentical() async throws {
        // 96 MiB at 8 MiB/s, and every response of the killed trials stalls after 6 MiB: no trial can
        // finish, however late a loaded machine lets this test act (once, with a starved cooperative pool,
        // a trial finished the file before its kill and the next one rightly started over). The final run
        // is served unthrottled.
        let size: Int64 = 96 << 20
        let origin = try FaultOrigin()
        origin.serve(
            "/k.bin",
            .resource(Resource(size: size, seed: 33, bytesPerSecond: 8 << 20, faults: [.stallAfter(bytes: 6 << 20, seconds: 120, times: 100)])))
        let dir = try ScratchDirectory()
        let executable = try #require(Self.executable)
        let arguments = ["get", origin.url("/k.bin"), "-o", dir.file("k.bin"), "--progress", "none"]
        var killedAt: [Int64] = []
        for trial in 0..<3 {
            let child = try ChildProcess(executable, arguments, outputPath: dir.path + "/../kill-\(trial).log")
            // Let it write a random number of bytes past where the last trial stopped (less than the 6 MiB
            // a response carries before it stalls), then kill it without warning while bytes flow. The wait
            // polls on a thread of its own, not on the cooperative pool, which other suites may keep busy.
            let target = (killedAt.last ?? 0) + Int64.random(in: (256 << 10)...(3 << 20))
            _ = try await offloaded {
                for _ in 0..<3000 where (dir.size("k.bin.dkpart") ?? 0) < target { usleep(10_000) }
            }
            kill(child.pid, SIGKILL)
            _ = try await offloaded { child.waitForExit(timeout: 10) }
            killedAt.append(dir.size("k.bin.dkpart") ?? 0)
            try? FileManager.default.removeItem(atPath: dir.path + "/../kill-\(trial).log")
        }
        origin.serve("/k.bin", .resource(Resource(size: size, seed: 33)))
        let final = try await run(arguments, in: dir)
        #expect(final.exitCode == 0, "\(final.output)")
        #expect(fileMatchesPattern(dir.file("k.bin"), size: size, seed: 33))
        #expect(dir.contents == ["k.bin"])
        // Once bytes were on disk, every rerun asked for the rest from exactly the length on disk
        // (same boot: the page cache survived the kill), never the whole file again.
        let ranges = origin.requests("/k.bin").map { $0.header("Range") }
        #expect(ranges.first == .some(nil))
        let firstResume = ranges.firstIndex { $0 != nil } ?? ranges.count
        #expect(ranges[firstResume...].allSatisfy { $0 != nil }, "ranges: \(ranges), killed at \(killedAt)")
        let starts = ranges.compactMap { $0.flatMap { Int64($0.dropFirst(6).dropLast()) } }
        #expect(starts == starts.sorted(), "offsets only move forward: \(starts)")
        for killed in killedAt where killed > 0 {
            #expect(starts.contains(killed), "the run after a kill at \(killed) bytes resumed there: \(starts)")
        }
    }

    /// `get --connections 2` over an origin whose every response head waits 400 ms (a stand-in for a round
    /// trip, six times a paced 4 MiB body's 62 ms, so that a loaded machine's bodies, slowed up to fourfold,
    /// still leave it above a tenth): the segment connections send range requests ahead of the current response's end,
    /// and with `--no-pipelining` they do not. The file is right both ways.
    @Test func segmentConnectionsSendRangeRequestsAheadUnlessToldNotTo() async throws {
        let size: Int64 = 32 << 20
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 38, bytesPerSecond: 64 << 20, faults: [.delayHead(seconds: 0.4)])
        origin.serve("/far.bin", .resource(resource))
        origin.serve("/far-again.bin", .resource(resource))
        let dir = try ScratchDirectory()
        for (path, flags) in [("/far.bin", [String]()), ("/far-again.bin", ["--no-pipelining"])] {
            let result = try await run(
                ["get", origin.url(path), "-o", dir.file(path), "--connections", "2", "--progress", "none"] + flags, in: dir)
            #expect(result.exitCode == 0, "\(result.output)")
            #expect(fileMatchesPattern(dir.file(path), size: size, seed: 38), "\(path)")
        }
        #expect(origin.requests("/far.bin").contains { $0.nextArrivedBeforeTheEnd })
        #expect(!origin.requests("/far-again.bin").contains { $0.nextArrivedBeforeTheEnd }, "--no-pipelining")
    }

    @Test func segmentedDownloadKilledWithSIGKILLResumesEverySegment() async throws {
        let size: Int64 = 32 << 20
        let origin = try FaultOrigin()
        // Every response stalls after 2 MiB: the kill always lands mid-download, however slowly this
        // test is scheduled.
        let stalled = Resource(size: size, seed: 37, faults: [.stallAfter(bytes: 2 << 20, seconds: 120, times: 100)])
        origin.serve("/seg.bin", .resource(stalled))
        let dir = try ScratchDirectory()
        let executable = try #require(Self.executable)
        let arguments = ["get", origin.url("/seg.bin"), "-o", dir.file("seg.bin"), "--connections", "4", "--progress", "json"]
        let log = dir.path + "/../segkill-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess(executable, arguments, outputPath: log)
        // Wait for a checkpoint with segment progress, then kill without warning.
        var checkpointed: ResumeInfo?
        for _ in 0..<1000 {
            if let info = try? ResumeInfo.read(from: dir.file("seg.bin.dkresume")),
                info.segments.reduce(0, { $0 + $1.written }) >= 4 << 20
            {
                checkpointed = info
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        kill(child.pid, SIGKILL)
        _ = try await offloaded { child.waitForExit(timeout: 10) }
        let info = try #require(checkpointed, "no segmented checkpoint appeared")
        #expect(info.segments.count >= 4)
        let before = origin.requests("/seg.bin").count
        origin.serve("/seg.bin", .resource(Resource(size: size, seed: 37)))

        let rerun = try await run(arguments, in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("seg.bin"), size: size, seed: 37))
        #expect(dir.contents == ["seg.bin"])
        // The rerun never asked for a segment from its very start when that segment had durable bytes.
        let rerunStarts = origin.requests("/seg.bin").dropFirst(before).compactMap { request -> Int64? in
            guard let range = request.header("Range"), range != "bytes=0-0" else { return nil }
            return Int64(range.dropFirst(6).split(separator: "-")[0])
        }
        for segment in info.segments where segment.written > 0 {
            #expect(!rerunStarts.contains(segment.start), "segment at \(segment.start) had \(segment.written) bytes but was fetched again from its start")
        }
        #expect(rerun.output.contains("\"connections\":4"), "json progress reports the connection count")
    }

    @Test(arguments: [(SIGINT, Int32(130)), (SIGTERM, Int32(143))])
    func signalsCheckpointAndExitWithTheirStatus(signal: Int32, expected: Int32) async throws {
        let size: Int64 = 16 << 20
        let origin = try FaultOrigin()
        origin.serve("/s.bin", .resource(Resource(size: size, seed: 34, faults: [.stallAfter(bytes: 2 << 20, seconds: 120, times: 10)])))
        let dir = try ScratchDirectory()
        let executable = try #require(Self.executable)
        let log = dir.path + "/../sig-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let arguments = ["get", origin.url("/s.bin"), "-o", dir.file("s.bin"), "--progress", "none"]
        let child = try ChildProcess(executable, arguments, outputPath: log)
        var waited = 0
        while (dir.size("s.bin.dkpart") ?? 0) < 1 << 20 && waited < 500 {
            try await Task.sleep(for: .milliseconds(10))
            waited += 1
        }
        kill(child.pid, signal)
        let exited = try await offloaded { child.waitForExit(timeout: 10) }
        let status = try #require(exited, "the CLI did not exit promptly after the signal")
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(WaitStatus(status).exitCode == expected, "\(output)")
        #expect(output.contains("error: interrupted"))
        let info = try ResumeInfo.read(from: dir.file("s.bin.dkresume"))
        #expect(info.bytesReceived > 0)
        #expect(info.bytesReceived == dir.size("s.bin.dkpart"))
        #expect(!dir.contents.contains("s.bin"))

        origin.serve("/s.bin", .resource(Resource(size: size, seed: 34)))
        let rerun = try await run(arguments, in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(origin.requests("/s.bin").last?.header("Range") == "bytes=\(info.bytesReceived)-")
        #expect(fileMatchesPattern(dir.file("s.bin"), size: size, seed: 34))
    }

    @Test func failuresExitNonZeroWithAnErrorLineNamingTheCause() async throws {
        let origin = try FaultOrigin()
        origin.serve("/f.bin", .resource(Resource(size: 1000, seed: 35)))
        origin.serve("/loop", .redirect(status: 302, location: "/loop2"))
        origin.serve("/loop2", .redirect(status: 302, location: "/loop"))
        let dir = try ScratchDirectory()
        let zeros = String(repeating: "0", count: 64)

        let mismatch = try await run(["get", origin.url("/f.bin"), "-o", dir.file("f.bin"), "--checksum", "sha256=\(zeros)"], in: dir)
        #expect(mismatch.exitCode == 7)
        #expect(mismatch.output.contains("error:") && mismatch.output.contains("checksum mismatch"), "\(mismatch.output)")

        let missing = try await run(["get", origin.url("/nope"), "-o", dir.file("nope")], in: dir)
        #expect(missing.exitCode == 3)
        #expect(missing.output.contains("error:") && missing.output.contains("HTTP status 404"), "\(missing.output)")

        let loop = try await run(["get", origin.url("/loop"), "-o", dir.file("loop")], in: dir)
        #expect(loop.exitCode == 6)
        #expect(loop.output.contains("error:") && loop.output.contains("redirect loop"), "\(loop.output)")

        let refused = try await run(["get", "http://127.0.0.1:1/x", "-o", dir.file("x"), "--retries", "0"], in: dir)
        #expect(refused.exitCode == 4)
        #expect(refused.output.contains("error:"), "\(refused.output)")

        let usage = try await run(["get", origin.url("/f.bin"), origin.url("/f.bin"), "-o", dir.file("two")], in: dir)
        #expect(usage.exitCode == 64)

        let interval = try await run(["get", origin.url("/f.bin"), "-o", dir.file("i"), "--checkpoint-interval", "0"], in: dir)
        #expect(interval.exitCode == 64)
        #expect(interval.output.contains("--checkpoint-interval must be"), "\(interval.output)")

        #expect(dir.contents.isEmpty, "nothing is left under any destination name: \(dir.contents)")
    }

    @Test func severalURLsWithMaxConcurrentAndHostileNamesStayInTheDirectory() async throws {
        let origin = try FaultOrigin()
        for i in 0..<5 { origin.serve("/m\(i).bin", .resource(Resource(size: 300_000, seed: UInt64(40 + i)))) }
        origin.serve("/evil", .resource(Resource(size: 1234, seed: 50, contentDisposition: "attachment; filename=\"../../../tmp/evil.sh\"")))
        let dir = try ScratchDirectory()
        let list = dir.path + "/../urls-\(UUID().uuidString).txt"
        defer { try? FileManager.default.removeItem(atPath: list) }
        try ((0..<5).map { origin.url("/m\($0).bin") } + ["# a comment", ""]).joined(separator: "\n")
            .write(toFile: list, atomically: true, encoding: .utf8)
        let result = try await run(["get", "-i", list, origin.url("/evil"), "-d", dir.path, "--max-concurrent", "2", "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(dir.contents == ["evil.sh", "m0.bin", "m1.bin", "m2.bin", "m3.bin", "m4.bin"])
        for i in 0..<5 { #expect(fileMatchesPattern(dir.file("m\(i).bin"), size: 300_000, seed: UInt64(40 + i))) }
        #expect(origin.connectionCount <= 6)
    }

    /// Killed before its first checkpoint (a stall right after 1 MiB: no write, so no checkpoint), a
    /// download leaves no `.dkresume`, only the record on its partial: `resume-info` shows it and the
    /// rerun resumes from it (issue #18 moved the first record onto the partial). The first MiB may
    /// take seconds on a loaded machine, and a periodic checkpoint while it arrives would write the
    /// `.dkresume`: `--checkpoint-interval 600` keeps the test about the first record only.
    @Test func aDownloadKilledBeforeItsFirstCheckpointShowsAndResumesFromThePartialsRecord() async throws {
        let mib: Int64 = 1 << 20
        let origin = try FaultOrigin()
        origin.serve("/early.bin", .resource(Resource(size: 4 * mib, seed: 37, faults: [.stallAfter(bytes: mib, seconds: 120, times: 1)])))
        let dir = try ScratchDirectory()
        let executable = try #require(Self.executable)
        let arguments = [
            "get", origin.url("/early.bin"), "-o", dir.file("early.bin"), "--progress", "none", "--checkpoint-interval", "600",
        ]
        let child = try ChildProcess(executable, arguments, outputPath: dir.path + "/../early-\(UUID().uuidString).log")
        _ = try await offloaded {
            for _ in 0..<6000 where dir.size("early.bin.dkpart") != mib { usleep(10_000) }
        }
        kill(child.pid, SIGKILL)
        _ = try await offloaded { child.waitForExit(timeout: 10) }
        #expect(dir.size("early.bin.dkpart") == mib)
        #expect(dir.contents == ["early.bin.dkpart"], "no .dkresume before the first checkpoint")

        let shown = try await run(["resume-info", dir.file("early.bin")], in: dir)
        #expect(shown.exitCode == 0, "\(shown.output)")
        #expect(shown.output.contains("user.downloadkit.resume"), "\(shown.output)")
        #expect(shown.output.contains(origin.url("/early.bin")), "\(shown.output)")
        #expect(shown.output.contains("(1048576 bytes on disk)"), "\(shown.output)")

        origin.serve("/early.bin", .resource(Resource(size: 4 * mib, seed: 37)))
        let rerun = try await run(arguments, in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("early.bin"), size: 4 * mib, seed: 37))
        #expect(origin.requests("/early.bin").last?.header("Range") == "bytes=\(mib)-")
        #expect(dir.contents == ["early.bin"])
    }

    @Test func resumeInfoPrintsThePartialDownload() async throws {
        let origin = try FaultOrigin()
        origin.serve("/p.bin", .resource(Resource(size: 4 << 20, seed: 36, faults: [.closeAfter(bytes: 1 << 20, times: 1)])))
        let dir = try ScratchDirectory()
        _ = try await run(["get", origin.url("/p.bin"), "-o", dir.file("p.bin"), "--retries", "0", "--progress", "none"], in: dir)
        let text = try await run(["resume-info", dir.file("p.bin")], in: dir)
        #expect(text.exitCode == 0)
        #expect(text.output.contains("bytes received: 1048576 of 4194304"), "\(text.output)")
        #expect(text.output.contains(origin.url("/p.bin")))
        let json = try await run(["resume-info", dir.file("p.bin.dkresume"), "--json"], in: dir)
        let object = try #require((try? JSONSerialization.jsonObject(with: Data(json.output.utf8))) as? [String: Any])
        #expect(object["bytesReceived"] as? Int == 1 << 20)
        #expect(object["tempFileSize"] as? Int == 1 << 20)
    }
}
