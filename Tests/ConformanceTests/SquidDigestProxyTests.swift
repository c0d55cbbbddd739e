import Foundation
import Glibc
import Testing
import TestOrigin

// Digest proxy authentication against a real squid (issue #47 item 3): squid configured with only
// `auth_param digest` answers the first request (absolute-form GET, or CONNECT) with a Digest 407; it is
// answered once, and every later connection of a segmented download carries Digest up front. Before,
// DownloadKit sent Basic and reported "it refused the credentials". nginx's log shows that no proxy
// credential reaches the origin.

@Suite(.serialized, .timeLimit(.minutes(2)))
struct SquidDigestProxyTests {
    static let size = 6 << 20
    static let seed: UInt64 = 0x5_9D1D

    /// nginx with the file over HTTP and TLS, and squid.
    final class Fixture: @unchecked Sendable {
        let root: ScratchDirectory
        let certificateDirectory: ScratchDirectory
        let certificates: TestCertificates
        let nginx: NginxServer
        let squid: SquidServer

        init() throws {
            root = try ScratchDirectory()
            certificateDirectory = try ScratchDirectory()
            _ = FileManager.default.createFile(
                atPath: root.file("file.bin"), contents: Data(TestPattern.bytes(offset: 0, count: size, seed: seed)))
            certificates = try TestCertificates.generate(in: certificateDirectory.path)
            let site = TLSSite(
                name: "valid", certificatePath: certificates.valid.certificatePath,
                privateKeyPath: certificates.valid.privateKeyPath)
            nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path, tlsSites: [site]))
            squid = try SquidServer(user: "alice", password: "s3cret-pw")
        }

        func stop() {
            nginx.stop()
            squid.stop()
        }

        /// The file's URL on nginx: plain HTTP by address, or the TLS site by the name its certificate holds.
        func url(scheme: String) -> String? {
            scheme == "https"
                ? nginx.tlsURL(site: "valid", path: "/file.bin", host: "localhost") : nginx.httpURL("/file.bin", host: "127.0.0.1")
        }
    }

    @Test(arguments: ["http", "https"])
    func segmentedDownloadThroughADigestOnlySquid(scheme: String) async throws {
        let fixture = try await offloaded { try Fixture() }
        defer { fixture.stop() }
        let dir = try ScratchDirectory()
        let url = try #require(fixture.url(scheme: scheme))
        let run = try await ProxyTests.runCLI(
            [
                "get", url, "-o", dir.file("file.bin"), "--progress", "none", "--connections", "4", "--retries", "0",
                "--cacert", fixture.certificates.caCertificatePath,
                "--proxy", fixture.squid.url(user: "alice", password: "s3cret-pw"),
            ], in: dir)
        let log = fixture.squid.accessLog()
        let described = log.map { "\($0.result) \($0.method) \($0.url) \($0.user ?? "-")" }.joined(separator: "\n")
        #expect(run.exitCode == 0, "\(run.output)\n\(described)\n\(fixture.squid.log.suffix(2000))")
        #expect(fileMatchesPattern(dir.file("file.bin"), size: Int64(Self.size), seed: Self.seed))
        // The first request is challenged; every request that got through was alice's, with Digest up
        // front. Concurrent connections send increasing nonce counts that may reach squid out of order,
        // which it may challenge again (check_nonce_count): each such 407 is answered, so only a few.
        let challenged = log.filter { $0.status == 407 }
        #expect(log.first?.status == 407 && log.first?.user == nil, "\(described)")
        #expect(challenged.count <= 1 + 4, "\(described)")
        #expect(log.count > challenged.count, "\(described)")
        #expect(log.filter { $0.status != 407 }.allSatisfy { $0.user == "alice" && [200, 206].contains($0.status) }, "\(described)")
        if scheme == "https" { #expect(log.allSatisfy { $0.method == "CONNECT" }, "\(described)") }
        // The proxy's credentials never reach the origin.
        #expect(try fixture.nginx.accessLog().allSatisfy { $0.proxyAuthorization == nil })
    }

    @Test(arguments: ["http", "https"])
    func wrongPasswordIsReportedAsRefused(scheme: String) async throws {
        let fixture = try await offloaded { try Fixture() }
        defer { fixture.stop() }
        let dir = try ScratchDirectory()
        let url = try #require(fixture.url(scheme: scheme))
        let run = try await ProxyTests.runCLI(
            [
                "get", url, "-o", dir.file("file.bin"), "--progress", "none", "--retries", "0",
                "--cacert", fixture.certificates.caCertificatePath,
                "--proxy", fixture.squid.url(user: "alice", password: "wrong"),
            ], in: dir)
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.output.contains("requires authentication (realm \"\(fixture.squid.realm)\")"), "\(run.output)")
        #expect(run.output.contains("it refused the credentials for user \"alice\""), "\(run.output)")
        #expect(!run.output.contains("wrong"), "\(run.output)")
    }
}
