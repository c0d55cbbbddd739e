import DownloadKitSession
import Foundation
import Testing
import TestOrigin

/// A `downloadkit daemon` process on a private socket and state directory, and `downloadkit session`
/// client processes against it (the built executable next to the tests).
final class DaemonHarness: Sendable {
    let scratch: ScratchDirectory
    let stateRoot: String
    let socketPath: String
    private let daemon = LockedBox<ChildProcess?>(nil)
    private let logs = LockedBox<[String]>([])

    init() throws {
        scratch = try ScratchDirectory()
        stateRoot = scratch.file("state")
        // Short: sun_path holds 107 bytes; the scratch path is long enough already.
        socketPath = scratch.file("run/d.sock")
    }

    deinit {
        daemon.value?.terminate(grace: 5)
    }

    static let executable: String? = builtExecutable(named: "downloadkit")

    static func requireExecutable() throws -> String {
        try #require(executable, "downloadkit executable not found next to the tests; run swift build --build-tests")
    }

    /// Starts the daemon and waits (bounded) until its socket accepts connections.
    /// - Parameters:
    ///   - prefix: A command the daemon runs under (e.g. `prlimit --nofile=80:80 --`; it must exec it,
    ///     so that ``daemonPID`` is the daemon's).
    ///   - options: More daemon options (limits).
    func start(prefix: [String] = [], options: [String] = []) async throws {
        let executable = try Self.requireExecutable()
        let log = scratch.file("daemon-\(logs.value.count).log")
        logs.value.append(log)
        let command = prefix + [executable, "daemon", "--state", stateRoot, "--socket", socketPath] + options
        let child = try ChildProcess(command[0], Array(command.dropFirst()), outputPath: log)
        daemon.value = child
        let path = socketPath
        let up = try await offloaded {
            for _ in 0..<1500 {
                if case .success(let fd) = UnixSocket.connect(path) {
                    close(fd)
                    return true
                }
                if !child.isRunning { return false }
                usleep(20_000)
            }
            return false
        }
        #expect(up, "the daemon did not come up: \(daemonLog)")
    }

    /// The running daemon's pid.
    var daemonPID: pid_t? { daemon.value?.pid }

    /// SIGTERM; returns the exit status (0 expected: checkpointed and exited cleanly).
    func stop() async throws -> Int32? {
        guard let child = daemon.value else { return nil }
        daemon.value = nil
        child.send(SIGTERM)
        let status = try await offloaded { child.waitForExit(timeout: 60) }
        if status == nil { child.terminate(grace: 1) }
        return status.map { WaitStatus($0).exitCode }
    }

    /// SIGKILL, as after an OOM kill or a power cut of the process.
    func kill() async throws {
        guard let child = daemon.value else { return }
        daemon.value = nil
        child.send(SIGKILL)
        _ = try await offloaded { child.waitForExit(timeout: 30) }
    }

    /// Every daemon log so far.
    var daemonLog: String {
        logs.value.map { (try? String(contentsOfFile: $0, encoding: .utf8)) ?? "" }.joined(separator: "\n--\n")
    }

    struct Run: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
        var lines: [String] { stdout.split(separator: "\n").map(String.init) }
        var jsonLines: [[String: Any]] {
            lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        }
    }

    /// Runs `downloadkit session IDENTIFIER …ARGS --socket SOCKET` to completion (bounded), optionally
    /// through a prefix such as `setpriv --reuid=65534 …` and against another socket.
    func session(
        _ identifier: String, _ arguments: [String], prefix: [String] = [], executable: String? = nil, socket: String? = nil,
        timeout: Double = 90
    ) async throws -> Run {
        let executable = try executable ?? Self.requireExecutable()
        let all = prefix + [executable, "session", identifier] + arguments + ["--socket", socket ?? socketPath]
        let out = scratch.file("client-\(UUID().uuidString).out")
        let err = out + ".err"
        let result = try await offloaded { () -> Run in
            let spawned = try spawnProcess(all[0], Array(all.dropFirst()), standardOutput: out, standardError: err)
            guard spawned.result == 0 else { throw OriginError("posix_spawn \(all[0])", errno: spawned.result) }
            var status: Int32 = 0
            let deadline = Date().addingTimeInterval(timeout)
            while waitpid(spawned.pid, &status, WNOHANG) == 0 {
                if Date() > deadline {
                    Glibc.kill(spawned.pid, SIGKILL)
                    waitpid(spawned.pid, &status, 0)
                    return Run(status: -1, stdout: "", stderr: "timed out")
                }
                usleep(5_000)
            }
            let stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
            return Run(status: WaitStatus(status).exitCode, stdout: stdout, stderr: stderr)
        }
        try? FileManager.default.removeItem(atPath: out)
        try? FileManager.default.removeItem(atPath: err)
        return result
    }

    /// Polls `session list --json` (bounded) until every task has ended; returns the last listing.
    func waitUntilAllEnded(_ identifier: String, seconds: Int = 90) async throws -> [[String: Any]] {
        var tasks: [[String: Any]] = []
        for _ in 0..<(seconds * 10) {
            tasks = try await session(identifier, ["list", "--json"]).jsonLines
            let ended = ["completed", "failed", "cancelled"]
            if !tasks.isEmpty && tasks.allSatisfy({ ended.contains($0["state"] as? String ?? "") }) { return tasks }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        Issue.record("tasks did not end: \(tasks)\n\(daemonLog)")
        return tasks
    }
}

/// A mutable value behind a lock (test bookkeeping).
final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
