import Foundation
import Logging
import Testing
import TestOrigin
import TestThreads

@testable import HTTPClient

@Suite("HTTPClient logs its connection decisions", .offPool)
struct ClientLoggingTests {
    @Test func aNewConnectionThenItsReuseAreLoggedAtDebugWithTheOrigin() throws {
        let origin = try FaultOrigin()
        origin.serve("/a", .resource(Resource(size: 4096, seed: 3)))
        let handler = CapturingLogHandler()
        let client = try DKHTTPClient(logger: Logger(label: "test") { _ in handler })
        _ = try fetch(client, origin.url("/a"))
        _ = try fetch(client, origin.url("/a"))
        let lines = handler.lines
        #expect(lines.count == 2, "\(lines.map(\.message))")
        #expect(lines.allSatisfy { $0.level == .debug })
        #expect(lines.first?.message.hasPrefix("connected 1 to 127.0.0.1:") == true)
        #expect(lines.first?.message.contains("over IPv4") == true)
        #expect(lines.last?.message == "reusing connection 1")
        #expect(lines.allSatisfy { $0.metadata["http.connection"] == "1" })
        #expect(lines.allSatisfy { "\($0.metadata["http.origin"] ?? "")".contains("127.0.0.1") })
    }

    @Test func aTLSConnectionLogsItsVersionAndCipher() throws {
        let certificates = try sharedTestCertificates.get()
        let server = try OpenSSLServer(certificate: certificates.valid)
        defer { server.stop() }
        var configuration = DKHTTPClientConfiguration()
        configuration.tls.useSystemTrustRoots = false
        configuration.tls.additionalTrustRootFiles = [certificates.caCertificatePath]
        let handler = CapturingLogHandler()
        let client = try DKHTTPClient(configuration: configuration, logger: Logger(label: "test") { _ in handler })
        // s_server -www answers HTTP/1.0 and may close without close_notify: only the log matters here.
        _ = try? fetch(client, "https://127.0.0.1:\(server.port)/")
        let connected = try #require(handler.lines.first { $0.message.hasPrefix("connected") })
        #expect(connected.message.contains(", TLSv1.3 TLS_"), "\(connected.message)")
    }

    @Test func aFailedConnectIsLoggedWithItsError() throws {
        // A port nothing listens on: take one from the kernel and close it.
        let port = try #require(LoopbackListener()).port
        let handler = CapturingLogHandler()
        var configuration = DKHTTPClientConfiguration()
        configuration.proxy = .direct
        let client = try DKHTTPClient(configuration: configuration, logger: Logger(label: "test") { _ in handler })
        #expect(throws: TransportError.self) { try fetch(client, "http://127.0.0.1:\(port)/") }
        let lines = handler.lines
        #expect(lines.contains { $0.message.hasPrefix("connect failed:") })
    }
}
