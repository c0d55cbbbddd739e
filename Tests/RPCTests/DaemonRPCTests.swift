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
}
