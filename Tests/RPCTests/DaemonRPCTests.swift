import DownloadKitRPC
import Foundation
import Glibc
import Testing
import TestOrigin

/// Issue #15 on the daemon: `downloadkit daemon --rpc-listen` answers aria2 JSON-RPC over the session
/// named by `--rpc-session`, so aria2 front ends and `downloadkit session` see the same tasks.
@Suite(.timeLimit(.minutes(3)))
struct DaemonRPCTests {
    @Test func aTaskAddedOverRPCIsASessionTaskAndCompletes() async throws {
        let executable = try #require(Aria2pEndToEndTests.executable, "downloadkit executable not found next to the tests")
        let scratch = try ScratchDirectory()
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 2 << 20
        origin.serve("/d.bin", .resource(Resource(size: size, seed: 91)))
        let port = try FreePort.allocate()[0]
        let socket = scratch.file("d.sock")
        let daemon = try ChildProcess(
            executable,
            ["daemon", "--state", scratch.file("state"), "--socket", socket, "--rpc-listen", "127.0.0.1:\(port)",
             "--rpc-secret", "t0k", "--rpc-session", "front"],
            outputPath: scratch.file("daemon.log"))
        defer { daemon.terminate() }
        try await offloaded {
            for _ in 0..<400 where !FreePort.acceptsConnections(port: port) { usleep(25_000) }
        }
        let downloads = scratch.file("downloads")
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        let added = try await rpcPost(
            port: port,
            rpcCall("aria2.addUri", [.string("token:t0k"), .array([.string(origin.url("/d.bin"))]), .object(["dir": .string(downloads)])]))
        let gid = try #require(added.objectValue?["result"]?.stringValue, "\(added)")
        #expect(gid.count == 16)
        // Wrong secret: aria2's refusal, and the daemon keeps serving.
        let refused = try await rpcPost(port: port, rpcCall("aria2.tellActive", [.string("token:nope")]))
        #expect(refused.objectValue?["error"]?.objectValue?["message"]?.stringValue == "Unauthorized")

        var status: String?
        for _ in 0..<600 {
            let told = try await rpcPost(port: port, rpcCall("aria2.tellStatus", [.string("token:t0k"), .string(gid)]))
            status = told.objectValue?["result"]?.objectValue?["status"]?.stringValue
            if status == "complete" || status == "error" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(status == "complete")
        #expect(fileMatchesPattern(downloads + "/d.bin", size: size, seed: 91))

        // The same task, seen through the session protocol.
        let listed = try await offloaded {
            try ProcessRunner.run(executable, ["session", "front", "list", "--json", "--socket", socket])
        }
        #expect(listed.succeeded, "\(listed.output)")
        #expect(listed.output.contains(origin.url("/d.bin")), "\(listed.output)")

        daemon.send(SIGTERM)
        let exit = try await offloaded { daemon.waitForExit(timeout: 30) }
        #expect(exit == 0, "\((try? String(contentsOfFile: scratch.file("daemon.log"), encoding: .utf8)) ?? "")")
    }

    /// Issue #44 item 5 on the daemon: a page's hostile numbers killed the daemon and all its sessions.
    /// Without a secret the page is refused; a direct caller's huge numbers get an error; with
    /// `--rpc-secret-file` and `--rpc-allow-origin-all` a page (AriaNg) reads answers.
    @Test func hostileCallsLeaveTheDaemonServingAndItTakesTheBrowserOptions() async throws {
        let executable = try #require(Aria2pEndToEndTests.executable, "downloadkit executable not found next to the tests")
        let scratch = try ScratchDirectory()
        let port = try FreePort.allocate()[0]
        let daemon = try ChildProcess(
            executable,
            ["daemon", "--state", scratch.file("state"), "--socket", scratch.file("d.sock"), "--rpc-listen", "127.0.0.1:\(port)"],
            outputPath: scratch.file("daemon.log"))
        defer { daemon.terminate() }
        try await offloaded { for _ in 0..<400 where !FreePort.acceptsConnections(port: port) { usleep(25_000) } }
        for index in 0..<2 {
            let added = try await rpcPost(port: port, rpcCall("aria2.addUri", [
                .array([.string("http://127.0.0.1:9/d\(index)")]), .object(["pause": .string("true")]),
            ]))
            let gid = try #require(resultOf(added)?.stringValue)
            _ = try await rpcPost(port: port, rpcCall("aria2.remove", [.string(gid)]))
        }
        let hostile = rpcCall("aria2.tellStopped", [.int(1), .int(Int64.max)])
        let page = try await rawRequest(port: port, headers: ["Origin: http://evil.example", "Content-Type: text/plain"], body: hostile)
        #expect(page.status == 403)
        let direct = try await rpcPost(port: port, hostile)
        #expect(errorMessage(direct)?.contains("(num)") == true, "\(direct.serialized)")
        #expect(resultOf(try await rpcPost(port: port, rpcCall("aria2.tellStopped", [.int(0), .int(10)])))?.arrayValue?.count == 2)
        daemon.send(SIGTERM)
        #expect(try await offloaded { daemon.waitForExit(timeout: 30) } == 0)

        let secretFile = scratch.file("secret")
        try "t0k\n".write(toFile: secretFile, atomically: false, encoding: .utf8)
        chmod(secretFile, 0o600)
        let open = try ChildProcess(
            executable,
            ["daemon", "--state", scratch.file("state2"), "--socket", scratch.file("d2.sock"), "--rpc-listen", "127.0.0.1:\(port)",
             "--rpc-secret-file", secretFile, "--rpc-allow-origin-all"],
            outputPath: scratch.file("daemon2.log"))
        defer { open.terminate() }
        try await offloaded { for _ in 0..<400 where !FreePort.acceptsConnections(port: port) { usleep(25_000) } }
        let ariaNg = try await rawRequest(
            port: port, headers: ["Origin: http://ariang.example"], body: rpcCall("aria2.getVersion", [.string("token:t0k")]))
        #expect(ariaNg.status == 200 && ariaNg.headers.contains("access-control-allow-origin: *"), "\(ariaNg.headers)")
        open.send(SIGTERM)
        #expect(try await offloaded { open.waitForExit(timeout: 30) } == 0)
    }

    /// Issue #48: `aria2.shutdown` stops `downloadkit daemon` (and `aria2.forceShutdown` stops `downloadkit
    /// rpc`) as SIGTERM does: `OK`, exit 0, the running download checkpointed; the next start resumes it
    /// from its bytes (a Range request) and the file is right.
    @Test(arguments: [("daemon", "aria2.shutdown"), ("rpc", "aria2.forceShutdown")])
    func shutdownOverRPCStopsLikeSIGTERMAndTheDownloadResumes(command: String, method: String) async throws {
        let executable = try #require(Aria2pEndToEndTests.executable, "downloadkit executable not found next to the tests")
        let scratch = try ScratchDirectory()
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        // Every response stalls after 256 KiB (for longer than the test), so the download is running — not
        // finished — when the shutdown arrives, whatever the machine's load: a rate alone was not enough (at
        // 400 kB/s a connection the whole 4 MiB was once complete before the shutdown call, and the second run
        // had nothing to fetch). The second run is served without the stall.
        let size: Int64 = 4 << 20
        origin.serve("/r.bin", .resource(Resource(size: size, seed: 93, faults: [.stallAfter(bytes: 256 << 10, seconds: 300, times: 1000)])))
        let port = try FreePort.allocate()[0]
        func start(_ run: Int) throws -> ChildProcess {
            let common = ["--state", scratch.file("state"), "--rpc-listen", "127.0.0.1:\(port)", "--rpc-secret", "t0k"]
            let arguments = command == "daemon" ? ["daemon", "--socket", scratch.file("d.sock")] + common : ["rpc"] + common
            return try ChildProcess(executable, arguments, outputPath: scratch.file("\(command)-\(run).log"))
        }
        func log(_ run: Int) -> String { (try? String(contentsOfFile: scratch.file("\(command)-\(run).log"), encoding: .utf8)) ?? "" }
        func status(_ gid: String) async throws -> (String?, Int64) {
            let told = try await rpcPost(port: port, rpcCall("aria2.tellStatus", [.string("token:t0k"), .string(gid)]))
            let object = resultOf(told)?.objectValue
            return (object?["status"]?.stringValue, object?["completedLength"]?.stringValue.flatMap { Int64($0) } ?? 0)
        }
        let first = try start(1)
        defer { first.terminate() }
        try await offloaded { for _ in 0..<400 where !FreePort.acceptsConnections(port: port) { usleep(25_000) } }
        let downloads = scratch.file("downloads")
        let added = try await rpcPost(port: port, rpcCall("aria2.addUri", [
            .string("token:t0k"), .array([.string(origin.url("/r.bin"))]), .object(["dir": .string(downloads), "out": .string("r.bin")]),
        ]))
        let gid = try #require(resultOf(added)?.stringValue, "\(added.serialized)")
        var bytes: Int64 = 0
        for _ in 0..<400 {
            bytes = try await status(gid).1
            if bytes >= 200_000 { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        #expect(bytes > 0 && bytes < size)
        let refused = try await rawRequest(port: port, headers: [], body: rpcCall(method, [.string("token:wrong")]))
        #expect(refused.status == 400 && errorMessage(refused.json) == "Unauthorized")
        let stopped = try await rawRequest(port: port, headers: [], body: rpcCall(method, [.string("token:t0k")]))
        #expect(stopped.status == 200 && resultOf(stopped.json) == .string("OK"), "\(stopped.body)")
        #expect(try await offloaded { first.waitForExit(timeout: 30) } == 0, "\(log(1))")

        origin.serve("/r.bin", .resource(Resource(size: size, seed: 93)))
        let requestsBefore = origin.requests("/r.bin").count
        let second = try start(2)
        defer { second.terminate() }
        try await offloaded { for _ in 0..<400 where !FreePort.acceptsConnections(port: port) { usleep(25_000) } }
        var last: (String?, Int64) = (nil, 0)
        for _ in 0..<600 {
            last = try await status(gid)
            if last.0 == "complete" || last.0 == "error" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(last.0 == "complete", "\(last) \(log(2))")
        #expect(fileMatchesPattern(downloads + "/r.bin", size: size, seed: 93))
        // Every request of the second run continues from checkpointed bytes: none starts at 0.
        let later = origin.requests("/r.bin").dropFirst(requestsBefore).map { $0.header("Range") ?? "none" }
        #expect(!later.isEmpty && later.allSatisfy { $0.hasPrefix("bytes=") && !$0.hasPrefix("bytes=0-") }, "\(later)")
        second.send(SIGTERM)
        #expect(try await offloaded { second.waitForExit(timeout: 30) } == 0)
    }
}
