import DownloadKit
import Foundation
import HTTPClient
import Testing
import TestOrigin

/// Issue #24: a 4-connection `downloadkit get` killed with SIGKILL at seeded-random instants — the first
/// before any periodic checkpoint — and rerun fetches at most what was in flight per connection again,
/// counted from nginx's own access log (`$body_bytes_sent` per request), and ends with the right bytes.
@Suite(.timeLimit(.minutes(3)))
struct SegmentKillTests {
    @Test func killedSegmentedDownloadsRefetchAtMostWhatWasInFlight() async throws {
        let size = 64 << 20
        let connections = 4
        let root = try ScratchDirectory()
        let content = TestPattern.bytes(offset: 0, count: size, seed: 91)
        try Data(content).write(to: URL(fileURLWithPath: root.file("k.bin")))
        // 4 MiB/s per connection: a run takes about 4 s, so the kills land mid-transfer.
        let nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path, limitRate: 4 << 20))
        defer { nginx.stop() }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let arguments = [
            "get", nginx.httpURL("/limited/k.bin"), "-o", dir.file("k.bin"), "--connections", "\(connections)",
            "--progress", "none",
        ]
        // Seeded instants (xorshift64). The first kill comes when the progress journal holds 4-19 records
        // (a few buffers, well before the first periodic checkpoint 1 s after the segments start); the
        // others 200-600 ms after the segments start.
        var seed: UInt64 = 0x2424_2424
        func next(_ bound: UInt64) -> Int {
            seed ^= seed << 13
            seed ^= seed >> 7
            seed ^= seed << 17
            return Int(seed % bound)
        }
        let instants: [(records: Int, milliseconds: Int)] = [(4 + next(16), 0), (0, 200 + next(400)), (0, 200 + next(400))]
        var killedRuns = 0
        for instant in instants where !FileManager.default.fileExists(atPath: dir.file("k.bin")) {
            let log = dir.path + "/../kill-\(UUID().uuidString).log"
            defer { try? FileManager.default.removeItem(atPath: log) }
            let child = try ChildProcess(executable, arguments, outputPath: log)
            // Polled on a thread of its own (not the test pool, which may be starved), bounded.
            let killed = try await offloaded { () -> Bool in
                let wanted = Int64(32 * (1 + instant.records))
                var polls = 0
                while child.isRunning && polls < 20_000 && (dir.size("k.bin.dkjournal") ?? 0) < wanted {
                    usleep(500)
                    polls += 1
                }
                usleep(useconds_t(instant.milliseconds * 1000))
                guard child.isRunning else { return false }
                kill(child.pid, SIGKILL)
                _ = child.waitForExit(timeout: 10)
                return true
            }
            if killed { killedRuns += 1 }
        }
        #expect(killedRuns >= 1, "at least one run was killed mid-transfer")
        let log = dir.path + "/../rerun-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        if !FileManager.default.fileExists(atPath: dir.file("k.bin")) {
            let rerun = try ChildProcess(executable, arguments, outputPath: log)
            let status = try await offloaded { rerun.waitForExit(timeout: 90) }
            #expect(status == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
        #expect(fileMatchesPattern(dir.file("k.bin"), size: Int64(size), seed: 91))
        let expected = DKDigest.hex(DKDigest.hash(.sha256, content))
        let actual = try DKDigest.hex(DKDigest.hash(.sha256, Array(Data(contentsOf: URL(fileURLWithPath: dir.file("k.bin"))))))
        #expect(actual == expected)
        #expect(dir.contents == ["k.bin"])

        // nginx logs every request, killed ones included (once it notices the closed connection).
        var entries: [NginxAccessLogEntry] = []
        for _ in 0..<200 {
            entries = try nginx.accessLog().filter { $0.uri == "/limited/k.bin" }
            if entries.allSatisfy({ $0.status == 206 }) && !entries.isEmpty { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        let body = entries.filter { $0.range != "bytes=0-0" }.reduce(Int64(0)) { $0 + $1.bodyBytesSent }
        let twice = body - Int64(size)
        // What can be in flight at a kill, per connection: the 1 MiB receive buffer being written plus what
        // the kernel holds for the socket.
        let bound = Int64(killedRuns * connections) * (2 << 20)
        #expect(twice >= 0)
        #expect(twice <= bound, "fetched twice: \(twice) bytes after \(killedRuns) kills (bound \(bound)); instants \(instants)")
    }
}

