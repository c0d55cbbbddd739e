@testable import DownloadKitSession
import Foundation
import Testing
import TestOrigin

/// A session that starts the daemon waits for the daemon to say it listens (a byte on a readiness pipe), not
/// by trying the socket every 20 ms; a daemon that stops first is reported at once with its exit status.
@Suite(.timeLimit(.minutes(2)))
struct SessionLaunchWakeTests {
    /// A launch through `/bin/sh -c` that waits a second before it becomes the daemon (`exec`, same pid), or
    /// exits with `status` instead. No script file: one written here could still be open in a child another
    /// test forks meanwhile (`ETXTBSY` on exec).
    static func slowLaunch(
        _ arguments: [String], exitingWith status: Int32? = nil, killedBy signal: Int32? = nil, logPath: String = "/dev/null"
    ) throws -> DaemonLaunch {
        let executable = try DaemonHarness.requireExecutable()
        let ending = signal.map { "kill -\($0) $$" } ?? status.map { "exit \($0)" }
        let script = ending.map { "sleep 1; \($0)" } ?? "sleep 1; exec '\(executable)' \"$@\""
        return DaemonLaunch(executable: "/bin/sh", arguments: ["-c", script, "sh"] + arguments, logPath: logPath, timeout: 60)
    }

    @Test func theSessionSleepsUntilTheStartedDaemonListens() async throws {
        let harness = try DaemonHarness()
        let log = harness.scratch.file("launched.log")
        let session = BackgroundSession(
            identifier: "slow", socketPath: harness.socketPath,
            launch: try Self.slowLaunch(["daemon", "--state", harness.stateRoot], logPath: log))
        defer { session.close() }
        try await session.connect()
        #expect(session.launchWakeUps.withLock { $0 } == 1, "the session looked for the daemon's socket more than once")
        #expect(try await session.list().isEmpty)
        session.close()
        let pidText = try String(contentsOfFile: harness.stateRoot + "/daemon.lock", encoding: .utf8)
        let pid = try #require(pid_t(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
        kill(pid, SIGTERM)
        let status = try await offloaded { () -> Int32 in
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            return WaitStatus(status).exitCode
        }
        #expect(status == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }

    @Test func aStartedDaemonThatExitsFirstIsReportedWithItsStatus() async throws {
        let harness = try DaemonHarness()
        let session = BackgroundSession(
            identifier: "gone", socketPath: harness.socketPath,
            launch: try Self.slowLaunch([], exitingWith: 3))
        defer { session.close() }
        let started = Date()
        do {
            try await session.connect()
            Issue.record("connected to a daemon that exited")
        } catch {
            #expect(error.code == .daemonUnavailable)
            #expect(error.detail.contains("exited with status 3"), "\(error)")
        }
        #expect(Date().timeIntervalSince(started) < 55, "the exit was noticed only at the 60 s timeout")
        #expect(session.launchWakeUps.withLock { $0 } == 1)
    }

    @Test func aStartedDaemonKilledBeforeItListensIsReportedWithTheSignal() async throws {
        let harness = try DaemonHarness()
        let session = BackgroundSession(
            identifier: "killed", socketPath: harness.socketPath, launch: try Self.slowLaunch([], killedBy: SIGKILL))
        defer { session.close() }
        do {
            try await session.connect()
            Issue.record("connected to a daemon that was killed")
        } catch {
            #expect(error.code == .daemonUnavailable)
            #expect(error.detail.contains("was killed by signal 9"), "\(error)")
            #expect(!error.detail.contains("exited with status"), "\(error)")
        }
    }
}
