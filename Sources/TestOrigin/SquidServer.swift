import Foundation
import Glibc

/// One line of ``SquidServer``'s access log (squid's native format).
public struct SquidAccessLogEntry: Sendable, Hashable {
    /// The result code and status, e.g. `TCP_DENIED/407`, `TCP_MISS/200`, `TCP_TUNNEL/200`.
    public var result: String
    /// `GET`, `CONNECT`, …
    public var method: String
    /// The URL, or `host:port` for CONNECT.
    public var url: String
    /// The authenticated user, or `nil` (`-`).
    public var user: String?

    /// The HTTP status squid answered with.
    public var status: Int { Int(result.split(separator: "/").last ?? "") ?? 0 }
}

/// squid (Debian's `squid`, Scripts/install-deps.sh) as an HTTP proxy on a private loopback port that
/// accepts only Digest proxy authentication (`auth_param digest` with `digest_file_auth` and a
/// password file of its own), absolute-form requests and `CONNECT` alike, caching nothing.
///
/// Configuration, password file, logs and pid file live in a temporary directory that ``stop()``
/// removes; squid runs in the foreground (`-N`) and switches to `nobody`, so its log directory is
/// handed to that user.
public final class SquidServer: Sendable {
    /// The squid executable, or `nil` when squid is not installed.
    public static func locate() -> String? {
        if FileManager.default.isExecutableFile(atPath: "/usr/sbin/squid") { return "/usr/sbin/squid" }
        return ProcessRunner.findExecutable("squid")
    }

    /// The Digest helper Debian ships with squid.
    static let digestHelper = "/usr/lib/squid/digest_file_auth"

    /// The Digest realm.
    public let realm: String
    /// The temporary directory (configuration, password file, `logs/`).
    public let directory: String
    private let peer: PeerProcess

    /// The port on 127.0.0.1.
    public var port: Int { peer.port }

    /// Writes the configuration and starts squid, returning once it accepts connections.
    /// - Parameters:
    ///   - user: The one user of the password file.
    ///   - password: That user's password.
    ///   - realm: The Digest realm.
    /// - Throws: ``OriginError`` when squid is missing or does not listen within 20 s (with its log).
    public init(user: String, password: String, realm: String = "downloadkit proxy") throws {
        guard let binary = Self.locate() else {
            throw OriginError("starting squid", detail: "squid not installed: run Scripts/install-deps.sh")
        }
        self.realm = realm
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("downloadkit-squid-\(getpid())-\(UUID().uuidString.prefix(8))").path
        self.directory = directory
        let logs = directory + "/logs"
        try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: true)
        chmod(directory, 0o755)
        // squid writes its logs and pid file as the user it switches to.
        chown(logs, 65534, 65534)
        try "\(user):\(password)\n".write(toFile: directory + "/passwd", atomically: true, encoding: .utf8)
        chmod(directory + "/passwd", 0o644)
        peer = try PeerProcess(
            name: "squid", binary: binary, directory: directory, timeout: 20, logs: { Self.logs(in: directory) },
            configure: { port in
                try Self.configuration(directory: directory, port: port, realm: realm)
                    .write(toFile: directory + "/squid.conf", atomically: true, encoding: .utf8)
                return ["-N", "-f", directory + "/squid.conf"]
            })
    }

    /// The proxy URL, with credentials when given: `http://user:password@127.0.0.1:PORT`.
    public func url(user: String? = nil, password: String? = nil) -> String {
        let userinfo = user.map { "\($0):\(password ?? "")@" } ?? ""
        return "http://\(userinfo)127.0.0.1:\(port)"
    }

    /// squid's cache log and standard output so far.
    public var log: String { Self.logs(in: directory) }

    private static func logs(in directory: String) -> String {
        PeerProcess.read(["logs/cache.log", "stdout.log"], in: directory)
    }

    /// The access log's requests so far (squid writes each when it completes). Connections that closed
    /// before sending a request (the readiness probe's, squid's `NONE_NONE/000`) are left out.
    public func accessLog() -> [SquidAccessLogEntry] {
        guard let text = try? String(contentsOfFile: directory + "/logs/access.log", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            // time elapsed client result/status bytes method URL user hierarchy type
            let fields = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            guard fields.count >= 8, fields[5] != "-" else { return nil }
            return SquidAccessLogEntry(
                result: fields[3], method: fields[5], url: fields[6], user: fields[7] == "-" ? nil : fields[7])
        }
    }

    /// Stops squid (SIGTERM, then SIGKILL) and removes its directory. Idempotent; also run on release.
    public func stop() { peer.stop() }

    static func configuration(directory: String, port: Int, realm: String) -> String {
        """
        # Generated by DownloadKit's TestOrigin.SquidServer: Digest proxy authentication only.
        http_port 127.0.0.1:\(port)
        pid_filename \(directory)/logs/squid.pid
        cache_log \(directory)/logs/cache.log
        access_log stdio:\(directory)/logs/access.log
        cache_effective_user nobody
        cache deny all
        cache_mem 8 MB
        shutdown_lifetime 0 seconds
        coredump_dir \(directory)/logs
        netdb_filename none
        pinger_enable off
        dns_nameservers 127.0.0.1
        auth_param digest program \(digestHelper) \(directory)/passwd
        auth_param digest realm \(realm)
        auth_param digest children 2 startup=1
        acl authenticated proxy_auth REQUIRED
        http_access allow authenticated
        http_access deny all

        """
    }
}
