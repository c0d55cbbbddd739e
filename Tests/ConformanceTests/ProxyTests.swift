import DownloadKit
import Foundation
import Glibc
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

// Proxies end to end (issue #17): the `downloadkit` CLI through real proxies from Debian's packages
// (tinyproxy for HTTP absolute-form and CONNECT with Basic auth, microsocks for SOCKS5 with RFC 1929
// auth) to nginx over HTTP and HTTPS, killed with SIGKILL and resumed through the same proxy; nginx's
// access log as the witness of which credentials reached the origin; NO_PROXY; and hostile proxies
// scripted here (407 forever, 200 then garbage, closing mid-tunnel).

/// nginx with a pattern file on HTTP and a TLS site, plus both proxies with
/// credentials. Everything is stopped and removed on release.
private final class ProxyFixture: @unchecked Sendable {
    static let size: Int64 = 6 << 20
    static let seed: UInt64 = 0x9_0C5
    let root: ScratchDirectory
    let certificateDirectory: ScratchDirectory
    let certificates: TestCertificates
    let nginx: NginxServer
    let tinyproxy: ProxyServer
    let microsocks: ProxyServer

    init() throws {
        root = try ScratchDirectory()
        certificateDirectory = try ScratchDirectory()
        _ = FileManager.default.createFile(
            atPath: root.file("file.bin"), contents: Data(TestPattern.bytes(offset: 0, count: Int(Self.size), seed: Self.seed)))
        certificates = try TestCertificates.generate(in: certificateDirectory.path)
        let site = TLSSite(
            name: "valid", certificatePath: certificates.valid.certificatePath,
            privateKeyPath: certificates.valid.privateKeyPath)
        nginx = try NginxServer(
            configuration: NginxConfiguration(documentRoot: root.path, tlsSites: [site]))
        tinyproxy = try ProxyServer(.tinyproxy, user: "alice", password: "s3cret")
        microsocks = try ProxyServer(.microsocks, user: "bob", password: "pw")
    }

    deinit {
        nginx.stop()
        tinyproxy.stop()
        microsocks.stop()
    }

    /// Builds the fixture off the cooperative pool (it starts processes and waits for their ports).
    static func make() async throws -> ProxyFixture {
        try await offloaded { try ProxyFixture() }
    }

    /// Stops the servers off the cooperative pool (each stop waits for a process to exit); the
    /// deinit's stops are then no-ops.
    func shutdown() async {
        _ = try? await offloaded { [self] in
            nginx.stop()
            tinyproxy.stop()
            microsocks.stop()
        }
    }

    /// `http(s)://localhost:PORT/file.bin`.
    func url(https: Bool, host: String = "localhost") -> String {
        https ? nginx.tlsURL(site: "valid", path: "/file.bin", host: host)! : nginx.httpURL("/file.bin", host: host)
    }
}

/// One way through a proxy.
enum ProxyRoute: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case httpProxyToHTTP, httpProxyConnectToHTTPS, socks5ToHTTP, socks5ToHTTPS, socks5hToHTTP, socks5hToHTTPS

    var https: Bool { rawValue.hasSuffix("HTTPS") }
    var scheme: String {
        switch self {
        case .httpProxyToHTTP, .httpProxyConnectToHTTPS: "http"
        case .socks5ToHTTP, .socks5ToHTTPS: "socks5"
        case .socks5hToHTTP, .socks5hToHTTPS: "socks5h"
        }
    }
    var testDescription: String { rawValue }
}

/// Serialized: each case starts nginx, two proxies and generates certificates; one at a time keeps the
/// suite from starving the timing-sensitive tests that run beside it on a 2-core machine.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ProxyTests {
    /// Whether `path` holds the fixture's file, checked off the cooperative pool (6 MiB of pattern).
    static func matchesPattern(_ path: String) async throws -> Bool {
        try await offloaded { fileMatchesPattern(path, size: ProxyFixture.size, seed: ProxyFixture.seed) }
    }

    /// Runs the CLI with extra environment variables, to completion, off the cooperative pool.
    static func runCLI(_ arguments: [String], environment: [String: String] = [:], in dir: ScratchDirectory)
        async throws -> CLITests.Run
    {
        let executable = try #require(CLITests.executable, "downloadkit not built; run swift build --build-tests")
        let env = "/usr/bin/env"
        let assignments = environment.map { "\($0.key)=\($0.value)" }
        // Proxy variables of the test's own environment must not leak into these runs.
        let unset = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"]
            .flatMap { ["-u", $0] }
        return try await CLITests.runOffPool(env, unset + assignments + [executable] + arguments, in: dir, timeout: 120)
    }

    /// Starts the CLI at 256 KB/s (`--limit-rate`, so the 6 MiB file needs 24 s) and kills it with
    /// SIGKILL once the partial file holds at least `bytes`. Polls on its own thread, so a busy
    /// cooperative pool cannot delay the kill until the download is done.
    static func killMidway(_ arguments: [String], in dir: ScratchDirectory, partial: String, bytes: Int64) async throws
        -> Int64
    {
        let executable = try #require(CLITests.executable)
        let log = dir.path + "/../kill-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess(
            "/usr/bin/env",
            ["-u", "http_proxy", "-u", "https_proxy", "-u", "all_proxy", executable] + arguments + ["--limit-rate", "256K"],
            outputPath: log)
        let (size, status) = try await offloaded { () -> (Int64, Int32?) in
            var size: Int64 = 0
            for _ in 0..<12_000 where child.isRunning {  // at most 60 s
                size = dir.size(partial) ?? 0
                if size >= bytes { break }
                usleep(5_000)
            }
            kill(child.pid, SIGKILL)
            _ = child.waitForExit(timeout: 10)
            return (size, child.terminationStatus)
        }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(size >= bytes, "the first run wrote \(size) bytes before the kill (exit status \(String(describing: status)), files \(dir.contents)): \(output)")
        return dir.size(partial) ?? 0
    }

    @Test(arguments: ProxyRoute.allCases)
    func downloadKilledWithSIGKILLResumesThroughTheSameProxy(_ route: ProxyRoute) async throws {
        let fixture = try await ProxyFixture.make()
        let dir = try ScratchDirectory()
        let proxyServer = route.scheme == "http" ? fixture.tinyproxy : fixture.microsocks
        let (user, password) = route.scheme == "http" ? ("alice", "s3cret") : ("bob", "pw")
        let proxy = proxyServer.url(scheme: route.scheme, user: user, password: password)
        let arguments = [
            "get", fixture.url(https: route.https), "-o", dir.file("f.bin"), "--proxy", proxy,
            "--cacert", fixture.certificates.caCertificatePath, "--progress", "none",
        ]
        let killedAt = try await Self.killMidway(arguments, in: dir, partial: "f.bin.dkpart", bytes: 256 << 10)
        let rerun = try await Self.runCLI(arguments, in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(try await Self.matchesPattern(dir.file("f.bin")))
        #expect(dir.contents == ["f.bin"])

        let entries = try fixture.nginx.accessLog().filter { $0.uri == "/file.bin" }
        #expect(entries.count >= 2)
        // Proxy credentials reached the proxy (it requires them) and never the origin.
        #expect(entries.allSatisfy { $0.proxyAuthorization == nil && $0.authorization == nil }, "\(entries)")
        #expect(entries.allSatisfy { $0.scheme == (route.https ? "https" : "http") })
        // The rerun resumed where the killed run's durable bytes ended, not from zero.
        let resumedFrom = entries.last?.range.flatMap { Int64($0.dropFirst(6).split(separator: "-").first ?? "") }
        #expect(resumedFrom != nil && resumedFrom! > 0 && resumedFrom! <= killedAt, "ranges \(entries.map(\.range)), killed at \(killedAt)")
        if route.scheme == "http" {
            let log = fixture.tinyproxy.log
            let expected = route.https ? "CONNECT localhost:\(fixture.nginx.tlsPorts["valid"]!)" : "GET http://localhost:\(fixture.nginx.httpPort)/file.bin"
            #expect(log.contains(expected), "tinyproxy saw the requests: \(log.suffix(2000))")
        }

        // Without the right credentials the same download fails with a typed, named cause.
        // (tinyproxy answers wrong credentials with 401, not 407, so give it none: 407 is the proxy's own word.)
        let wrong = route.scheme == "http"
            ? proxyServer.url(scheme: route.scheme) : proxyServer.url(scheme: route.scheme, user: user, password: "wrong")
        let refused = try await Self.runCLI(
            ["get", fixture.url(https: route.https), "-o", dir.file("g.bin"), "--proxy", wrong,
             "--cacert", fixture.certificates.caCertificatePath, "--progress", "none", "--retries", "0"], in: dir)
        #expect(refused.exitCode == 4, "\(refused.output)")
        let cause = route.scheme == "http" ? "requires authentication (realm \"Tinyproxy\")" : "refused the user name/password"
        #expect(refused.output.contains("error:") && refused.output.contains(cause), "\(refused.output)")
        await fixture.shutdown()
    }

    @Test func segmentsShareTunnelsThroughTheProxy() async throws {
        let fixture = try await ProxyFixture.make()
        let dir = try ScratchDirectory()
        let proxy = fixture.tinyproxy.url(scheme: "http", user: "alice", password: "s3cret")
        let result = try await Self.runCLI(
            ["get", fixture.url(https: true), "-o", dir.file("s.bin"), "--proxy", proxy,
             "--cacert", fixture.certificates.caCertificatePath, "--connections", "3", "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(try await Self.matchesPattern(dir.file("s.bin")))
        let entries = try fixture.nginx.accessLog().filter { $0.uri == "/file.bin" }
        #expect(entries.filter { $0.range != nil }.count >= 2, "range requests through CONNECT tunnels: \(entries.map(\.range))")
        // Kept-alive tunnels were reused: fewer TLS connections than requests.
        #expect(Set(entries.map(\.connection)).count < entries.count, "\(entries.map(\.connection))")
        #expect(entries.allSatisfy { $0.proxyAuthorization == nil })
        await fixture.shutdown()
    }

    @Test func queueRunDownloadsThroughTheProxyGivenToIt() async throws {
        let fixture = try await ProxyFixture.make()
        let dir = try ScratchDirectory()
        let state = dir.file("state")
        let added = try await Self.runCLI(
            ["queue", "--state", state, "add", fixture.url(https: true), "-o", dir.file("q.bin")], in: dir)
        #expect(added.exitCode == 0, "\(added.output)")
        let refused = try await Self.runCLI(
            ["queue", "--state", state, "run", "--progress", "none",
             "--proxy", fixture.microsocks.url(scheme: "socks5h", user: "bob", password: "nope")], in: dir)
        #expect(refused.exitCode == 4 && refused.output.contains("refused the user name/password"), "\(refused.output)")
        _ = try await Self.runCLI(["queue", "--state", state, "resume", "--all"], in: dir)
        let run = try await Self.runCLI(
            ["queue", "--state", state, "run", "--progress", "none",
             "--proxy", fixture.microsocks.url(scheme: "socks5h", user: "bob", password: "pw")],
            environment: ["SSL_CERT_FILE": fixture.certificates.caCertificatePath], in: dir)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(try await Self.matchesPattern(dir.file("q.bin")))
        await fixture.shutdown()
    }

    @Test func noProxyFromTheEnvironmentOrTheCommandLineBypassesTheProxy() async throws {
        let fixture = try await ProxyFixture.make()
        let dir = try ScratchDirectory()
        let dead = "http://127.0.0.1:\(try FreePort.allocate(count: 1)[0])"  // nothing listens there
        let url = fixture.url(https: false, host: "127.0.0.1")
        let viaDead = try await Self.runCLI(
            ["get", url, "-o", dir.file("a.bin"), "--progress", "none", "--retries", "0"],
            environment: ["http_proxy": dead], in: dir)
        #expect(viaDead.exitCode == 4, "the environment's proxy is used: \(viaDead.output)")
        #expect(viaDead.output.contains("through proxy \(dead)"), "\(viaDead.output)")

        let bypassed = try await Self.runCLI(
            ["get", url, "-o", dir.file("a.bin"), "--progress", "none"],
            environment: ["http_proxy": dead, "NO_PROXY": "localhost,127.0.0.0/8"], in: dir)
        #expect(bypassed.exitCode == 0, "\(bypassed.output)")
        let flag = try await Self.runCLI(
            ["get", url, "-o", dir.file("b.bin"), "--progress", "none", "--proxy", dead, "--noproxy", "127.0.0.1"], in: dir)
        #expect(flag.exitCode == 0, "\(flag.output)")
        let disabled = try await Self.runCLI(
            ["get", url, "-o", dir.file("c.bin"), "--progress", "none", "--proxy", ""],
            environment: ["http_proxy": dead], in: dir)
        #expect(disabled.exitCode == 0, "--proxy \"\" ignores the environment: \(disabled.output)")
        for name in ["a.bin", "b.bin", "c.bin"] {
            #expect(try await Self.matchesPattern(dir.file(name)))
        }
        let badVariable = try await Self.runCLI(
            ["get", url, "-o", dir.file("d.bin"), "--progress", "none"], environment: ["http_proxy": "ftp://x"], in: dir)
        #expect(badVariable.exitCode == 64 && badVariable.output.contains("http_proxy"), "\(badVariable.output)")
        await fixture.shutdown()
    }

    /// Origin credentials go inside the tunnel only; the proxy sees the CONNECT line with its own
    /// credentials, then TLS.
    @Test func originCredentialsStayInsideTheTunnelAndProxyCredentialsOutside() async throws {
        let fixture = try await ProxyFixture.make()
        let proxy = try ScriptedProxy(.relay(closeAfterBytes: nil))
        defer { proxy.stop() }
        var configuration = DKHTTPClientConfiguration(
            connectTimeout: .seconds(10), idleTimeout: .seconds(10),
            tls: DKTLSConfiguration(additionalTrustRootFiles: [fixture.certificates.caCertificatePath]))
        configuration.proxy = ProxyConfiguration(all: try ProxyURL("http://px:pxpw@127.0.0.1:\(proxy.port)"))
        let client = try DKHTTPClient(configuration: configuration)
        let port = fixture.nginx.tlsPorts["valid"]!
        let request = DKHTTPRequest(
            url: try HTTPURL("https://origin-user:origin-pw@localhost:\(port)/file.bin"),
            headers: ["Range": "bytes=0-99", "Proxy-Authorization": "Basic bGVhazpsZWFr"])
        let summary = try await offloaded {
            try client.execute(request, onHead: { _ in .discard }, onBody: { _ in })
        }
        #expect(summary.head.status == 206)
        let seen = String(decoding: proxy.receivedHeads.first ?? [], as: UTF8.self)
        #expect(seen.hasPrefix("CONNECT localhost:\(port) HTTP/1.1\r\n"), "\(seen)")
        #expect(seen.contains("Proxy-Authorization: Basic cHg6cHhwdw==\r\n"))
        #expect(!seen.contains("\r\nAuthorization:") && !seen.contains("origin") && !seen.contains("bGVhazpsZWFr"))
        #expect(proxy.firstTunnelByte == 0x16, "TLS handshake record right after CONNECT")
        let entry = try #require(try await offloaded { try fixture.nginx.accessLog(waitingFor: 1) }.last)
        #expect(entry.authorization == "Basic " + Base64.encode("origin-user:origin-pw"))
        #expect(entry.proxyAuthorization == nil, "a caller's Proxy-Authorization never enters the tunnel")
        await fixture.shutdown()
    }

    enum HostileCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case answers407Forever, answers200ThenGarbage, closesMidTunnel
        var testDescription: String { rawValue }
    }

    @Test(arguments: HostileCase.allCases)
    func hostileProxyGivesATypedErrorAndKeepsThePartialFile(_ hostile: HostileCase) async throws {
        let fixture = try await ProxyFixture.make()
        let dir = try ScratchDirectory()
        let mode: ScriptedProxy.Mode =
            switch hostile {
            case .answers407Forever: .always407
            case .answers200ThenGarbage: .okThenGarbage
            case .closesMidTunnel: .relay(closeAfterBytes: 300 << 10)
            }
        let proxy = try ScriptedProxy(mode)
        defer { proxy.stop() }
        let direct = [
            "get", fixture.url(https: true), "-o", dir.file("h.bin"), "--cacert", fixture.certificates.caCertificatePath,
            "--progress", "none",
        ]
        let partial = try await Self.killMidway(direct, in: dir, partial: "h.bin.dkpart", bytes: 128 << 10)

        let viaProxy = try await Self.runCLI(
            direct + ["--proxy", "http://u:p@127.0.0.1:\(proxy.port)", "--retries", "0"], in: dir)
        #expect(viaProxy.exitCode == 4, "\(viaProxy.output)")
        let cause =
            switch hostile {
            case .answers407Forever: "requires authentication (realm \"hostile\")"
            case .answers200ThenGarbage: "bytes after \"200"
            case .closesMidTunnel: "through proxy http://u:***@127.0.0.1:\(proxy.port)"
            }
        #expect(viaProxy.output.contains("error:") && viaProxy.output.contains(cause), "\(viaProxy.output)")
        let kept = dir.size("h.bin.dkpart") ?? 0
        #expect(kept >= partial && dir.contents.contains("h.bin.dkresume"), "partial kept: \(kept) ≥ \(partial)")
        if hostile == .closesMidTunnel {
            #expect(kept > partial, "bytes that came through the tunnel before it closed were kept")
        }
        let finish = try await Self.runCLI(direct, in: dir)
        #expect(finish.exitCode == 0, "\(finish.output)")
        #expect(try await Self.matchesPattern(dir.file("h.bin")))
        await fixture.shutdown()
    }
}

/// A small scripted HTTP proxy on 127.0.0.1 for hostile behaviour: it reads a request head, then
/// answers per its mode. Blocking sockets on its own threads; ``stop()`` closes everything.
final class ScriptedProxy: @unchecked Sendable {
    enum Mode: Sendable {
        /// `407` with `Proxy-Authenticate: Basic realm="hostile"` to every request.
        case always407
        /// `200` to CONNECT immediately followed by bytes that are not TLS.
        case okThenGarbage
        /// A real CONNECT relay to 127.0.0.1:port; closes both sides after relaying this many bytes
        /// towards the client (`nil`: never).
        case relay(closeAfterBytes: Int?)
        /// Reads the request head and closes without a byte of answer.
        case closeAfterHead
        /// `407` with this `Proxy-Authenticate` value, to every request.
        case challenge407(String)
    }

    let port: Int
    private let listener: Int32
    private let mode: Mode
    private let lock = NSLock()
    private var sockets: Set<Int32> = []
    private var heads: [[UInt8]] = []
    private var tunnelByte: UInt8?
    private var stopped = false

    init(_ mode: Mode) throws {
        self.mode = mode
        guard let fd = loopbackSocket(port: 0, listening: true) else {
            throw OriginError("ScriptedProxy listen", errno: errno)
        }
        var storage = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: storage.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// The request heads received, in order.
    var receivedHeads: [[UInt8]] { lock.withLock { heads } }
    /// The first byte the client sent inside a relayed tunnel.
    var firstTunnelByte: UInt8? { lock.withLock { tunnelByte } }

    func stop() {
        let open: Set<Int32> = lock.withLock {
            stopped = true
            return sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit {
        stop()
        close(listener)
    }

    private func track(_ fd: Int32) -> Bool {
        lock.withLock {
            if stopped { return false }
            sockets.insert(fd)
            return true
        }
    }

    private func finish(_ fds: Int32...) {
        lock.withLock { for fd in fds { sockets.remove(fd) } }
        for fd in fds { close(fd) }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            guard track(client) else {
                close(client)
                return
            }
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return false }
            offset += sent
        }
        return true
    }

    private func readHead(_ fd: Int32) -> [UInt8]? {
        var head: [UInt8] = []
        var byte: UInt8 = 0
        while !head.suffix(4).elementsEqual("\r\n\r\n".utf8) {
            guard recv(fd, &byte, 1, 0) == 1, head.count < 65536 else { return nil }
            head.append(byte)
        }
        return head
    }

    private func serve(_ client: Int32) {
        guard let head = readHead(client) else { return finish(client) }
        lock.withLock { heads.append(head) }
        switch mode {
        case .always407:
            _ = send(client, Array("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"hostile\"\r\nContent-Length: 0\r\n\r\n".utf8))
            finish(client)
        case .okThenGarbage:
            _ = send(client, Array("HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-garbage\r\n".utf8))
            finish(client)
        case .relay(let limit):
            relay(client, head: head, limit: limit)
        case .closeAfterHead:
            finish(client)
        case .challenge407(let challenge):
            _ = send(client, Array("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: \(challenge)\r\nContent-Length: 0\r\n\r\n".utf8))
            finish(client)
        }
    }

    private func relay(_ client: Int32, head: [UInt8], limit: Int?) {
        let line = String(decoding: head.prefix { $0 != 13 }, as: UTF8.self)
        guard line.hasPrefix("CONNECT "), let portText = line.split(separator: " ")[1].split(separator: ":").last,
            let port = UInt16(portText)
        else { return finish(client) }
        guard let upstream = loopbackSocket(port: port, listening: false) else { return finish(client) }
        guard track(upstream), send(client, Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8))
        else { return finish(client, upstream) }
        var relayed = 0
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var entries = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: upstream, events: Int16(POLLIN), revents: 0)]
        loop: while poll(&entries, 2, 30_000) > 0 {
            for (index, entry) in entries.enumerated() where entry.revents != 0 {
                let from = index == 0 ? client : upstream
                let to = index == 0 ? upstream : client
                var want = buffer.count
                if index == 1, let limit { want = min(want, limit - relayed) }
                let count = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, want, 0) }
                if count <= 0 { break loop }
                if index == 0 { lock.withLock { if tunnelByte == nil { tunnelByte = buffer[0] } } }
                guard send(to, Array(buffer[0..<count])) else { break loop }
                if index == 1 {
                    relayed += count
                    if let limit, relayed >= limit { break loop }  // close mid-tunnel
                }
            }
        }
        finish(client, upstream)
    }
}

/// A blocking TCP socket for 127.0.0.1:`port`: bound and listening (`port` 0: a free port), or
/// connected to it. `nil` on failure (`errno` tells why).
func loopbackSocket(port: UInt16, listening: Bool) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let size = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            listening ? bind(fd, pointer, size) == 0 && listen(fd, 16) == 0 : connect(fd, pointer, size) == 0
        }
    }
    guard ok else {
        let saved = errno
        close(fd)
        errno = saved
        return nil
    }
    return fd
}
