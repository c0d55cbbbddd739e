@testable import DownloadKitDaemon
import DownloadKitManager
@testable import DownloadKitSession
import Foundation
import Logging
import Testing
import TestOrigin

/// The daemon's socket loop and the session client's I/O thread sleep in poll(2) until something happens (a
/// client, a request, a reply, an event, close or stop). The loop used to wake every second to look around,
/// and the client every second (idle or connected).
@Suite(.timeLimit(.minutes(5)))
struct ControlServerWakeTests {
    /// A control server in this process on a private socket.
    final class InProcessDaemon {
        let scratch: ScratchDirectory
        let registry: SessionRegistry
        let server: ControlServer

        init() throws {
            scratch = try ScratchDirectory()
            let wakeup = Wakeup()
            registry = SessionRegistry(
                stateRoot: scratch.file("state"), configuration: DownloadManagerConfiguration(),
                logger: Logger(label: "test"), onAppend: { wakeup.signal() })
            server = ControlServer(
                socketPath: scratch.file("run/d.sock"), registry: registry, wakeup: wakeup, logger: Logger(label: "test"))
            try server.start()
        }

        var pollReturns: Int { server.pollReturns.withLock { $0 } }

        func stop() async throws {
            let server = self.server
            try await offloaded { server.stop() }
            await registry.closeAll()
        }
    }

    @Test func idleSocketLoopDoesNotWakeAndAClientWakesIt() async throws {
        let daemon = try InProcessDaemon()
        try await Task.sleep(for: .milliseconds(2500))
        #expect(daemon.pollReturns == 0, "the idle loop woke without a cause")

        guard case .success(let fd) = UnixSocket.connect(daemon.server.socketPath) else {
            Issue.record("cannot connect to \(daemon.server.socketPath)")
            return
        }
        defer { close(fd) }
        let hello = FrameEncoder.frame(
            SessionCodec.encode(ClientMessage(id: 0, .hello(version: SessionProtocol.version, session: "s"))))
        _ = hello.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let received = try await offloaded {
            var buffer = [UInt8](repeating: 0, count: 4096)
            return buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        }
        #expect(received > 0, "no welcome")
        #expect(daemon.pollReturns > 0)
        try await daemon.stop()
    }

    /// A connected session that nobody uses: its I/O thread does not wake; a request still goes through at
    /// once. (The daemon runs in a process of its own here: its replies do not wait for this process's pool.)
    @Test func anIdleConnectedSessionSleeps() async throws {
        let harness = try DaemonHarness()
        try await harness.start()
        let session = BackgroundSession(identifier: "idle", socketPath: harness.socketPath)
        defer { session.close() }
        _ = try await session.list()
        try await Task.sleep(for: .milliseconds(200))
        let before = session.ioWakeUps.withLock { $0 }
        try await Task.sleep(for: .milliseconds(2500))
        #expect(session.ioWakeUps.withLock { $0 } == before, "the session's I/O thread woke while idle")
        #expect(try await session.list().isEmpty)
        session.close()
        #expect(try await harness.stop() == 0, "\(harness.daemonLog)")
    }
}
