import DownloadKit
import DownloadKitSession
import Foundation
import Testing
import TestOrigin

/// `downloadkit daemon` and `downloadkit session` end to end, as separate processes (issue #14).
@Suite(.timeLimit(.minutes(3)))
struct DaemonProcessTests {
    static let size: Int64 = 1 << 20

    /// Serves `count` pattern files (optionally rate-limited) at /f0.bin …
    static func serve(_ origin: FaultOrigin, count: Int, bytesPerSecond: Int?) {
        for index in 0..<count {
            origin.serve("/f\(index).bin", .resource(Resource(size: size, seed: UInt64(40 + index), bytesPerSecond: bytesPerSecond)))
        }
    }

    /// Starts the daemon and has a client process add /f0.bin … /f2.bin into `<scratch>/out`.
    static func startAndAddThree(
        _ harness: DaemonHarness, _ origin: FaultOrigin, _ identifier: String
    ) async throws -> (out: String, ids: [String]) {
        try await harness.start()
        let out = harness.scratch.file("out")
        let add = try await harness.session(
            identifier, ["add", origin.url("/f0.bin"), origin.url("/f1.bin"), origin.url("/f2.bin"), "-d", out])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.lines.count == 3 && Set(add.lines).count == 3)
        return (out, add.lines)
    }

    /// Where a file differs from the pattern (diagnostics).
    static func mismatch(_ path: String, size: Int64, seed: UInt64) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { return "unreadable" }
        let bytes = [UInt8](data)
        guard let first = bytes.withUnsafeBytes({ TestPattern.firstMismatch(in: $0, offset: 0, seed: seed) }) else {
            return "size \(data.count) of \(size), no wrong byte"
        }
        let expected = TestPattern.bytes(offset: 0, count: bytes.count, seed: seed)
        let last = (first..<bytes.count).last { bytes[$0] != expected[$0] } ?? first
        let zeros = bytes[first...last].allSatisfy { $0 == 0 }
        return "size \(data.count) of \(size), wrong bytes \(first)...\(last)\(zeros ? " (all zero: a hole)" : "")"
    }

    static func finished(_ events: [[String: Any]]) -> [[String: Any]] {
        events.filter { $0["event"] as? String == "finished" }
    }

    @Test func eventsMissedWhileNoClientWasConnectedAreDeliveredOnceThenAcknowledged() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        Self.serve(origin, count: 3, bytesPerSecond: nil)
        let harness = try DaemonHarness()
        let (out, ids) = try await Self.startAndAddThree(harness, origin, "com.example.one")

        _ = try await harness.waitUntilAllEnded("com.example.one")
        let second = try await harness.session("com.example.one", ["events", "--json"])
        #expect(second.status == 0, "\(second.stderr)")
        let finished = Self.finished(second.jsonLines)
        #expect(finished.count == 3, "\(second.stdout)")
        #expect(Set(finished.compactMap { $0["task"] as? String }) == Set(ids))
        for (index, event) in finished.enumerated() {
            let path = try #require(event["path"] as? String)
            #expect(event["bytes"] as? Int == Int(Self.size))
            #expect((event["checksum"] as? String)?.hasPrefix("sha256=") == true)
            #expect(FileManager.default.fileExists(atPath: path), "event \(index): \(path)")
        }
        for index in 0..<3 {
            #expect(fileMatchesPattern(out + "/f\(index).bin", size: Self.size, seed: UInt64(40 + index)))
        }
        let seqs = second.jsonLines.compactMap { $0["seq"] as? Int }
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)

        let third = try await harness.session("com.example.one", ["events", "--json"])
        #expect(third.status == 0, "\(third.stderr)")
        #expect(third.stdout.isEmpty, "acknowledged events came again: \(third.stdout)")
        // Another identifier has its own (empty) log.
        #expect(try await harness.session("com.example.other", ["events", "--json"]).stdout.isEmpty)
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }

    @Test func daemonKilledMidTransferResumesFromDurableBytesWithoutLosingOrDoublingEvents() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        // Slow enough that no file can finish before the kill even on a loaded machine.
        Self.serve(origin, count: 3, bytesPerSecond: 64 << 10)
        let harness = try DaemonHarness()
        let (out, ids) = try await Self.startAndAddThree(harness, origin, "kill")
        // Wait until every transfer has a checkpoint (its resume info, written after an fdatasync), then kill
        // the daemon without warning. Bytes in the temp file alone are not that event: killed before its first
        // checkpoint, a download rightly starts again from 0 (nothing records what the bytes are), which under
        // load a wait on the temp files' sizes once let happen.
        let started = try await offloaded {
            let deadline = Date().addingTimeInterval(120)
            while Date() < deadline {
                // The tasks are added with a directory destination: their working files are dk-<MD5 of the URL>.*.
                let records = ((try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []).filter { $0.hasSuffix(".dkresume") }
                let checkpointed = records.map { (try? ResumeInfo.read(from: out + "/" + $0))?.bytesReceived ?? 0 }
                if checkpointed.count == 3 && checkpointed.allSatisfy({ $0 > 0 }) { return true }
                usleep(10_000)
            }
            return false
        }
        #expect(started, "\(harness.daemonLog)")
        try await harness.kill()
        Self.serve(origin, count: 3, bytesPerSecond: nil)
        try await harness.start()

        let follow = try await harness.session("kill", ["events", "--json", "--follow"])
        #expect(follow.status == 0, "\(follow.stderr)\n\(harness.daemonLog)")
        let events = follow.jsonLines
        let finished = Self.finished(events)
        #expect(finished.count == 3, "\(follow.stdout)")
        #expect(Set(finished.compactMap { $0["task"] as? String }) == Set(ids))
        for id in ids {
            let kinds = events.filter { $0["task"] as? String == id }.compactMap { $0["event"] as? String }
            #expect(kinds.filter { $0 == "queued" }.count == 1, "\(id): \(kinds)")
            #expect(kinds.last == "finished", "\(id): \(kinds)")
        }
        let seqs = events.compactMap { $0["seq"] as? Int }
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)
        for index in 0..<3 {
            let path = out + "/f\(index).bin"
            #expect(
                fileMatchesPattern(path, size: Self.size, seed: UInt64(40 + index)),
                "\(Self.mismatch(path, size: Self.size, seed: UInt64(40 + index))); requests: \(origin.requests("/f\(index).bin").map { ($0.connectionID, $0.header("Range") ?? "-") })\n\(harness.daemonLog)")
            // The restarted daemon continued from the bytes on disk.
            let ranges = origin.requests("/f\(index).bin").compactMap { $0.header("Range") }
            #expect(ranges.contains { $0.hasPrefix("bytes=") && !$0.hasPrefix("bytes=0-") }, "f\(index): \(ranges)")
        }
        #expect(try await harness.session("kill", ["events", "--json"]).stdout.isEmpty)
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }

    @Test func anotherUserIsRefusedAndCreatesNoTask() async throws {
        let setpriv = try #require(ProcessRunner.findExecutable("setpriv"), "setpriv (util-linux) is needed")
        try #require(geteuid() == 0, "this test switches to uid 65534, which needs root (CI runs as root)")
        let harness = try DaemonHarness()
        try await harness.start()
        // Let the other user reach the socket, so the refusal comes from the daemon's SO_PEERCRED check.
        chmod(harness.scratch.path, 0o755)
        chmod(harness.scratch.file("run"), 0o755)
        chmod(harness.socketPath, 0o666)
        // A copy the other user can execute wherever the build directory lives.
        // Copied by cp in its own process: a copy written by this process could be open for writing in a
        // child another test forks meanwhile, and then exec fails with ETXTBSY.
        let copy = harness.scratch.file("downloadkit")
        let original = try DaemonHarness.requireExecutable()
        let copied = try await offloaded { try ProcessRunner.run("/bin/cp", [original, copy]) }
        #expect(copied.succeeded, "\(copied.output)")
        chmod(copy, 0o755)
        // The other user's client refuses first: the socket's directory is not its own.
        let refused = try await harness.session(
            "shared", ["add", "http://127.0.0.1:9/x.bin", "-o", "/tmp/never-written.bin"],
            prefix: [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"], executable: copy)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("error:") && refused.stderr.contains("uid 65534"), "\(refused.stderr)")
        // A raw client of the other user that does not check: the daemon refuses it (SO_PEERCRED).
        let raw = """
            import json, socket, sys
            def frame(o):
                b = json.dumps(o).encode()
                return len(b).to_bytes(4, "big") + b
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(sys.argv[1])
            try:
                s.sendall(frame({"type": "hello", "version": 1, "session": "shared"}) + frame({"type": "enqueue", "id": 1,
                    "requests": [{"url": "http://127.0.0.1:9/x.bin", "file": "/tmp/never-written.bin"}]}))
            except OSError:
                pass
            data = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk: break
                    data += chunk
            except OSError:
                pass
            sys.stdout.write(data[4:].decode(errors="replace"))
            """
        let path = harness.socketPath
        let answer = try await offloaded {
            try ProcessRunner.run(setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c", raw, path])
        }
        #expect(answer.output.contains("permissionDenied") && answer.output.contains("uid 65534"), "\(answer.output)")
        let list = try await harness.session("shared", ["list", "--json"])
        #expect(list.status == 0 && list.stdout.isEmpty, "\(list.stdout)")
        #expect(harness.daemonLog.contains("refused a connection from uid 65534"))
        #expect(try await harness.stop() == 0)
    }

    @Test func addPassesItsOptionsToTheDaemonsManager() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/big.bin", .resource(Resource(size: 8 << 20, seed: 61)))
        let harness = try DaemonHarness()
        try await harness.start()
        let file = harness.scratch.file("big.bin")
        let add = try await harness.session(
            "opts", ["add", origin.url("/big.bin"), "-o", file, "--connections", "4", "--header", "X-Token: t1", "--group", "g"])
        #expect(add.status == 0, "\(add.stderr)")
        let tasks = try await harness.waitUntilAllEnded("opts")
        #expect(tasks.first?["state"] as? String == "completed" && tasks.first?["group"] as? String == "g", "\(tasks)")
        let requests = origin.requests("/big.bin")
        #expect(
            fileMatchesPattern(file, size: 8 << 20, seed: 61),
            "\(Self.mismatch(file, size: 8 << 20, seed: 61)); requests: \(requests.map { ($0.connectionID, $0.header("Range") ?? "-") })\n\(harness.daemonLog)")
        #expect(Set(requests.map(\.connectionID)).count > 1, "one connection only: --connections did not reach the manager")
        #expect(requests.allSatisfy { $0.header("X-Token") == "t1" })
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }

    @Test func noDaemonGivesAnErrorLineNamingTheSocket() async throws {
        let harness = try DaemonHarness()
        let run = try await harness.session("x", ["list"])
        #expect(run.status != 0)
        #expect(run.stderr.hasPrefix("error:") && run.stderr.contains(harness.socketPath), "\(run.stderr)")
    }
}
