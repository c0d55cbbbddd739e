import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// RFC 6249 (Metalink/HTTP) at run time (issue #48, docs/MIRRORS.md): the first response's
/// `Link: rel=duplicate` targets join as mirrors, and its `Digest`/`Repr-Digest` of the whole file is
/// checked when the request has no checksum. Fault origins send the headers; their logs witness the rest.
@Suite(.timeLimit(.minutes(3)))
struct MirrorLinkTests {
    static let size: Int64 = 8 << 20
    static let seed: UInt64 = 0x6249

    static func configuration(maxLinkMirrors: Int = 4) -> DownloadConfiguration {
        var configuration = DownloadConfiguration(
            retries: 3, retryBaseDelay: .milliseconds(10), maxRetryDelay: .milliseconds(50),
            client: DKHTTPClientConfiguration(connectTimeout: .seconds(20), idleTimeout: .seconds(20)))
        configuration.connections = 3
        configuration.minimumSegmentSize = 256 << 10
        configuration.maxLinkMirrors = maxLinkMirrors
        return configuration
    }

    /// Two good duplicates join (their logs show ranges, none with the caller's `Authorization`); a link
    /// with userinfo, an ftp one and a relative one are ignored (the userinfo origin is never asked).
    @Test(arguments: [4, 0]) func linkDuplicatesJoinAsMirrorsWithoutCredentials(_ limit: Int) async throws {
        let mirrors = try (0..<3).map { _ in try FaultOrigin() }
        for mirror in mirrors { mirror.serve("/l", .resource(Resource(size: Self.size, seed: Self.seed, bytesPerSecond: 4 << 20))) }
        let smuggled = mirrors[2].url("/l").replacingOccurrences(of: "http://", with: "http://user:hunter2@")
        let first = try FaultOrigin()
        first.serve("/l", .resource(Resource(
            size: Self.size, seed: Self.seed, bytesPerSecond: 4 << 20,
            extraHeaders: [
                ("Link", "<\(smuggled)>; rel=duplicate; pri=1"),
                ("Link", "<\(mirrors[1].url("/l"))>; rel=duplicate; pri=3, <ftp://127.0.0.1/l>; rel=duplicate"),
                ("Link", "<\(mirrors[0].url("/l"))>; rel=duplicate; pri=2, </l>; rel=duplicate"),
            ])))
        let dir = try ScratchDirectory()
        var headers = DKHTTPHeaders()
        headers.add(name: "Authorization", value: "Bearer link-secret")
        let request = DownloadRequest(url: first.url("/l"), destination: .file(dir.file("l")), headers: headers)
        let (result, _) = await runDownload(request, configuration: Self.configuration(maxLinkMirrors: limit))
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("l"), size: Self.size, seed: Self.seed))
        #expect(mirrors[2].requests("/l").isEmpty, "a link with userinfo is never followed")
        if limit == 0 {
            #expect(done.sources.isEmpty)
            #expect(mirrors[0].requests("/l").isEmpty && mirrors[1].requests("/l").isEmpty)
            return
        }
        #expect(done.sources.map(\.url) == [first.url("/l"), mirrors[0].url("/l"), mirrors[1].url("/l")], "by pri")
        #expect(done.sources.map(\.bytes).reduce(0, +) == Self.size)
        for mirror in mirrors[0..<2] {
            #expect(!mirror.requests("/l").isEmpty)
            #expect(mirror.requests("/l").allSatisfy { $0.header("Authorization") == nil })
        }
    }

    /// A `Digest` (RFC 3230 form) of a 200 is checked: right → the result carries the hex; wrong → the
    /// checksum error, no file; with `checksDigestHeader` off the wrong one is not looked at. A `Repr-Digest`
    /// wins over a `Digest`.
    @Test func digestHeaderOfTheWholeFileIsChecked() async throws {
        let size: Int64 = 1 << 20
        let right = DKDigest.hash(.sha256, TestPattern.bytes(offset: 0, count: Int(size), seed: Self.seed))
        let wrong = DKDigest.hash(.sha256, TestPattern.bytes(offset: 0, count: Int(size), seed: Self.seed + 1))
        let origin = try FaultOrigin()
        origin.serve("/right", .resource(Resource(size: size, seed: Self.seed, extraHeaders: [("Digest", "SHA-256=\(Base64.encode(right))")])))
        origin.serve("/wrong", .resource(Resource(size: size, seed: Self.seed, extraHeaders: [("Digest", "sha-256=\(Base64.encode(wrong))")])))
        origin.serve("/repr", .resource(Resource(size: size, seed: Self.seed, extraHeaders: [
            ("Digest", "sha-256=\(Base64.encode(wrong))"), ("Repr-Digest", "sha-256=:\(Base64.encode(right)):"),
        ])))
        var configuration = DownloadConfiguration(retries: 0)
        for (path, accepted) in [("/right", true), ("/wrong", false), ("/repr", true)] {
            let dir = try ScratchDirectory()
            let (result, _) = await runDownload(
                DownloadRequest(url: origin.url(path), destination: .file(dir.file("d"))), configuration: configuration)
            switch result {
            case .success(let done):
                #expect(accepted, "\(path) must fail")
                #expect(done.checksumHex == DKDigest.hex(right), "\(path)")
            case .failure(let error):
                #expect(!accepted, "\(path): \(error)")
                #expect(error.code == .checksumMismatch && error.detail.contains("digest header"), "\(error)")
                #expect(dir.contents.isEmpty, "\(dir.contents)")
            }
        }
        configuration.checksDigestHeader = false
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/wrong"), destination: .file(dir.file("d"))), configuration: configuration)
        #expect(try result.get().checksumHex == nil)
    }
}
