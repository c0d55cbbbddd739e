import Foundation
import Glibc

/// A real server program (Apache, squid) run in the foreground from a private temporary directory on
/// a free loopback port: the start-and-wait loop and the stop that ``ApacheServer`` and
/// ``SquidServer`` share.
///
/// `@unchecked Sendable`: `process` is only touched under `lock`; the rest is immutable.
final class PeerProcess: @unchecked Sendable {
    /// The port it listens on, on 127.0.0.1.
    let port: Int
    /// Its private directory, removed by ``stop()``.
    let directory: String
    private let lock = NSLock()
    private var process: ChildProcess?

    /// Starts `binary` with the arguments `configure` returns after writing the configuration for a
    /// free port, and waits until that port accepts connections; a port taken in between ("Address
    /// already in use" in `logs()`) is tried again with another, three times at most.
    /// - Throws: ``OriginError`` with `logs()` when the program exits or does not listen in `timeout`
    ///   seconds; the directory is removed then.
    init(
        name: String, binary: String, directory: String, timeout: Double, logs: () -> String,
        configure: (_ port: Int) throws -> [String]
    ) throws {
        self.directory = directory
        var lastError: OriginError?
        for _ in 0..<3 {
            let port = try FreePort.allocate(count: 1)[0]
            let started = try ChildProcess(binary, try configure(port), outputPath: directory + "/stdout.log")
            let deadline = Date().addingTimeInterval(timeout)
            while started.isRunning && !FreePort.acceptsConnections(port: port) && Date() < deadline { usleep(10_000) }
            if started.isRunning && FreePort.acceptsConnections(port: port) {
                self.port = port
                process = started
                return
            }
            started.terminate(grace: 2)
            let log = logs()
            lastError = OriginError("starting \(name)", detail: "not listening on \(port)\n" + log)
            if !log.contains("Address already in use") { break }
        }
        try? FileManager.default.removeItem(atPath: directory)
        throw lastError ?? OriginError("starting \(name)")
    }

    deinit { stop() }

    /// The contents of the files at these paths inside the directory that can be read, joined.
    static func read(_ names: [String], in directory: String) -> String {
        names.compactMap { try? String(contentsOfFile: directory + "/" + $0, encoding: .utf8) }.joined(separator: "\n")
    }

    /// Stops the program (SIGTERM, then SIGKILL after 5 s) and removes the directory. Idempotent.
    func stop() {
        let running: ChildProcess? = lock.withLock {
            defer { process = nil }
            return process
        }
        guard let running else { return }
        running.terminate(grace: 5)
        try? FileManager.default.removeItem(atPath: directory)
    }
}
