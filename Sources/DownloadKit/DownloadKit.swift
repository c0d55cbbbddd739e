// One `import DownloadKit` gives a program everything its public API mentions: the HTTP client
// (``DKHTTPClient``, ``DKHTTPClientConfiguration``, ``DKTLSConfiguration``, proxies, credentials) and the
// wire vocabulary (``DKHTTPHeaders``, ``HTTPURL``, ``ResponseHead``, ``EntityTag``…) and the public values
// of the decisions module (``RestartReason``).
//
// Names: a public type whose plain name AsyncHTTPClient, SwiftNIO, NIOSSL, swift-http-types,
// swift-crypto or swift-system already exports carries the `DK` prefix (DKHTTPClient,
// DKHTTPClientConfiguration, DKHTTPHeaders, DKHTTPRequest, DKHTTPMethod, DKHTTPVersion, DKTLSConfiguration,
// DKTLSVersion, DKDigest, DKErrno), so a program importing DownloadKit beside them compiles without
// ambiguity; Fleet/Tests/EcosystemTests proves it (a test target that imports them all). Other names stay plain.
@_exported import DownloadKitDecisions
@_exported import HTTPClient
@_exported import HTTPWire

/// DownloadKit: resumable downloads over HTTP/1.1 and HTTPS.
public enum DownloadKitVersion {
    /// The library version.
    public static let string = "0.1.0"
}
