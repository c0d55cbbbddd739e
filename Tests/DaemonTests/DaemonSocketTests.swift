@testable import DownloadKitDaemon
import DownloadKitSession
import Foundation
import Testing
import TestOrigin

/// Hostile and misbehaving clients on the daemon's socket, and the library client across daemon restarts.
@Suite(.timeLimit(.minutes(3)))
struct DaemonSocketTests {
    /// A raw blocking client connection with a receive timeout.
    final class RawClient {
        let fd: Int32

        init(_ path: String) throws {
            guard case .success(let fd) = UnixSocket.connect(path) else { throw SessionError(.daemonUnavailable, path) }
            self.fd = fd
            var timeout = timeval(tv_sec: 20, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(fd) }

        /// Sends everything (blocking socket).
        func send(_ bytes: [UInt8]) {
            var offset = 0
            while offset < bytes.count {
                let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent <= 0 { return }
                offset += sent
            }
        }

        func send(_ message: ClientMessage) { send(FrameEncoder.frame(SessionCodec.encode(message))) }

        private var decoder = FrameDecoder()

        /// Frames until EOF (or the timeout, or `maxFrames`); `closed` tells whether the daemon closed
        /// the connection.
        func readAll(maxFrames: Int = 100) -> (messages: [ServerMessage], closed: Bool) {
            var messages: [ServerMessage] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                while messages.count < maxFrames, case .frame(let body) = decoder.next() {
                    if let message = try? SessionCodec.decodeServer(body) { messages.append(message) }
                }
                if messages.count >= maxFrames { return (messages, false) }
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count <= 0 { return (messages, count == 0 || errno == ECONNRESET) }
                decoder.append(buffer[0..<count])
            }
        }

        /// The next frame (blocking up to the timeout).
        func next() -> ServerMessage? { readAll(maxFrames: 1).messages.first }
    }

    static func errorCode(_ messages: [ServerMessage]) -> SessionError.Code? {
        for case .error(_, let error) in messages { return error.code }
        return nil
    }

    @Test func badInputGetsTypedErrorsAndClosesWithoutHurtingOtherClients() async throws {
        let harness = try DaemonHarness()
        try await harness.start()
        let path = harness.socketPath
        try await offloaded {
            let bystander = try RawClient(path)
            bystander.send(ClientMessage(id: 0, .hello(version: SessionProtocol.version, session: "calm")))
            guard case .welcome = bystander.next() else { throw SessionError(.malformedMessage, "no welcome") }

            let cases: [(String, [UInt8], SessionError.Code)] = [
                ("garbage", Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8), .frameTooLarge),
                ("oversized", [0x00, 0x20, 0x00, 0x00] + Array(repeating: 0x20, count: 1000), .frameTooLarge),
                ("not JSON", FrameEncoder.frame(Array("\u{1}\u{2}not json".utf8)), .malformedMessage),
                ("unknown type", FrameEncoder.frame(Array("{\"type\":\"explode\",\"id\":1}".utf8)), .malformedMessage),
                (
                    "newer version",
                    FrameEncoder.frame(SessionCodec.encode(ClientMessage(id: 0, .hello(version: 99, session: "calm")))),
                    .unsupportedVersion
                ),
                ("request before hello", FrameEncoder.frame(SessionCodec.encode(ClientMessage(id: 1, .list))), .notGreeted),
                (
                    "bad identifier",
                    FrameEncoder.frame(SessionCodec.encode(ClientMessage(id: 0, .hello(version: 1, session: "../etc")))),
                    .invalidIdentifier
                ),
            ]
            for (name, bytes, expected) in cases {
                let client = try RawClient(path)
                client.send(bytes)
                let (messages, closed) = client.readAll()
                #expect(Self.errorCode(messages) == expected, "\(name): \(messages)")
                #expect(closed, "\(name): the daemon kept the connection open")
            }
            // A truncated frame, then the client goes away: nothing to answer, nothing breaks.
            do {
                let client = try RawClient(path)
                client.send(Array(FrameEncoder.frame(Array("{\"type\":\"list\",\"id\":1}".utf8)).prefix(9)))
            }

            // A client that asks and never reads: the daemon disconnects it once its replies pile up.
            let greedy = try RawClient(path)
            greedy.send(ClientMessage(id: 0, .hello(version: SessionProtocol.version, session: "calm")))
            let long = "http://127.0.0.1:9/" + String(repeating: "a", count: 3000)
            greedy.send(ClientMessage(id: 1, .enqueue((0..<100).map { SessionTaskRequest(url: long + "/\($0)", file: "/nonexistent-dir/\($0)") })))
            UnixSocket.setNonBlocking(greedy.fd)
            var disconnected = false
            var sentRequests = 0
            for id in 2..<20_000 {
                let frame = FrameEncoder.frame(SessionCodec.encode(ClientMessage(id: id, .list)))
                var offset = 0
                var attempts = 0
                while offset < frame.count && attempts < 2000 {
                    let sent = frame[offset...].withUnsafeBytes { Glibc.send(greedy.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if sent > 0 {
                        offset += sent
                    } else if errno == EAGAIN {
                        attempts += 1
                        usleep(5_000)
                    } else {
                        disconnected = true
                        break
                    }
                }
                if disconnected || attempts >= 2000 { break }
                sentRequests += 1
                // Meanwhile the bystander is served as usual.
                if id % 50 == 0 {
                    bystander.send(ClientMessage(id: id, .list))
                    guard case .ok(let replyID, _, _, _) = bystander.next(), replyID == id else {
                        throw SessionError(.malformedMessage, "the bystander got no reply while a client did not read")
                    }
                }
            }
            if !disconnected {
                // The sends stalled: the daemon stopped reading; it must have closed the connection.
                var pfd = pollfd(fd: greedy.fd, events: Int16(POLLIN), revents: 0)
                var sawEOF = false
                var buffer = [UInt8](repeating: 0, count: 1 << 16)
                for _ in 0..<2000 where !sawEOF {
                    _ = poll(&pfd, 1, 10)
                    let count = buffer.withUnsafeMutableBytes { recv(greedy.fd, $0.baseAddress, $0.count, 0) }
                    if count == 0 || (count < 0 && errno != EAGAIN) { sawEOF = true }
                }
                disconnected = sawEOF
            }
            #expect(disconnected, "a client that never reads was not disconnected after \(sentRequests) requests")
            bystander.send(ClientMessage(id: 99_999, .list))
            guard case .ok(99_999, _, _, _) = bystander.next() else {
                throw SessionError(.malformedMessage, "the bystander lost its connection")
            }
        }
        #expect(harness.daemonLog.contains("does not read its replies"), "\(harness.daemonLog)")
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }

    @Test func libraryEventsSurviveADaemonRestartWithoutDuplicates() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/slow.bin", .resource(Resource(size: 1 << 20, seed: 77, bytesPerSecond: 256 << 10)))
        let harness = try DaemonHarness()
        try await harness.start()
        let session = BackgroundSession(identifier: "lib", socketPath: harness.socketPath)
        defer { session.close() }
        let destination = harness.scratch.file("slow.bin")
        let id = try await session.enqueue(SessionTaskRequest(url: origin.url("/slow.bin"), file: destination))
        var seen: [SessionEvent] = []
        var restarted = false
        for await event in session.events {
            seen.append(event)
            if event.kind == .started && !restarted {
                restarted = true
                #expect(try await harness.stop() == 0)
                origin.serve("/slow.bin", .resource(Resource(size: 1 << 20, seed: 77)))
                try await harness.start()
            }
            if event.kind == .finished { break }
        }
        #expect(restarted)
        let seqs = seen.map(\.seq)
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count, "\(seqs)")
        #expect(seen.map(\.kind).first == .queued && seen.last?.kind == .finished, "\(seen.map(\.kind))")
        #expect(seen.allSatisfy { $0.task == id })
        #expect(seen.last?.path == destination)
        #expect(fileMatchesPattern(destination, size: 1 << 20, seed: 77))
        try await session.acknowledge(upTo: seqs.last ?? 0)
        let status = try await session.status()
        #expect(status.position.acknowledged == seqs.last)
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }

    /// Events a client received but did not acknowledge come again to the next client; acknowledged
    /// ones never do.
    @Test func aClientThatLeavesWithoutAcknowledgingLosesNothing() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/x.bin", .resource(Resource(size: 64 << 10, seed: 79)))
        let harness = try DaemonHarness()
        try await harness.start()
        func firstEvents(_ count: Int, acknowledging: Bool) async throws -> [SessionEvent] {
            let session = BackgroundSession(identifier: "leaver", socketPath: harness.socketPath)
            defer { session.close() }
            var events: [SessionEvent] = []
            for await event in session.events {
                events.append(event)
                if events.count == count { break }
            }
            if acknowledging, let last = events.last { try await session.acknowledge(upTo: last.seq) }
            return events
        }
        let session = BackgroundSession(identifier: "leaver", socketPath: harness.socketPath)
        _ = try await session.enqueue(SessionTaskRequest(url: origin.url("/x.bin"), file: harness.scratch.file("x.bin")))
        session.close()
        _ = try await harness.waitUntilAllEnded("leaver")
        let unacknowledged = try await firstEvents(3, acknowledging: false)
        #expect(unacknowledged.map(\.kind) == [.queued, .started, .finished])
        let again = try await firstEvents(3, acknowledging: false)
        #expect(again == unacknowledged)
        let first = try await firstEvents(1, acknowledging: true)
        #expect(first == [unacknowledged[0]])
        let rest = try await firstEvents(2, acknowledging: true)
        #expect(rest == Array(unacknowledged[1...]))
        let status = try await harness.session("leaver", ["events", "--json"])
        #expect(status.status == 0 && status.stdout.isEmpty, "\(status.stdout)")
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }

    /// A session allowed to start the daemon starts it when none answers; one that is not starts nothing.
    @Test func aSessionStartsTheDaemonOnlyWhenAllowed() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/l.bin", .resource(Resource(size: 64 << 10, seed: 80)))
        let harness = try DaemonHarness()
        let plain = BackgroundSession(identifier: "launch", socketPath: harness.socketPath)
        defer { plain.close() }
        await #expect(throws: SessionError.self) { try await plain.connect() }
        #expect(!FileManager.default.fileExists(atPath: harness.stateRoot))

        let executable = try DaemonHarness.requireExecutable()
        let log = harness.scratch.file("launched.log")
        let session = BackgroundSession(
            identifier: "launch", socketPath: harness.socketPath,
            launch: DaemonLaunch(executable: executable, arguments: ["daemon", "--state", harness.stateRoot], logPath: log))
        defer { session.close() }
        let id = try await session.enqueue(SessionTaskRequest(url: origin.url("/l.bin"), file: harness.scratch.file("l.bin")))
        var finished: SessionEvent?
        for await event in session.events where event.kind == .finished {
            finished = event
            break
        }
        #expect(finished?.task == id)
        #expect(fileMatchesPattern(harness.scratch.file("l.bin"), size: 64 << 10, seed: 80))
        // The started daemon wrote its pid into the state directory's lock file.
        let pidText = try String(contentsOfFile: harness.stateRoot + "/daemon.lock", encoding: .utf8)
        let pid = try #require(pid_t(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
        kill(pid, SIGTERM)
        let status = try await offloaded { () -> Int32? in
            var status: Int32 = 0
            for _ in 0..<3000 {
                if waitpid(pid, &status, WNOHANG) == pid { return WaitStatus(status).exitCode }
                usleep(10_000)
            }
            kill(pid, SIGKILL)
            return nil
        }
        #expect(status == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }

    /// README's BackgroundSession example as written (URL, path and checksum differ), with a second client
    /// of the same identifier connected: both see the live events.
    @Test func readmeExampleWithTwoClientsOfOneIdentifierBothSeeLiveEvents() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/a.iso", .resource(Resource(size: 256 << 10, seed: 78, bytesPerSecond: 512 << 10)))
        let harness = try DaemonHarness()
        try await harness.start()
        let sha256 = SessionHostDigest.sha256(TestPattern.bytes(offset: 0, count: 256 << 10, seed: 78))
        let watcher = BackgroundSession(identifier: "backups", socketPath: harness.socketPath)
        defer { watcher.close() }
        let watched = Task {
            var kinds: [SessionEventKind] = []
            for await event in watcher.events {
                kinds.append(event.kind)
                if event.kind == .finished { break }
            }
            return kinds
        }
        try await watcher.connect()

        let session = BackgroundSession(identifier: "backups", socketPath: harness.socketPath)
        defer { session.close() }
        let id = try await session.enqueue(
            SessionTaskRequest(url: origin.url("/a.iso"), file: harness.scratch.file("a.iso"), checksum: "sha256=\(sha256)"))
        var finished: SessionEvent?
        for await event in session.events {
            if event.kind == .finished { finished = event }
            do {
                try await session.acknowledge(upTo: event.seq)
            } catch {
                Issue.record("acknowledge \(event.seq) (\(event.kind)): \(error)\n\(harness.daemonLog)")
            }
            if event.kind == .finished { break }
        }
        #expect(finished?.task == id)
        #expect(finished?.path == harness.scratch.file("a.iso"))
        #expect(finished?.checksum == "sha256=\(sha256)")
        #expect(await watched.value.last == .finished)
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }
}

/// The SHA-256 of test bytes, through the daemon's own file digest.
enum SessionHostDigest {
    static func sha256(_ bytes: [UInt8]) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("dk-digest-\(UUID().uuidString)").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return SessionHost.sha256(path) ?? ""
    }
}
