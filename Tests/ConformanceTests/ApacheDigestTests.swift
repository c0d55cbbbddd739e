import Foundation
import Glibc
import HTTPClient
import TestOrigin
import Testing

// Digest authentication against a real Apache httpd (mod_auth_digest), issue #47 item 1: a segmented
// download whose range requests outlive the server's nonce lifetime meets `401 … stale=true` on every
// connection, and each is answered with the new nonce instead of ending the download ("HTTP status 401").

@Suite(.serialized, .timeLimit(.minutes(2)))
struct ApacheDigestTests {
    static let user = "alice"
    static let password = "s3cret pass"
    static let realm = "downloadkit digest"
    static let seed: UInt64 = 0xD16E57

    /// The SHA-256 of a file's bytes, lower-case hex.
    static func sha256(_ path: String) throws -> String {
        let data = try #require(FileManager.default.contents(atPath: path), "cannot read \(path)")
        let digest = DKDigest(.sha256)
        data.withUnsafeBytes { digest.update($0) }
        return DKDigest.hex(digest.finalize())
    }

    /// 24 MiB over 4 connections at 4 MiB/s: the first 4 MiB range of each connection takes ~4 s, so
    /// the second round of range requests goes out long after the 2-second nonce expired.
    @Test func segmentedDownloadAnswersStaleNonceOnEveryConnection() async throws {
        let root = try ScratchDirectory()
        chmod(root.path, 0o755)  // Apache's children run as nobody
        let size = 24 << 20
        let source = root.file("big.bin")
        #expect(FileManager.default.createFile(atPath: source, contents: Data(TestPattern.bytes(offset: 0, count: size, seed: Self.seed))))
        let apache = try await offloaded {
            try ApacheServer(
                documentRoot: root.path, realm: Self.realm, user: Self.user, password: Self.password, nonceLifetime: 2)
        }
        defer { apache.stop() }
        let output = try ScratchDirectory()
        let run = try await CLITests().run(
            [
                "get", apache.url("/big.bin"), "-o", output.file("big.bin"), "--progress", "none", "--connections", "4",
                "--limit-rate", "4M", "--user", "\(Self.user):\(Self.password)",
            ], in: output, timeout: 90)
        let log = try apache.accessLog()
        let summary = log.map { "\($0.remotePort) \($0.status) \($0.range ?? "-") \($0.isStaleChallenge ? "stale" : "")" }
        #expect(run.exitCode == 0, "\(run.output)\n\(summary.joined(separator: "\n"))")
        #expect(try Self.sha256(output.file("big.bin")) == Self.sha256(source))
        // Apache's log: a stale 401 mid-way, answered on the same connection by a 206 for the same range.
        let stale = log.indices.filter { log[$0].isStaleChallenge }
        #expect(!stale.isEmpty, "no stale nonce met: \(summary)")
        for index in stale {
            let answer = log[(index + 1)...].first { $0.remotePort == log[index].remotePort }
            #expect(answer?.status == 206 && answer?.range == log[index].range, "\(summary)")
        }
        #expect(log.filter { $0.status == 401 }.count == 1 + stale.count, "only the first and the stale ones: \(summary)")
    }
}
