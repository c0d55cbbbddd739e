import Foundation
import Glibc

/// A TLS virtual server for ``NginxServer``: one name, one certificate, one port of its own.
public struct TLSSite: Sendable, Hashable {
    /// The site's name, used as `server_name` and to look up its port and URL.
    public var name: String
    /// A PEM certificate (chain) file.
    public var certificatePath: String
    /// The PEM private key file of the certificate.
    public var privateKeyPath: String
    /// When set, the site requires a client certificate issued by the CAs in this PEM file
    /// (`ssl_verify_client on`); nginx answers 400 to a client without one or with an untrusted one.
    public var clientCertificateAuthorityPath: String? = nil

    public init(name: String, certificatePath: String, privateKeyPath: String) {
        self.name = name
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
    }
}

/// A redirect served by ``NginxServer`` with `return status location;` for exactly one path.
public struct NginxRedirect: Sendable, Hashable {
    /// The exact request path that redirects (`location = from`).
    public var from: String
    /// 301, 302, 303, 307 or 308.
    public var status: Int
    /// The `Location` value, sent verbatim (`absolute_redirect off`), so it may be relative.
    public var location: String

    public init(from: String, status: Int = 302, to location: String) {
        self.from = from
        self.status = status
        self.location = location
    }
}

/// What an ``NginxServer`` serves.
public struct NginxConfiguration: Sendable {
    /// The directory served at `/` on every server (HTTP and each TLS site).
    public var documentRoot: String
    /// When set, `/limited/…` serves the same files as `/…` paced at this many bytes per second per
    /// connection (`limit_rate`).
    public var limitRate: Int?
    /// Redirects, on every server.
    public var redirects: [NginxRedirect]
    /// TLS servers, each on its own port, TLS 1.2 and 1.3.
    public var tlsSites: [TLSSite]
    /// Raw directives appended inside every `server { }` block.
    public var extraServerDirectives: String
    /// `keepalive_requests`: requests one connection may carry before nginx closes it.
    public var keepaliveRequests: Int
    /// Whether ``NginxServer/stop()`` deletes the prefix directory (config, logs, pid).
    public var removesPrefixOnStop: Bool

    public init(
        documentRoot: String,
        limitRate: Int? = nil,
        redirects: [NginxRedirect] = [],
        tlsSites: [TLSSite] = [],
        extraServerDirectives: String = "",
        keepaliveRequests: Int = 100_000,
        removesPrefixOnStop: Bool = true
    ) {
        self.documentRoot = documentRoot
        self.limitRate = limitRate
        self.redirects = redirects
        self.tlsSites = tlsSites
        self.extraServerDirectives = extraServerDirectives
        self.keepaliveRequests = keepaliveRequests
        self.removesPrefixOnStop = removesPrefixOnStop
    }
}

/// One line of the harness's access log (a JSON object per request, written as each request completes).
public struct NginxAccessLogEntry: Sendable, Hashable {
    /// `$request_method`.
    public var method: String
    /// `$request_uri`: the target as sent, with its query.
    public var uri: String
    /// `$status`.
    public var status: Int
    /// `$body_bytes_sent`.
    public var bodyBytesSent: Int64
    /// `$connection`: nginx's serial number of the connection; equal numbers mean a reused connection.
    public var connection: Int
    /// `$connection_requests`: this request's number on its connection, from 1.
    public var connectionRequests: Int
    /// `$http_range`, or `nil` when the request had no `Range`.
    public var range: String?
    /// `$http_if_range`, or `nil`.
    public var ifRange: String?
    /// `$remote_port`: the client's source port.
    public var remotePort: Int
    /// `$http_authorization`, or `nil` (tells whether credentials reached this server).
    public var authorization: String?
    /// `$http_cookie`, or `nil`.
    public var cookie: String?
    /// `$http_host`, or `nil`.
    public var host: String?
    /// `$server_port`: which listener (HTTP or a TLS site) served the request.
    public var serverPort: Int
    /// `$scheme`: `http` or `https`.
    public var scheme: String
    /// `$ssl_protocol` (e.g. `TLSv1.3`), or `nil` over plain HTTP.
    public var tlsProtocol: String?
    /// `$ssl_cipher` (e.g. `TLS_AES_128_GCM_SHA256`): the suite the connection negotiated, or `nil`
    /// over plain HTTP.
    public var tlsCipher: String? = nil
    /// `$ssl_session_reused == "r"`: the TLS session was resumed.
    public var tlsSessionReused: Bool
    /// `$request_time` in seconds.
    public var requestTime: Double
    /// `$http_proxy_authorization`, or `nil` (proxy credentials must never reach an origin).
    public var proxyAuthorization: String? = nil
}

/// Runs nginx as a local origin for conformance tests and benchmarks.
///
/// nginx runs in the foreground as a single process (`daemon off; master_process off;
/// worker_processes 1;`, so no `user` switch happens) with a generated configuration in a temporary
/// prefix directory that also holds the pid file, logs and temp paths; nothing outside the prefix is
/// touched. Ports are picked free on 127.0.0.1 (and ::1 when available, so `localhost` URLs work).
///
/// `@unchecked Sendable`: the stored properties are immutable except `process`, which is only touched
/// while holding `lock`.
public final class NginxServer: @unchecked Sendable {
    /// The nginx executable: `/usr/sbin/nginx` when present, else `nginx` found on `PATH` or in the sbin
    /// directories; `nil` when nginx is not installed (tests then skip).
    public static func locate() -> String? {
        if FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx") { return "/usr/sbin/nginx" }
        return ProcessRunner.findExecutable("nginx")
    }

    /// What is served.
    public let configuration: NginxConfiguration
    /// The temporary prefix directory (`nginx.conf`, `logs/`, `temp/`, `nginx.pid`).
    public let prefix: String
    /// The plain HTTP port.
    public let httpPort: Int
    /// The port of each TLS site, by site name.
    public let tlsPorts: [String: Int]
    /// The generated configuration text.
    public let configurationText: String

    private let lock = NSLock()
    private var process: ChildProcess?

    /// Writes the configuration and starts nginx, returning once every port accepts connections.
    ///
    /// - Parameters:
    ///   - configuration: What to serve.
    ///   - executable: The nginx binary; by default ``locate()``.
    ///   - startupTimeout: Seconds to wait for the ports (default 10).
    /// - Throws: ``OriginError`` when nginx is missing, exits, or does not listen in time; the error's
    ///   detail carries nginx's error log and standard error.
    public init(configuration: NginxConfiguration, executable: String? = nil, startupTimeout: Double = 10) throws {
        guard let binary = executable ?? Self.locate() else {
            throw OriginError("starting nginx", detail: "nginx not installed: run Scripts/install-deps.sh")
        }
        self.configuration = configuration
        let prefix = FileManager.default.temporaryDirectory
            .appendingPathComponent("downloadkit-nginx-\(getpid())-\(UUID().uuidString.prefix(8))").path
        self.prefix = prefix
        do {
            for directory in ["logs", "temp"] {
                try FileManager.default.createDirectory(
                    atPath: prefix + "/" + directory, withIntermediateDirectories: true)
            }
        } catch {
            throw OriginError("creating the nginx prefix \(prefix)", detail: "\(error)")
        }

        // Free ports can be taken by someone else between picking and binding; retry a few times.
        var lastError: OriginError?
        for _ in 0..<3 {
            let ports = try FreePort.allocate(count: 1 + configuration.tlsSites.count)
            var tls: [String: Int] = [:]
            for (index, site) in configuration.tlsSites.enumerated() { tls[site.name] = ports[index + 1] }
            let text = Self.makeConfiguration(configuration, prefix: prefix, httpPort: ports[0], tlsPorts: tls)
            do {
                try text.write(toFile: prefix + "/nginx.conf", atomically: true, encoding: .utf8)
                let process = try Self.launch(binary: binary, prefix: prefix)
                try Self.waitUntilListening(process: process, ports: ports, prefix: prefix, timeout: startupTimeout)
                self.process = process
                self.httpPort = ports[0]
                self.tlsPorts = tls
                self.configurationText = text
                return
            } catch let error as OriginError {
                lastError = error
                let log = Self.readLogs(prefix: prefix)
                if !log.contains("Address already in use") { break }
            } catch {
                lastError = OriginError("starting nginx", detail: "\(error)")
                break
            }
        }
        if configuration.removesPrefixOnStop { try? FileManager.default.removeItem(atPath: prefix) }
        throw lastError ?? OriginError("starting nginx")
    }

    deinit {
        stop()
    }

    /// The CPU time (user + system, seconds) nginx's one process has used since it started, from
    /// `/proc/PID/stat`; `nil` when it is not running or the file cannot be read. The benchmark reads it
    /// before and after a client's run to tell how busy the origin was (a client cannot receive faster
    /// than this single worker sends).
    public func cpuSeconds() -> Double? {
        guard let pid = lock.withLock({ process?.pid }), let fields = processStatFields(pid),
            // utime is field 14 of the file, stime field 15.
            fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12])
        else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ticks > 0 ? (user + system) / ticks : nil
    }

    /// `http://HOST:PORT` + `path` for the plain HTTP server. `host` may be `"localhost"`.
    public func httpURL(_ path: String, host: String = "127.0.0.1") -> String {
        "http://\(host):\(httpPort)\(path)"
    }

    /// `https://HOST:PORT` + `path` for a TLS site, or `nil` when no site has that name. Use
    /// `host: "localhost"` (or the site's name resolved elsewhere) for hostname verification.
    public func tlsURL(site: String, path: String, host: String = "127.0.0.1") -> String? {
        tlsPorts[site].map { "https://\(host):\($0)\(path)" }
    }

    /// Every access-log entry written so far, in completion order.
    ///
    /// nginx writes an entry when a request finishes, right after the last byte is handed to the
    /// kernel, so a client may see the response a moment before its entry; use
    /// ``accessLog(waitingFor:timeout:)`` to wait.
    public func accessLog() throws -> [NginxAccessLogEntry] {
        let path = prefix + "/logs/access.log"
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw OriginError("reading \(path)", detail: "\(error)")
        }
        return try text.split(separator: "\n").map { try Self.parseAccessLogLine(String($0)) }
    }

    /// The access-log entries completed since byte `offset` of the log, advancing `offset` past them: a
    /// watcher that polls every few milliseconds reads only what is new (the whole log of a long bench
    /// run takes longer to parse than a fast download takes to finish).
    public func newAccessLogEntries(after offset: inout Int) throws -> [NginxAccessLogEntry] {
        let path = prefix + "/logs/access.log"
        guard let handle = FileHandle(forReadingAtPath: path) else { return [] }
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        let data = handle.readDataToEndOfFile()
        guard let end = data.lastIndex(of: UInt8(ascii: "\n")) else { return [] }
        let complete = data[data.startIndex...end]
        offset += complete.count
        return try String(decoding: complete, as: UTF8.self).split(separator: "\n").map {
            try Self.parseAccessLogLine(String($0))
        }
    }

    /// The access log once it holds at least `count` entries, or as it is after `timeout` seconds.
    public func accessLog(waitingFor count: Int, timeout: Double = 5) throws -> [NginxAccessLogEntry] {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let entries = try accessLog()
            if entries.count >= count || Date() >= deadline { return entries }
            usleep(5_000)
        }
    }

    /// nginx's error log and standard error so far.
    public func errorLog() -> String {
        Self.readLogs(prefix: prefix)
    }

    /// Whether nginx is still running.
    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return process?.isRunning ?? false
    }

    /// Stops nginx (SIGTERM, then SIGKILL after 5 s), waits for it to exit, and removes the prefix when
    /// the configuration says so. Idempotent; also run on deinit.
    public func stop() {
        lock.lock()
        let running = process
        process = nil
        lock.unlock()
        guard let running else { return }
        running.terminate(grace: 5)
        if configuration.removesPrefixOnStop { try? FileManager.default.removeItem(atPath: prefix) }
    }

    // MARK: Configuration

    /// The access log format: one JSON object per line (`escape=json` escapes quotes, backslashes and
    /// control characters, so header values cannot break the framing).
    static let logFormat = [
        ("method", "$request_method"), ("uri", "$request_uri"), ("status", "$status"),
        ("bodyBytesSent", "$body_bytes_sent"), ("connection", "$connection"),
        ("connectionRequests", "$connection_requests"), ("range", "$http_range"), ("ifRange", "$http_if_range"),
        ("remotePort", "$remote_port"), ("authorization", "$http_authorization"), ("cookie", "$http_cookie"),
        ("host", "$http_host"), ("serverPort", "$server_port"), ("scheme", "$scheme"),
        ("sslProtocol", "$ssl_protocol"), ("sslCipher", "$ssl_cipher"), ("sslSessionReused", "$ssl_session_reused"),
        ("requestTime", "$request_time"),
        ("proxyAuthorization", "$http_proxy_authorization"),
    ].map { "\"\($0.0)\":\"\($0.1)\"" }.joined(separator: ",")

    static func makeConfiguration(
        _ configuration: NginxConfiguration, prefix: String, httpPort: Int, tlsPorts: [String: Int]
    ) -> String {
        let root = quoted(configuration.documentRoot)
        let rootWithSlash = quoted(
            configuration.documentRoot.hasSuffix("/") ? configuration.documentRoot : configuration.documentRoot + "/")
        func listen(_ port: Int, ssl: Bool) -> String {
            let suffix = ssl ? " ssl" : ""
            var text = "        listen 127.0.0.1:\(port)\(suffix);\n"
            if FreePort.isIPv6LoopbackAvailable { text += "        listen [::1]:\(port)\(suffix);\n" }
            return text
        }
        var locations = "        root \(root);\n"
        if let rate = configuration.limitRate {
            locations += "        location /limited/ {\n            alias \(rootWithSlash);\n            limit_rate \(rate);\n        }\n"
        }
        for redirect in configuration.redirects {
            locations += "        location = \(quoted(redirect.from)) {\n            return \(redirect.status) \(quoted(redirect.location));\n        }\n"
        }
        if !configuration.extraServerDirectives.isEmpty {
            locations += configuration.extraServerDirectives + "\n"
        }
        var servers = "    server {\n" + listen(httpPort, ssl: false) + "        server_name localhost;\n" + locations
            + "    }\n"
        for site in configuration.tlsSites {
            guard let port = tlsPorts[site.name] else { continue }
            servers += "    server {\n" + listen(port, ssl: true)
            servers += "        server_name \(quoted(site.name));\n"
            servers += "        ssl_certificate \(quoted(site.certificatePath));\n"
            servers += "        ssl_certificate_key \(quoted(site.privateKeyPath));\n"
            servers += "        ssl_protocols TLSv1.2 TLSv1.3;\n"
            servers += "        ssl_session_cache shared:DKTLS:1m;\n"
            if let clientCA = site.clientCertificateAuthorityPath {
                servers += "        ssl_client_certificate \(quoted(clientCA));\n        ssl_verify_client on;\n"
            }
            servers += locations + "    }\n"
        }
        let temp = prefix + "/temp"
        return """
            # Generated by DownloadKit's TestOrigin.NginxServer.
            daemon off;
            master_process off;
            worker_processes 1;
            pid \(quoted(prefix + "/nginx.pid"));
            error_log \(quoted(prefix + "/logs/error.log")) info;

            events {
                worker_connections 1024;
            }

            http {
                types {
                    text/html html;
                    text/plain txt;
                    application/json json;
                }
                default_type application/octet-stream;
                log_format downloadkit escape=json '{\(logFormat)}';
                # No buffer= parameter: each entry is written as its request completes.
                access_log \(quoted(prefix + "/logs/access.log")) downloadkit;
                client_body_temp_path \(quoted(temp + "/client_body"));
                proxy_temp_path \(quoted(temp + "/proxy"));
                fastcgi_temp_path \(quoted(temp + "/fastcgi"));
                uwsgi_temp_path \(quoted(temp + "/uwsgi"));
                scgi_temp_path \(quoted(temp + "/scgi"));
                sendfile on;
                # tcp_nopush (TCP_CORK) adds ~250 µs to every small response on loopback, which skews
                # many-small-files benchmarks; with sendfile alone nginx already fills segments.
                tcp_nopush off;
                tcp_nodelay on;
                keepalive_timeout 65s;
                keepalive_requests \(configuration.keepaliveRequests);
                # Send Location values exactly as configured (relative ones stay relative).
                absolute_redirect off;
                server_tokens off;

            \(servers)}

            """
    }

    /// An nginx string literal in double quotes. `$` keeps its nginx meaning (a variable reference).
    static func quoted(_ value: String) -> String {
        var text = "\""
        for character in value {
            switch character {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            default: text.append(character)
            }
        }
        return text + "\""
    }

    // MARK: Process

    private static func launch(binary: String, prefix: String) throws -> ChildProcess {
        // -e (nginx ≥ 1.19.5) keeps nginx away from the system error log before it reads our config.
        try ChildProcess(
            binary, ["-p", prefix + "/", "-c", prefix + "/nginx.conf", "-e", prefix + "/logs/error.log"],
            outputPath: prefix + "/logs/stderr.log")
    }

    private static func waitUntilListening(process: ChildProcess, ports: [Int], prefix: String, timeout: Double) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let status = process.terminationStatus {
                throw OriginError("starting nginx", detail: "exited (wait status \(status))\n" + readLogs(prefix: prefix))
            }
            // nginx writes its pid file only after it has bound every listener (it keeps retrying a
            // busy port for a while with the others already bound), so a connectable port alone does
            // not prove it started.
            let pid = (try? String(contentsOfFile: prefix + "/nginx.pid", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
            if pid == String(process.pid), ports.allSatisfy(FreePort.acceptsConnections(port:)) { return }
            if Date() >= deadline {
                process.terminate(grace: 2)
                throw OriginError(
                    "starting nginx", detail: "ports \(ports) not listening after \(timeout) s\n" + readLogs(prefix: prefix))
            }
            usleep(10_000)
        }
    }

    private static func readLogs(prefix: String) -> String {
        let errorLog = (try? String(contentsOfFile: prefix + "/logs/error.log", encoding: .utf8)) ?? ""
        let standardError = (try? String(contentsOfFile: prefix + "/logs/stderr.log", encoding: .utf8)) ?? ""
        return errorLog + standardError
    }

    // MARK: Access log parsing

    static func parseAccessLogLine(_ line: String) throws -> NginxAccessLogEntry {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(line.utf8))
        } catch {
            throw OriginError("parsing the nginx access log", detail: "\(error): \(line)")
        }
        guard let fields = object as? [String: Any] else {
            throw OriginError("parsing the nginx access log", detail: "not an object: \(line)")
        }
        func text(_ key: String) -> String? {
            guard let value = fields[key] as? String, !value.isEmpty, value != "-" else { return nil }
            return value
        }
        func integer(_ key: String) throws -> Int64 {
            guard let value = text(key), let number = Int64(value) else {
                throw OriginError("parsing the nginx access log", detail: "field \(key) is not a number: \(line)")
            }
            return number
        }
        return NginxAccessLogEntry(
            method: text("method") ?? "",
            uri: text("uri") ?? "",
            status: Int(try integer("status")),
            bodyBytesSent: try integer("bodyBytesSent"),
            connection: Int(try integer("connection")),
            connectionRequests: Int(try integer("connectionRequests")),
            range: text("range"),
            ifRange: text("ifRange"),
            remotePort: Int(try integer("remotePort")),
            authorization: text("authorization"),
            cookie: text("cookie"),
            host: text("host"),
            serverPort: Int(try integer("serverPort")),
            scheme: text("scheme") ?? "http",
            tlsProtocol: text("sslProtocol"),
            tlsCipher: text("sslCipher"),
            tlsSessionReused: text("sslSessionReused") == "r",
            requestTime: text("requestTime").flatMap(Double.init) ?? 0,
            proxyAuthorization: text("proxyAuthorization")
        )
    }
}
