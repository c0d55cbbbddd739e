// Every name below is used unqualified while DownloadKit and the packages it must coexist with are
// all imported: if DownloadKit exported a type with one of these names, this file would not compile
// ("ambiguous use" / "is ambiguous for type lookup"). DownloadKit's own types are used beside them.
import AsyncHTTPClient
import Crypto
import DownloadKit
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOSSL
import SystemPackage

// AsyncHTTPClient, NIO, NIOSSL, swift-http-types, swift-crypto and swift-system, unqualified.
let ahcConfiguration = HTTPClient.Configuration()
var nioHeaders = HTTPHeaders()
nioHeaders.add(name: "Accept", value: "*/*")
let nioMethod = HTTPMethod.GET
let nioVersion = HTTPVersion.http1_1
let typesRequest = HTTPRequest(method: .get, scheme: "https", authority: "example.com", path: "/")
let tlsConfiguration = TLSConfiguration.makeClientConfiguration()
let tlsVersion = TLSVersion.tlsv12
let digest: any Digest = SHA256.hash(data: [1, 2, 3])
let errno = Errno.noSuchFileOrDirectory
let path = FilePath("/tmp")

// DownloadKit with one import: the request, the client settings, the error, the checksum.
let request = DownloadRequest(url: "https://example.com/file.iso", destination: .file("/tmp/file.iso"))
let configuration = DownloadConfiguration()
let clientConfiguration = DKHTTPClientConfiguration()
let checksum = Checksum(algorithm: .sha256, expectedHex: String(repeating: "0", count: 64))

print(
    String(describing: ahcConfiguration.redirectConfiguration), nioHeaders.count, nioMethod, nioVersion, typesRequest.method,
    tlsConfiguration.minimumTLSVersion, tlsVersion, digest, errno, path,
    request.url, configuration.retries, clientConfiguration.maxConnectionsPerOrigin, checksum)
