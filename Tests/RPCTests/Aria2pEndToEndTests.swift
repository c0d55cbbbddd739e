import DownloadKit
import Foundation
import Testing
import TestOrigin

/// `downloadkit rpc` driven by aria2p, an independent aria2 JSON-RPC client library from PyPI
/// (Scripts/install-deps.sh installs it), with WebSocket notifications read by websocket-client.
@Suite("aria2p end to end against downloadkit rpc", .timeLimit(.minutes(3)))
struct Aria2pEndToEndTests {
    static let executable: String? = builtExecutable(named: "downloadkit")

    static let script = #"""
        import sys, time, threading, json, hashlib
        import aria2p, websocket
        port, url, directory, expected = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
        events = []
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/jsonrpc", timeout=60)
        def listen():
            try:
                while True:
                    events.append(json.loads(ws.recv())["method"])
            except Exception:
                pass
        threading.Thread(target=listen, daemon=True).start()
        api = aria2p.API(aria2p.Client(host="http://127.0.0.1", port=int(port), secret="s3cret"))
        download = api.add_uris([url], options={"dir": directory, "out": "e2e.bin", "split": "1"})
        def wait(predicate, what):
            for _ in range(1200):
                download.update()
                if predicate(download):
                    return
                time.sleep(0.05)
            sys.exit(f"timed out waiting for {what}: {download.status}")
        wait(lambda d: d.status == "active" and d.completed_length > 0, "active")
        assert api.pause([download]) == [True]
        wait(lambda d: d.status == "paused", "paused")
        paused_at = download.completed_length
        assert api.resume([download]) == [True]
        wait(lambda d: d.is_complete, "complete")
        assert download.total_length == download.completed_length, (download.total_length, download.completed_length)
        assert str(download.files[0].path) == directory + "/e2e.bin", download.files[0].path
        digest = hashlib.sha256(open(directory + "/e2e.bin", "rb").read()).hexdigest()
        assert digest == expected, (digest, expected)
        for _ in range(1200):
            if "aria2.onDownloadComplete" in events:
                break
            time.sleep(0.05)
        for wanted in ["aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadComplete"]:
            assert wanted in events, (wanted, events)
        stats = api.get_stats()
        assert stats.num_stopped >= 1
        print("E2E-OK", paused_at, download.total_length, ",".join(events))
        """#

    @Test func addPauseUnpauseUntilCompleteThenVerifyTheFile() async throws {
        let executable = try #require(Self.executable, "downloadkit executable not found next to the tests; run swift build --build-tests")
        let scratch = try ScratchDirectory()
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 3 << 20
        origin.serve("/e2e.bin", .resource(Resource(size: size, seed: 77)))
        let expected = try await offloaded {
            try ProcessRunner.run("/usr/bin/curl", ["-s", "-o", scratch.file("reference.bin"), origin.url("/e2e.bin")])
        }
        #expect(expected.succeeded)
        let sha = try await offloaded { try ProcessRunner.run("/usr/bin/sha256sum", [scratch.file("reference.bin")]) }
        let digest = String(sha.output.prefix(64))
        // For the download under test, the first response stalls after 1 MiB for longer than the test: it is still
        // active when the script pauses it however late the script runs (at 1 MB/s alone a loaded core could let it
        // finish first), and the response after the resume (one connection: `split` 1) is served whole.
        origin.serve(
            "/e2e.bin",
            .resource(Resource(size: size, seed: 77, bytesPerSecond: 1_000_000, faults: [.stallAfter(bytes: 1 << 20, seconds: 300, times: 1)])))

        let port = try FreePort.allocate()[0]
        let server = try ChildProcess(
            executable, ["rpc", "--state", scratch.file("state"), "--rpc-listen", "127.0.0.1:\(port)", "--rpc-secret", "s3cret"],
            outputPath: scratch.file("rpc.log"))
        defer { server.terminate() }
        try await offloaded {
            for _ in 0..<400 where !FreePort.acceptsConnections(port: port) { usleep(25_000) }
        }
        try Self.script.write(toFile: scratch.file("e2e.py"), atomically: false, encoding: .utf8)
        let downloads = scratch.file("downloads")
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        let python = try #require(ProcessRunner.findExecutable("python3"))
        let run = try await offloaded {
            try ProcessRunner.run(python, [scratch.file("e2e.py"), String(port), origin.url("/e2e.bin"), downloads, digest])
        }
        #expect(run.succeeded && run.output.contains("E2E-OK"), "\(run.output)")
        #expect(fileMatchesPattern(downloads + "/e2e.bin", size: size, seed: 77))

        // SIGTERM: a clean exit (status 0) after checkpointing.
        server.send(SIGTERM)
        let status = try await offloaded { server.waitForExit(timeout: 30) }
        #expect(status == 0, "rpc log: \((try? String(contentsOfFile: scratch.file("rpc.log"), encoding: .utf8)) ?? "")")
    }
}
