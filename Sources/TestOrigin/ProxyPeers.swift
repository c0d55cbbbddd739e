import Foundation
import Glibc

/// A real proxy process on a private loopback port for tests: tinyproxy (HTTP, absolute-form and
/// `CONNECT`, optional Basic auth) or microsocks (SOCKS5, optional RFC 1929 auth), both from Debian's
/// packages (Scripts/install-deps.sh). Runs as the current user with its configuration and log in a
/// temporary directory; ``stop()`` (also on release) ends it and removes the directory.
public final class ProxyServer: @unchecked Sendable {
    /// Which program serves.
    public enum Kind: Sendable {
        /// tinyproxy: `http://` proxy.
        case tinyproxy
        /// microsocks: `socks5://` / `socks5h://` proxy.
        case microsocks
    }

    /// The proxy's port on 127.0.0.1.
    public let port: Int
    /// The temporary directory with the configuration and log.
    public let directory: String
    private let process: ChildProcess
    private let lock = NSLock()
    private var stopped = false

    /// Starts the proxy and returns once it accepts connections.
    /// - Parameters:
    ///   - kind: tinyproxy or microsocks.
    ///   - user: When given (with `password`), the proxy requires these credentials.
    /// - Throws: ``OriginError`` when the program is missing or does not listen within 10 s.
    public init(_ kind: Kind, user: String? = nil, password: String? = nil) throws {
        let name = kind == .tinyproxy ? "tinyproxy" : "microsocks"
        guard let binary = ProcessRunner.findExecutable(name) else {
            throw OriginError("starting \(name)", detail: "\(name) not installed: run Scripts/install-deps.sh")
        }
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("downloadkit-\(name)-\(getpid())-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        port = try FreePort.allocate(count: 1)[0]
        var arguments: [String]
        switch kind {
        case .tinyproxy:
            var config = """
                Port \(port)
                Listen 127.0.0.1
                Timeout 60
                MaxClients 64
                LogLevel Connect
                LogFile "\(directory)/proxy.log"
                PidFile "\(directory)/proxy.pid"
                DisableViaHeader Yes

                """
            if let user, let password { config += "BasicAuth \(user) \(password)\n" }
            try config.write(toFile: directory + "/tinyproxy.conf", atomically: true, encoding: .utf8)
            arguments = ["-d", "-c", directory + "/tinyproxy.conf"]
        case .microsocks:
            arguments = ["-i", "127.0.0.1", "-p", String(port)]
            if let user, let password { arguments += ["-u", user, "-P", password] }
        }
        process = try ChildProcess(binary, arguments, outputPath: directory + "/stdout.log")
        let deadline = Date().addingTimeInterval(10)
        while !FreePort.acceptsConnections(port: port) {
            if process.terminationStatus != nil || Date() >= deadline {
                let output = log
                stop()
                throw OriginError("starting \(name)", detail: "not listening on \(port): \(output)")
            }
            usleep(10_000)
        }
    }

    deinit { stop() }

    /// The proxy URL with the given scheme and optional credentials, e.g. `socks5h://u:p@127.0.0.1:1080`.
    public func url(scheme: String, user: String? = nil, password: String? = nil) -> String {
        let userinfo = user.map { "\($0):\(password ?? "")@" } ?? ""
        return "\(scheme)://\(userinfo)127.0.0.1:\(port)"
    }

    /// The proxy's log and standard output so far.
    public var log: String {
        let files = ["proxy.log", "stdout.log"].map { directory + "/" + $0 }
        return files.compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }.joined(separator: "\n")
    }

    /// Stops the proxy (SIGTERM, then SIGKILL) and removes its directory. Idempotent.
    public func stop() {
        lock.lock()
        let first = !stopped
        stopped = true
        lock.unlock()
        guard first else { return }
        process.terminate(grace: 2)
        try? FileManager.default.removeItem(atPath: directory)
    }
}
