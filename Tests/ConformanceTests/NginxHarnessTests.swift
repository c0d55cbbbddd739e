import Foundation
import Testing
import TestOrigin

/// A temporary directory removed when the value goes away.
final class TemporaryDirectory {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("dk-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func write(_ name: String, _ bytes: [UInt8]) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path + "/" + name))
    }
}

@Suite(
    "nginx harness",
    .enabled(if: peerRequired(NginxServer.locate() != nil), "nginx not installed: run Scripts/install-deps.sh"),
    .timeLimit(.minutes(1))
)
struct NginxHarnessTests {
    static let fileSize = 1 << 20
    static let seed: UInt64 = 11

    private func makeDocumentRoot() throws -> TemporaryDirectory {
        let root = try TemporaryDirectory()
        try root.write("big.bin", TestPattern.bytes(offset: 0, count: Self.fileSize, seed: Self.seed))
        try root.write("small.txt", Array("hello from nginx\n".utf8))
        return root
    }

    @Test func servesAFileAndARangeOnOneConnectionAndLogsRangeReuseAndCredentials() throws {
        let root = try makeDocumentRoot()
        let nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path))
        defer { nginx.stop() }
        #expect(nginx.httpURL("/big.bin") == "http://127.0.0.1:\(nginx.httpPort)/big.bin")
        #expect(nginx.httpURL("/big.bin", host: "localhost") == "http://localhost:\(nginx.httpPort)/big.bin")

        let cpuBefore = try #require(nginx.cpuSeconds(), "nginx's CPU time is read from /proc while it runs")
        #expect(cpuBefore >= 0)
        let connection = try RawHTTPConnection(port: nginx.httpPort)
        let full = try connection.request("GET", "/big.bin")
        #expect(full.status == 200)
        #expect(full.header("Accept-Ranges") == "bytes")
        #expect(full.header("ETag") != nil)
        #expect(isPattern(full.body, offset: 0, count: Self.fileSize, seed: Self.seed))

        let part = try connection.request(
            "GET", "/big.bin",
            headers: [("Range", "bytes=1000-1999"), ("Authorization", "Bearer secret"), ("Cookie", "a=1")])
        #expect(part.status == 206)
        #expect(part.header("Content-Range") == "bytes 1000-1999/\(Self.fileSize)")
        #expect(isPattern(part.body, offset: 1000, count: 1000, seed: Self.seed))

        let entries = try nginx.accessLog(waitingFor: 2)
        try #require(entries.count == 2)
        #expect(entries[0].method == "GET")
        #expect(entries[0].uri == "/big.bin")
        #expect(entries[0].status == 200)
        #expect(entries[0].bodyBytesSent == Int64(Self.fileSize))
        #expect(entries[0].range == nil)
        #expect(entries[0].authorization == nil)
        #expect(entries[1].status == 206)
        #expect(entries[1].range == "bytes=1000-1999")
        #expect(entries[1].bodyBytesSent == 1000)
        #expect(entries[1].authorization == "Bearer secret")
        #expect(entries[1].cookie == "a=1")
        #expect(entries[1].connection == entries[0].connection, "both requests used one kept-alive connection")
        #expect(entries.map(\.connectionRequests) == [1, 2])
        #expect(entries[0].scheme == "http")
        #expect(entries[0].serverPort == nginx.httpPort)
        #expect(entries[0].tlsProtocol == nil)
        #expect(entries[0].tlsCipher == nil)
        #expect(try #require(nginx.cpuSeconds()) >= cpuBefore)
        nginx.stop()
        #expect(nginx.cpuSeconds() == nil, "no process, no figure")
    }

    @Test func configuredRedirectAnswersWithItsStatusAndVerbatimLocation() throws {
        let root = try makeDocumentRoot()
        let nginx = try NginxServer(
            configuration: NginxConfiguration(
                documentRoot: root.path,
                limitRate: 10_000_000,
                redirects: [NginxRedirect(from: "/old", status: 302, to: "/small.txt")]))
        defer { nginx.stop() }
        let connection = try RawHTTPConnection(port: nginx.httpPort)
        let redirect = try connection.request("GET", "/old")
        #expect(redirect.status == 302)
        #expect(redirect.header("Location") == "/small.txt")
        let limited = try connection.request("GET", "/limited/small.txt")
        #expect(limited.status == 200)
        #expect(limited.body == Array("hello from nginx\n".utf8))
        #expect(try connection.request("GET", "/missing").status == 404)
    }

    @Test(.enabled(if: peerRequired(ProcessRunner.findExecutable("openssl") != nil), "openssl CLI not installed"))
    func tlsSiteListensOnItsOwnPortAndCompletesAHandshake() throws {
        let root = try makeDocumentRoot()
        let keys = try TemporaryDirectory()
        let certificate = keys.path + "/cert.pem", key = keys.path + "/key.pem"
        let generated = try ProcessRunner.run(
            "openssl",
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1",
             "-keyout", key, "-out", certificate])
        try #require(generated.succeeded, "openssl req failed: \(generated.output)")

        let site = TLSSite(name: "localhost", certificatePath: certificate, privateKeyPath: key)
        let nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path, tlsSites: [site]))
        defer { nginx.stop() }
        let port = try #require(nginx.tlsPorts["localhost"])
        #expect(port != nginx.httpPort)
        #expect(FreePort.acceptsConnections(port: port))
        #expect(nginx.tlsURL(site: "localhost", path: "/big.bin", host: "localhost") == "https://localhost:\(port)/big.bin")
        #expect(nginx.tlsURL(site: "unknown", path: "/") == nil)

        let handshake = try ProcessRunner.run(
            "openssl", ["s_client", "-connect", "127.0.0.1:\(port)", "-servername", "localhost", "-brief"])
        #expect(handshake.output.contains("TLSv1.3"), "s_client output: \(handshake.output)")

        // The log names the negotiated suite ($ssl_cipher), which the benchmark reports per client.
        let fetched = try ProcessRunner.run("curl", ["-sS", "-k", "--tlsv1.3", "-o", "/dev/null", "https://127.0.0.1:\(port)/small.txt"])
        #expect(fetched.succeeded, "curl: \(fetched.output)")
        let entries = try nginx.accessLog(waitingFor: 1)
        let entry = try #require(entries.last)
        #expect(entry.scheme == "https")
        #expect(entry.tlsProtocol == "TLSv1.3")
        #expect(entry.tlsCipher?.hasPrefix("TLS_") == true, "logged suite: \(entry.tlsCipher ?? "none")")
    }

    @Test func startupFailureThrowsWithNginxsOwnErrorMessage() throws {
        let root = try makeDocumentRoot()
        let error = #expect(throws: OriginError.self) {
            try NginxServer(
                configuration: NginxConfiguration(documentRoot: root.path, extraServerDirectives: "bogus_directive on;"))
        }
        #expect(error?.description.contains("bogus_directive") == true)
    }
}

/// Under CI=true a missing peer runs (and fails) the tests that need it instead of disabling them.
@Test(arguments: [
    (installed: true, environment: [String: String](), runs: true),
    (installed: false, environment: [:], runs: false),
    (installed: false, environment: ["CI": "true"], runs: true),
    (installed: false, environment: ["CI": "false"], runs: false),
])
func aMissingPeerFailsUnderCIInsteadOfDisablingTests(installed: Bool, environment: [String: String], runs: Bool) {
    #expect(peerRequired(installed, environment: environment) == runs)
}
