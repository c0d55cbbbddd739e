@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import Glibc
import HTTPWire
import Logging
import Testing
import TestOrigin

/// Starts a private PostgreSQL server, runs `body` with its URL and stops the server, whatever happens.
func withPostgres<T>(_ body: (PostgresServer) async throws -> T) async throws -> T {
    let server = try await offloaded { try PostgresServer() }
    do {
        let result = try await body(server)
        try await offloaded { server.stop() }
        return result
    } catch {
        try? await offloaded { server.stop() }
        throw error
    }
}

/// Opens the store of `server` (migrating it).
func openStore(_ server: PostgresServer) async throws -> PostgresTaskStore {
    let url = try #require(PostgresStoreURL(server.url))
    return try await PostgresTaskStore.open(url)
}

/// Polls `condition` every 50 ms (sleeping, never blocking a pool thread) until it holds or `seconds`
/// pass (a guard against hanging, not a measurement); returns whether it held.
func eventually(seconds: Double = 120, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return try await condition()
}

enum Fleet {
    /// The `downloadkit` executable built beside the tests.
    static let executable: String? = builtExecutable(named: "downloadkit-fleet")

    /// Runs `downloadkit` to completion (off the cooperative pool); returns its status and output.
    static func run(_ arguments: [String], in directory: String) async throws -> (status: Int32, output: String) {
        let executable = try #require(executable, "downloadkit-fleet executable not found next to the tests; run swift build --package-path Fleet --build-tests")
        return try await offloaded {
            let log = directory + "/../cli-\(UUID().uuidString).log"
            defer { try? FileManager.default.removeItem(atPath: log) }
            let child = try ChildProcess(executable, arguments, outputPath: log)
            let status = child.waitForExit(timeout: 300) ?? { child.send(SIGKILL); return -1 }()
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            return (status, output)
        }
    }

    /// A `queue run` worker process; its combined output goes to `log`.
    struct Worker {
        let id: String
        let process: ChildProcess
        let log: String

        var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
    }

    static func startWorker(_ id: String, store: String, logDirectory: String, extra: [String]) throws -> Worker {
        let executable = try #require(executable)
        let log = logDirectory + "/worker-\(id).log"
        let arguments =
            ["queue", "--store", store, "run", "--worker-id", id, "--worker-header", "--progress", "none"] + extra
        return Worker(id: id, process: try ChildProcess(executable, arguments, outputPath: log), log: log)
    }

    /// Waits (off the pool) for a worker to exit; its raw wait status, or nil if it still runs after the guard.
    static func waitForExit(_ worker: Worker, seconds: Double = 300) async throws -> Int32? {
        try await offloaded { worker.process.waitForExit(timeout: seconds) }
    }

    /// A paced, range-capable resource (strong ETag) whose responses to `worker` (by its
    /// `X-DownloadKit-Worker` header) stop after byte `holdAfter` until `release` is set: what the test
    /// looks at stays as it is however late a test on a busy machine gets to look (bounded: 10 minutes).
    static func heldResource(
        size: Int64, seed: UInt64, bytesPerSecond: Int64, holding worker: String?, after holdAfter: Int64,
        until release: LockedBox<Bool>
    ) -> Route {
        .script { request, connection in
            let start = rangeStart(request)
            var head = start == 0
                ? "HTTP/1.1 200 OK\r\n"
                : "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(start)-\(size - 1)/\(size)\r\n"
            head += "Content-Length: \(size - start)\r\nAccept-Ranges: bytes\r\nETag: \"held-\(seed)-\(size)\"\r\n"
            head += "Connection: close\r\n\r\n"
            try connection.write(head)
            var holds = worker != nil && request.header("X-DownloadKit-Worker") == worker
            let piece = max(1, bytesPerSecond / 10)
            var offset = start
            while offset < size {
                var count = min(piece, size - offset)
                if holds, !release.value {
                    if offset >= holdAfter {
                        for _ in 0..<12_000 where !release.value && !connection.isClosed { connection.sleep(seconds: 0.05) }
                        holds = false
                        continue
                    }
                    count = min(count, holdAfter - offset)
                }
                try connection.writePattern(offset: offset, count: count, seed: seed)
                offset += count
                connection.sleep(seconds: 0.1)
            }
        }
    }

    /// The working files of a task.
    static func workingFiles(_ task: ManagedTask) throws -> WorkingFiles {
        WorkingFiles(destination: task.destination, workingDirectory: nil, url: try HTTPURL(task.originalURL))
    }

    static func size(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : -1
    }

    /// The first byte a request asked for (`Range: bytes=N-`), 0 without a Range header.
    static func rangeStart(_ request: RecordedRequest) -> Int64 {
        guard let range = request.header("Range"), range.hasPrefix("bytes=") else { return 0 }
        return Int64(range.dropFirst(6).prefix { $0.isNumber }) ?? 0
    }

    /// Whether process `pid` is stopped (state `T` in /proc/PID/stat).
    static func isStopped(_ pid: pid_t) -> Bool {
        processStatFields(pid)?.first?.hasPrefix("T") ?? false
    }

    /// Whether process `pid` holds a `flock` on the file at `path` (from /proc/locks).
    static func holdsLock(pid: pid_t, on path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return false }
        let inode = UInt64(info.st_ino)
        guard let text = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return false }
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
            guard fields.count >= 6, fields[1] == "FLOCK", Int32(fields[4]) == pid else { continue }
            if let last = fields[5].split(separator: ":").last, UInt64(last) == inode { return true }
        }
        return false
    }

    /// The most leases that were live at one instant (a lease lives from its grant until it was given
    /// back, or until its deadline when it ran out), over `history`.
    static func peakLiveLeases(_ history: [LeaseRecord]) -> Int {
        var edges: [(at: Date, delta: Int)] = []
        for lease in history {
            let end = ["expired", "paused"].contains(lease.outcome) || lease.endedAt == nil ? lease.validUntil : lease.endedAt!
            edges.append((lease.acquiredAt, 1))
            edges.append((end, -1))
        }
        // At the same instant an end comes before a start.
        edges.sort { $0.at != $1.at ? $0.at < $1.at : $0.delta < $1.delta }
        var live = 0
        var peak = 0
        for edge in edges {
            live += edge.delta
            peak = max(peak, live)
        }
        return peak
    }

    /// Checks the lease history: per task, each lease began only after the one before it had ended or
    /// run out (by the server's clock) — no task was ever leased to two workers at once.
    static func leasesNeverOverlap(_ history: [LeaseRecord]) -> [String] {
        var problems: [String] = []
        for (task, leases) in Dictionary(grouping: history, by: \.taskID) {
            let ordered = leases.sorted { $0.epoch < $1.epoch }
            for (previous, next) in zip(ordered, ordered.dropFirst()) {
                // A lease that ran out (or whose task was paused) ended at its deadline (its row's end is when the
                // next claim saw it); one given back ended when it was given back.
                let previousEnd = ["expired", "paused"].contains(previous.outcome) ? previous.validUntil : (previous.endedAt ?? previous.validUntil)
                if next.acquiredAt < previousEnd {
                    problems.append(
                        "\(task): epoch \(next.epoch) (\(next.worker)) acquired at \(next.acquiredAt) while epoch \(previous.epoch) (\(previous.worker)) held it until \(previousEnd)")
                }
                if next.epoch != previous.epoch + 1 { problems.append("\(task): epochs \(previous.epoch) then \(next.epoch)") }
            }
        }
        return problems
    }
}

/// A value shared with a `@Sendable` closure (tests).
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) { stored = value }

    var value: Value {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }

    func mutate(_ change: (inout Value) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        change(&stored)
    }
}
