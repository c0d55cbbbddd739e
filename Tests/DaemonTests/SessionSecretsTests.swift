import DownloadKitSession
import Foundation
import HTTPWire
import Testing
import TestOrigin

/// Issue #44: a URL's password reaches the daemon's task store (the task needs it) but no session
/// event, no `list` answer on the protocol and no `session list` line.
@Suite(.timeLimit(.minutes(2)))
struct SessionSecretsTests {
    @Test func eventsAndListingsShowTheURLWithoutItsPasswordAndTheDownloadStillAuthenticates() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let body = Array(repeating: UInt8(ascii: "k"), count: 20_000)
        let token = "Basic " + Base64.encode("u:SESSION-PASS")
        origin.serve("/k.bin", .script { request, connection in
            guard request.header("Authorization") == token else {
                try connection.write("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 0\r\n\r\n")
                return
            }
            try connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n")
            try connection.write(body)
        })
        let harness = try DaemonHarness()
        try await harness.start()
        let session = BackgroundSession(identifier: "secrets", socketPath: harness.socketPath)
        defer { session.close() }
        let destination = harness.scratch.file("k.bin")
        let url = "http://u:SESSION-PASS@127.0.0.1:\(origin.port)/k.bin?sig=SIGNED"
        _ = try await session.enqueue(SessionTaskRequest(url: url, file: destination))
        var seen: [SessionEvent] = []
        for await event in session.events {
            seen.append(event)
            if event.kind == .finished || event.kind == .failed { break }
        }
        #expect(seen.last?.kind == .finished, "\(seen)")
        #expect(FileManager.default.contents(atPath: destination) == Data(body), "the stored task kept its credential")
        let shown = "http://u:***@127.0.0.1:\(origin.port)/k.bin?sig=SIGNED"
        #expect(seen.contains { $0.url == shown }, "\(seen.map(\.url))")
        #expect(seen.allSatisfy { !($0.url ?? "").contains("SESSION-PASS") })
        let tasks = try await session.list()
        #expect(tasks.count == 1 && tasks.allSatisfy { $0.url == shown && $0.currentURL == shown }, "\(tasks)")
        for arguments in [["list"], ["list", "--json"], ["events", "--json"]] {
            let run = try await harness.session("secrets", arguments)
            #expect(run.status == 0, "\(run.stderr)")
            #expect(!run.stdout.contains("SESSION-PASS") && !run.stderr.contains("SESSION-PASS"), "\(run.stdout)")
        }
        #expect(!harness.daemonLog.contains("SESSION-PASS"))
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }
}
