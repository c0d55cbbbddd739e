import Foundation
import Glibc
import TestOrigin
import Testing
import TestThreads

@testable import HTTPClient

/// The system bundle named by `SSL_CERT_FILE` is parsed only when a handshake needs a root from it
/// (issue #47): `--cacert` with a chain that ends at that CA never pays for the bundle.
@Suite(.serialized, .offPool) struct TLSTrustBundleTests {
    let certificates: TestCertificates
    let directory: String

    init() throws {
        certificates = try sharedTestCertificates.get()
        directory = NSTemporaryDirectory() + "downloadkit-bundle-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory + "/empty", withIntermediateDirectories: true)
    }

    /// A PEM bundle of `paths` (certificate files) in the test directory.
    func bundle(_ name: String, of paths: [String]) throws -> String {
        let path = directory + "/" + name
        let text = try paths.map { try String(contentsOfFile: $0, encoding: .utf8) }.joined(separator: "\n")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// A system bundle of four certificates, the test CA among them.
    func systemBundleWithTestCA() throws -> String {
        try bundle(
            "system.pem",
            of: [otherCA, certificates.expired.certificatePath, certificates.wrongHost.certificatePath,
                certificates.caCertificatePath])
    }

    var otherCA: String { (certificates.caCertificatePath as NSString).deletingLastPathComponent + "/other-ca.pem" }

    func context(bundle: String, extraRoots: [String]) throws -> TLSContext {
        var configuration = DKTLSConfiguration.makeClientConfiguration()
        configuration.additionalTrustRootFiles = extraRoots
        return try TLSContext(
            configuration: configuration,
            systemTrustPaths: TLSContext.SystemTrustPaths(file: bundle, directory: directory + "/empty"))
    }

    func handshake(_ context: TLSContext, with server: OpenSSLServer) throws {
        let connection = try Connection.connect(
            host: "127.0.0.1", port: server.port, tls: context, serverName: "localhost", deadline: .after(seconds: 10))
        connection.close()
    }

    @Test func aChainEndingAtAnExtraRootNeverParsesTheBundle() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try OpenSSLServer(certificate: certificates.valid)
        defer { server.stop() }
        let system = try systemBundleWithTestCA()
        let context = try context(bundle: system, extraRoots: [certificates.caCertificatePath])
        try handshake(context, with: server)
        #expect(context.trustedCertificateCount == 1, "only the extra root is in the store")
    }

    @Test func aRootOnlyInTheBundleIsFoundWhenAHandshakeNeedsIt() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try OpenSSLServer(certificate: certificates.valid)
        defer { server.stop() }
        let system = try systemBundleWithTestCA()
        let context = try context(bundle: system, extraRoots: [])
        #expect(context.trustedCertificateCount == 0, "nothing parsed before a handshake needs it")
        try handshake(context, with: server)
        #expect(context.trustedCertificateCount == 4)
        try handshake(context, with: server)  // the second handshake finds it in the store
        #expect(context.trustedCertificateCount == 4)
    }

    @Test func aBundleWithoutTheIssuerStillRejectsTheServer() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try OpenSSLServer(certificate: certificates.valid)
        defer { server.stop() }
        let system = try bundle("others.pem", of: [otherCA])
        let error = transportError { try handshake(try context(bundle: system, extraRoots: []), with: server) }
        #expect(error?.code == .unknownIssuer)
    }
}
