// Issue #16: a program that imports DownloadKit beside AsyncHTTPClient, SwiftNIO, NIOSSL, swift-http-types,
// swift-crypto and swift-system, and uses their type names unqualified, compiles — this file is that program.
// If DownloadKit exported a type with one of these plain names, it would not (an ambiguity error, or the
// wrong type chosen and its members missing: adding `public struct HTTPHeaders` to DownloadKit gave "value
// of type 'HTTPHeaders' has no member 'add'"); DownloadKit's own names (the `DK` prefix where a plain name
// was taken) sit beside them. It used to be a package of its own (Tests/EcosystemCheck) with its own build of every
// dependency (about 4 minutes of each CI run); the main package already builds all of these modules for
// its test and daemon targets, so as a test target it costs one file. Dependents of DownloadKit still never
// build AsyncHTTPClient because of it: packages used only by a dependency's test targets are not built.
import AsyncHTTPClient
import Crypto
import DownloadKit
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOSSL
import SystemPackage
import TestOrigin
import Testing

@Suite struct EcosystemTests {
    /// Every name here is used unqualified with all the modules above imported (compiling is most of the test);
    /// the two libraries' SHA-256 of the same bytes and the two header types' lookups must agree.
    @Test func ecosystemNamesAndDownloadKitNamesCoexist() throws {
        let ahcConfiguration = HTTPClient.Configuration()
        var nioHeaders = HTTPHeaders()
        nioHeaders.add(name: "Accept", value: "*/*")
        let typesRequest = HTTPRequest(method: .get, scheme: "https", authority: "example.com", path: "/")
        let tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        let digest: any Digest = SHA256.hash(data: [1, 2, 3])
        let path = FilePath("/tmp")
        _ = (ahcConfiguration.redirectConfiguration, HTTPMethod.GET, HTTPVersion.http1_1, TLSVersion.tlsv12)
        _ = (Errno.noSuchFileOrDirectory, tlsConfiguration.minimumTLSVersion, typesRequest.method, path)

        // DownloadKit with one import: the request, the settings, the client's, the checksum, the digest.
        let request = DownloadRequest(url: "https://example.com/file.iso", destination: .file("/tmp/file.iso"))
        let configuration = DownloadConfiguration()
        let clientConfiguration = DKHTTPClientConfiguration()
        var dkHeaders = DKHTTPHeaders()
        dkHeaders.add(name: "Accept", value: "*/*")
        _ = (request.url, configuration.retries, clientConfiguration.maxConnectionsPerOrigin)
        // The two libraries' SHA-256 of the same bytes agree (both are plain names no more).
        #expect(DKDigest.hash(.sha256, [1, 2, 3]) == Array(digest))
        #expect(dkHeaders.first(name: "accept") == nioHeaders.first(name: "accept"))
    }

    /// Both clients in one process against one origin: DownloadKit's file, verified by a checksum computed
    /// with swift-crypto, holds the bytes AsyncHTTPClient receives.
    @Test func downloadKitAndAsyncHTTPClientFetchTheSameBytes() async throws {
        let origin = try FaultOrigin()
        let size = 3 << 20
        origin.serve("/same", .resource(Resource(size: Int64(size), seed: 1_616)))
        let expected = DKDigest.hex(Array(SHA256.hash(data: TestPattern.bytes(offset: 0, count: size, seed: 1_616))))
        let dir = try ScratchDirectory()

        let download = Download(DownloadRequest(
            url: origin.url("/same"), destination: .file(dir.file("same")),
            checksum: Checksum(algorithm: .sha256, expectedHex: expected)))
        download.start()
        let result = try await download.result()
        #expect(result.checksumHex == expected)
        #expect(result.bytes == Int64(size))

        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: origin.url("/same")), timeout: .seconds(30))
        #expect(response.status == .ok)
        let body = Array(try await response.body.collect(upTo: size + 1).readableBytesView)
        #expect(DKDigest.hex(Array(SHA256.hash(data: body))) == expected)
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: result.path))) == body)
    }
}
