internal import CDownloadKitShims

/// A TLS protocol version.
public enum DKTLSVersion: Sendable, Hashable, Comparable, CaseIterable, CustomStringConvertible {
    /// TLS 1.2 (RFC 5246).
    case tlsv12
    /// TLS 1.3 (RFC 8446).
    case tlsv13

    /// The name OpenSSL reports for this version ("TLSv1.2", "TLSv1.3"), as in ``Connection/tlsVersion``.
    public var description: String {
        switch self {
        case .tlsv12: return "TLSv1.2"
        case .tlsv13: return "TLSv1.3"
        }
    }
}

/// How a TLS client is set up: verification policy, trust roots, protocol versions and ALPN.
///
/// A value type: build one, then create a ``TLSContext`` from it once and share the context among
/// connections. Start from ``makeClientConfiguration()``, which verifies certificates fully.
public struct DKTLSConfiguration: Sendable, Hashable {
    /// Whether and how the server's certificate is checked.
    public enum CertificateVerification: Sendable, Hashable {
        /// Verify the chain up to a trusted root, the validity dates, and that the certificate names
        /// the host (or IP address) connected to. The default.
        case fullVerification
        /// Verify nothing: no chain, no dates, no host name. Anyone on the path can read and change
        /// the traffic. Only for tests and for origins whose identity is checked some other way
        /// (for example a digest of the downloaded file).
        case none
    }

    /// Whether the server's certificate is checked. Default ``CertificateVerification/fullVerification``.
    public var certificateVerification: CertificateVerification
    /// PEM files of extra certificate authorities to trust, in addition to the system's (for example
    /// the file given to `--cacert`). Default empty.
    public var additionalTrustRootFiles: [String]
    /// Whether to trust the system's certificate authorities, found by probing the Debian, RHEL,
    /// SUSE and Alpine bundle paths plus OpenSSL's default paths (which honour `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR`). Default `true`.
    ///
    /// A c_rehash'ed directory is read lazily, one issuer at a time; a bundle *file* (named by
    /// `SSL_CERT_FILE`, or the only form a system offers) is parsed whole before the first handshake:
    /// 22-42 ms for Debian's 139 certificates with OpenSSL 3.0 on the project's machine kind. A program
    /// that trusts only its own CA sets this to `false` and names the CA in ``additionalTrustRootFiles``
    /// (curl's `--cacert`).
    public var useSystemTrustRoots: Bool
    /// The lowest protocol version offered. Default ``DKTLSVersion/tlsv12``.
    public var minimumVersion: DKTLSVersion
    /// The highest protocol version offered, or `nil` for the highest this OpenSSL supports. Default `nil`.
    public var maximumVersion: DKTLSVersion?
    /// Protocols offered with ALPN (RFC 7301), most preferred first. Default `["http/1.1"]`. Empty
    /// means no ALPN extension.
    public var applicationProtocols: [String]
    /// A client certificate presented when the server asks for one (mutual TLS). Default `nil`.
    public var clientCertificate: ClientCertificate? = nil
    /// SHA-256 pins of the server's public key (SubjectPublicKeyInfo); when non-empty the server's key
    /// must match one of them, checked after (not instead of) certificate verification. Default empty.
    public var pinnedPublicKeys: [PublicKeyPin] = []
    /// The TLS 1.3 cipher suites offered, most preferred first, in OpenSSL's colon-separated form
    /// (`SSL_CTX_set_ciphersuites`). Default `nil`: ``preferredTLS13CipherSuites``. Most servers (nginx,
    /// OpenSSL's default) follow the client's order in TLS 1.3, so this order decides the cipher.
    public var tls13CipherSuites: String? = nil
    /// Whether connections resume TLS sessions of earlier connections to the same host, port and proxy
    /// made with the same client (an abbreviated handshake: no certificate chain sent or verified, no
    /// key exchange signature). Default `true`. TLS 1.3 tickets are used once; sessions are kept per
    /// ``TLSContext``, so never across configurations or client certificates (docs/NETWORKING.md,
    /// "TLS session resumption"). `false` is curl's `--no-sessionid`.
    public var resumesSessions: Bool = true

    /// DownloadKit's TLS 1.3 order for this machine: AES-128-GCM first where the CPU has AES instructions
    /// (x86 AES-NI, ARMv8 AES), where it is the cheapest suite per byte; ChaCha20-Poly1305 first where it
    /// has not, where AES in software is slower and not constant-time. OpenSSL's own default puts
    /// AES-256-GCM first everywhere (issue #18: nginx then chose it for both DownloadKit and curl).
    public static var preferredTLS13CipherSuites: String {
        dk_cpu_has_aes() != 0
            ? "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
            : "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"
    }

    /// Creates a configuration. Prefer ``makeClientConfiguration()`` and change what you need.
    public init(
        certificateVerification: CertificateVerification = .fullVerification,
        additionalTrustRootFiles: [String] = [],
        useSystemTrustRoots: Bool = true,
        minimumVersion: DKTLSVersion = .tlsv12,
        maximumVersion: DKTLSVersion? = nil,
        applicationProtocols: [String] = ["http/1.1"]
    ) {
        self.certificateVerification = certificateVerification
        self.additionalTrustRootFiles = additionalTrustRootFiles
        self.useSystemTrustRoots = useSystemTrustRoots
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.applicationProtocols = applicationProtocols
    }

    /// The secure default for a client: full verification against the system trust roots, TLS 1.2
    /// or newer, ALPN `http/1.1`.
    public static func makeClientConfiguration() -> DKTLSConfiguration {
        DKTLSConfiguration()
    }

    /// Bundle files tried, in order, for the system trust roots. The first that exists is loaded.
    static let systemTrustRootFiles = [
        "/etc/ssl/certs/ca-certificates.crt",  // Debian, Ubuntu, Gentoo, Arch, Alpine (ca-certificates)
        "/etc/pki/tls/certs/ca-bundle.crt",  // Fedora, RHEL, CentOS
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7+ extracted bundle
        "/etc/ssl/ca-bundle.pem",  // openSUSE
        "/etc/ssl/cert.pem",  // Alpine, macOS-style layouts
    ]
}
