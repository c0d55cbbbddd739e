import Foundation
import Glibc

/// One line of ``ApacheServer``'s access log.
public struct ApacheAccessLogEntry: Sendable, Hashable {
    /// The client's source port (`%{remote}p`): equal ports mean one connection.
    public var remotePort: Int
    /// The request line (`%r`), e.g. `GET /file.bin HTTP/1.1`.
    public var requestLine: String
    /// The final status (`%>s`).
    public var status: Int
    /// The request's `Range` (`%{Range}i`), or `nil`.
    public var range: String?
    /// The response's `WWW-Authenticate` (`%{WWW-Authenticate}o`), or `nil`.
    public var challenge: String?

    /// Whether this was a 401 whose Digest challenge said the nonce had gone stale (`stale=true`).
    public var isStaleChallenge: Bool { status == 401 && (challenge?.lowercased().contains("stale=true") ?? false) }
}

/// Apache httpd (Debian's `apache2`, Scripts/install-deps.sh) serving a directory behind Digest
/// authentication (mod_auth_digest with a file of its own), on a private loopback port.
///
/// Everything Apache writes — configuration, pid file, error and access logs, the htdigest file —
/// lives in a temporary server root that ``stop()`` removes; nothing of the system's Apache setup is
/// read. Apache runs in the foreground (`-DFOREGROUND`), one process group with its children, which
/// switch to `nobody` (so the document root must be world-readable, as temporary directories are).
public final class ApacheServer: Sendable {
    /// The apache2 executable, or `nil` when Apache is not installed.
    public static func locate() -> String? {
        if FileManager.default.isExecutableFile(atPath: "/usr/sbin/apache2") { return "/usr/sbin/apache2" }
        return ProcessRunner.findExecutable("apache2")
    }

    /// Where Debian keeps Apache's loadable modules.
    static let moduleDirectory = "/usr/lib/apache2/modules"

    /// The realm of the Digest protection space.
    public let realm: String
    /// The server root (configuration, logs, pid file, htdigest file).
    public let serverRoot: String
    private let peer: PeerProcess

    /// The port on 127.0.0.1.
    public var port: Int { peer.port }

    /// Writes the configuration and the htdigest file and starts Apache, returning once it listens.
    /// - Parameters:
    ///   - documentRoot: The directory served at `/`, every path behind Digest authentication.
    ///   - realm: The Digest realm.
    ///   - user: The one user of the htdigest file.
    ///   - password: That user's password.
    ///   - nonceLifetime: `AuthDigestNonceLifetime` in seconds: after this a nonce is stale and the
    ///     next request using it gets a 401 with `stale=true`.
    /// - Throws: ``OriginError`` when Apache is missing or does not listen within 10 s (with its error log).
    public init(documentRoot: String, realm: String, user: String, password: String, nonceLifetime: Int) throws {
        guard let binary = Self.locate() else {
            throw OriginError("starting apache2", detail: "apache2 not installed: run Scripts/install-deps.sh")
        }
        self.realm = realm
        let serverRoot = FileManager.default.temporaryDirectory
            .appendingPathComponent("downloadkit-apache-\(getpid())-\(UUID().uuidString.prefix(8))").path
        self.serverRoot = serverRoot
        try FileManager.default.createDirectory(atPath: serverRoot + "/logs", withIntermediateDirectories: true)
        // htdigest's format: user:realm:MD5(user:realm:password).
        let hash = SimpleHash.hex(SimpleHash.md5(Array("\(user):\(realm):\(password)".utf8)))
        try "\(user):\(realm):\(hash)\n".write(toFile: serverRoot + "/htdigest", atomically: true, encoding: .utf8)
        chmod(serverRoot + "/htdigest", 0o644)
        peer = try PeerProcess(
            name: "apache2", binary: binary, directory: serverRoot, timeout: 10, logs: { Self.logs(in: serverRoot) },
            configure: { port in
                let text = Self.configuration(
                    serverRoot: serverRoot, documentRoot: documentRoot, port: port, realm: realm,
                    nonceLifetime: nonceLifetime)
                try text.write(toFile: serverRoot + "/httpd.conf", atomically: true, encoding: .utf8)
                return ["-f", serverRoot + "/httpd.conf", "-DFOREGROUND"]
            })
    }

    /// `http://127.0.0.1:PORT` + `path`.
    public func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Apache's error log and standard output so far.
    public var errorLog: String { Self.logs(in: serverRoot) }

    private static func logs(in serverRoot: String) -> String {
        PeerProcess.read(["logs/error.log", "stdout.log"], in: serverRoot)
    }

    /// The access log's entries so far (Apache writes each when its request completes).
    public func accessLog() throws -> [ApacheAccessLogEntry] {
        let path = serverRoot + "/logs/access.log"
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return try text.split(separator: "\n").map { try Self.parse(String($0)) }
    }

    /// Stops Apache (SIGTERM to its process, which stops its children; SIGKILL after 5 s) and removes
    /// the server root. Idempotent; also run on release.
    public func stop() { peer.stop() }

    /// The log line's fields, tab-separated so quoted challenge values need no unescaping.
    static let logFormat = #"%{remote}p\t%r\t%>s\t%{Range}i\t%{WWW-Authenticate}o"#

    static func configuration(serverRoot: String, documentRoot: String, port: Int, realm: String, nonceLifetime: Int)
        -> String
    {
        let modules = [
            ("mpm_event_module", "mod_mpm_event.so"), ("authn_core_module", "mod_authn_core.so"),
            ("authn_file_module", "mod_authn_file.so"), ("authz_core_module", "mod_authz_core.so"),
            ("authz_user_module", "mod_authz_user.so"), ("auth_digest_module", "mod_auth_digest.so"),
        ].map { "LoadModule \($0.0) \(moduleDirectory)/\($0.1)" }.joined(separator: "\n")
        return """
            # Generated by DownloadKit's TestOrigin.ApacheServer.
            ServerRoot "\(serverRoot)"
            PidFile "\(serverRoot)/httpd.pid"
            ErrorLog "\(serverRoot)/logs/error.log"
            \(modules)
            User nobody
            Group nogroup
            Listen 127.0.0.1:\(port)
            ServerName 127.0.0.1
            KeepAlive On
            MaxKeepAliveRequests 0
            DocumentRoot "\(documentRoot)"
            LogFormat "\(logFormat)" downloadkit
            CustomLog "\(serverRoot)/logs/access.log" downloadkit
            <Directory "\(documentRoot)">
                AuthType Digest
                AuthName "\(realm)"
                AuthDigestProvider file
                AuthUserFile "\(serverRoot)/htdigest"
                AuthDigestNonceLifetime \(nonceLifetime)
                Require valid-user
            </Directory>

            """
    }

    static func parse(_ line: String) throws -> ApacheAccessLogEntry {
        let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard fields.count == 5, let port = Int(fields[0]), let status = Int(fields[2]) else {
            throw OriginError("parsing Apache's access log", detail: line)
        }
        func optional(_ text: String) -> String? { text == "-" || text.isEmpty ? nil : text }
        return ApacheAccessLogEntry(
            remotePort: port, requestLine: fields[1], status: status, range: optional(fields[3]),
            challenge: optional(fields[4]))
    }
}
