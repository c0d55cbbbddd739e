internal import CDownloadKitShims
internal import COpenSSL
import Glibc

/// An OpenSSL client context (`SSL_CTX`) built once from a ``DKTLSConfiguration`` and shared by every
/// TLS connection made with it.
///
/// Building a context sets up the trust roots: the system's hashed certificate directory when there
/// is one (looked up lazily during handshakes), else the CA bundle (parsed once). Doing it once and
/// sharing it keeps each new connection cheap.
///
/// `Sendable` is safe, and is therefore declared `@unchecked`: the `SSL_CTX` is fully configured
/// inside `init` and never mutated afterwards. OpenSSL documents `SSL_new` on a shared, unchanging
/// `SSL_CTX` as thread-safe (its reference count and the certificate store's lookups are locked
/// internally), and each connection gets its own `SSL` object.
public final class TLSContext: @unchecked Sendable {
    /// The configuration this context was built from.
    public let configuration: DKTLSConfiguration
    /// The immutable `SSL_CTX`, freed in `deinit`.
    let context: OpaquePointer
    /// The sessions connections made with this context may resume (see ``TLSSessionCache``), or `nil`
    /// when ``DKTLSConfiguration/resumesSessions`` is off.
    let sessionCache: TLSSessionCache?

    /// Builds the context: protocol versions, verification mode, trust roots, ALPN and the modes
    /// non-blocking I/O needs.
    /// - Parameter configuration: The settings; see ``DKTLSConfiguration/makeClientConfiguration()``.
    /// - Throws: `.tlsFailed` when OpenSSL cannot create the context, an extra trust-root file cannot
    ///   be loaded, or full verification was asked for and no trust roots at all could be loaded.
    public convenience init(configuration: DKTLSConfiguration) throws(TransportError) {
        try self.init(configuration: configuration, systemTrustPaths: SystemTrustPaths.fromEnvironment())
    }

    /// The system trust roots a process's environment names (`SSL_CERT_FILE`, `SSL_CERT_DIR`), each
    /// completed with OpenSSL's compiled-in default when only the other is set.
    struct SystemTrustPaths {
        /// A PEM bundle, parsed only when a handshake first needs a root the store does not hold.
        var file: String?
        /// A c_rehash'ed directory, looked up one issuer at a time.
        var directory: String?

        /// The paths named by `SSL_CERT_FILE` / `SSL_CERT_DIR`, or `nil` when neither is set.
        static func fromEnvironment() -> SystemTrustPaths? {
            let file = getenv("SSL_CERT_FILE").map { String(cString: $0) }
            let directory = getenv("SSL_CERT_DIR").map { String(cString: $0) }
            guard file != nil || directory != nil else { return nil }
            return SystemTrustPaths(
                file: file ?? X509_get_default_cert_file().map { String(cString: $0) },
                directory: directory ?? X509_get_default_cert_dir().map { String(cString: $0) })
        }
    }

    /// Builds the context with the system trust roots at `systemTrustPaths` when given (the environment's,
    /// or a test's), else found by probing (see ``DKTLSConfiguration/useSystemTrustRoots``).
    init(configuration: DKTLSConfiguration, systemTrustPaths: SystemTrustPaths?) throws(TransportError) {
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw TransportError(
                .tlsFailed, operation: "SSL_CTX_new", detail: "could not create a TLS context: \(OpenSSLErrors.drain())"
            )
        }
        self.configuration = configuration
        self.context = context
        self.sessionCache = configuration.resumesSessions ? TLSSessionCache() : nil
        // From here on `deinit` frees the context if a later step throws.

        guard dk_SSL_CTX_set_min_proto_version(context, configuration.minimumVersion.openSSLVersion) == 1,
            dk_SSL_CTX_set_max_proto_version(context, configuration.maximumVersion?.openSSLVersion ?? 0) == 1
        else {
            throw TransportError(
                .tlsFailed, operation: "SSL_CTX_set_min_proto_version",
                detail: "could not set the TLS protocol versions: \(OpenSSLErrors.drain())")
        }
        dk_SSL_CTX_set_nonblocking_client_modes(context)
        // Security level 2 (112-bit security): RSA and DH keys below 2048 bits, ECC below 224 bits and
        // SHA-1 certificate signatures are refused, whatever the system's openssl.cnf says.
        SSL_CTX_set_security_level(context, 2)
        // Renegotiation is an attack surface a download client never needs (TLS 1.2 only).
        dk_SSL_CTX_disable_renegotiation(context)
        if configuration.resumesSessions {
            // OpenSSL keeps no client sessions itself; each new one (a TLS 1.2 session at the end of the
            // handshake, each TLS 1.3 ticket whenever a read or peek meets it) goes to the TLSSession that
            // received it, which decides whether and where to keep it.
            dk_SSL_CTX_enable_external_client_session_cache(context)
            SSL_CTX_sess_set_new_cb(context) { ssl, session in
                guard let ssl, let session, let owner = SSL_get_ex_data(ssl, TLSSession.ownerIndex) else { return 0 }
                return Unmanaged<TLSSession>.fromOpaque(owner).takeUnretainedValue().received(session) ? 1 : 0
            }
        }
        let suites = configuration.tls13CipherSuites ?? DKTLSConfiguration.preferredTLS13CipherSuites
        guard SSL_CTX_set_ciphersuites(context, suites) == 1 else {
            throw TransportError(
                .tlsFailed, operation: "SSL_CTX_set_ciphersuites",
                detail: "no usable TLS 1.3 cipher suite in \"\(suites)\": \(OpenSSLErrors.drain())")
        }

        switch configuration.certificateVerification {
        case .fullVerification:
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        case .none:
            SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        }

        var loadedAnyRoots = false
        if configuration.useSystemTrustRoots {
            if let paths = systemTrustPaths {
                // The caller's environment names the roots, as it does for OpenSSL's own tools. The bundle
                // file it names is parsed only when a verification asks for an issuer the store does not
                // hold (issue #47): with `--cacert` and a server certificate that CA issued, never — 22-42 ms
                // of start-up saved. An intermediate not in the store is looked up there first (OpenSSL builds
                // chains trusted-first), which parses the bundle once, as before.
                ERR_clear_error()
                if dk_SSL_CTX_load_verify_paths_lazily(context, paths.file, paths.directory) == 1 {
                    loadedAnyRoots = [paths.file, paths.directory].contains { $0.map { access($0, R_OK) == 0 } ?? false }
                }
            } else if let directory = Self.hashedCertificateDirectory() {
                // A c_rehash'ed directory is consulted lazily, one file per issuer lookup during a
                // handshake. Parsing the whole bundle instead costs 50-150 ms of start-up with
                // OpenSSL 3's decoders, paid even by processes that never speak TLS.
                ERR_clear_error()
                if SSL_CTX_load_verify_locations(context, nil, directory) == 1 { loadedAnyRoots = true }
            }
            if !loadedAnyRoots {
                for path in DKTLSConfiguration.systemTrustRootFiles where access(path, R_OK) == 0 {
                    ERR_clear_error()
                    if SSL_CTX_load_verify_locations(context, path, nil) == 1 {
                        loadedAnyRoots = true
                        break
                    }
                }
            }
            if !loadedAnyRoots {
                // OpenSSL's compiled-in file and directory. Directory lookups are lazy, so success
                // here does not prove any root exists.
                ERR_clear_error()
                if SSL_CTX_set_default_verify_paths(context) == 1 {
                    loadedAnyRoots = Self.defaultCertificateDirectoryExists()
                }
            }
            ERR_clear_error()
        }
        for path in configuration.additionalTrustRootFiles {
            ERR_clear_error()
            guard SSL_CTX_load_verify_locations(context, path, nil) == 1 else {
                throw TransportError(
                    .tlsFailed, operation: "SSL_CTX_load_verify_locations",
                    detail: "could not load trusted certificates from \(path): \(OpenSSLErrors.drain())")
            }
            loadedAnyRoots = true
        }
        if configuration.certificateVerification == .fullVerification && !loadedAnyRoots {
            let searched = DKTLSConfiguration.systemTrustRootFiles.joined(separator: ", ")
            throw TransportError(
                .tlsFailed, operation: "SSL_CTX_load_verify_locations",
                detail: "no trusted certificate authorities found (looked in \(searched) and OpenSSL's default "
                    + "paths); install ca-certificates or pass a CA file")
        }

        if let identity = configuration.clientCertificate {
            try Self.useClientCertificate(identity, in: context)
        }

        if !configuration.applicationProtocols.isEmpty {
            // Wire format (RFC 7301 §3.1): each protocol name prefixed with its one-byte length.
            var wire: [UInt8] = []
            for name in configuration.applicationProtocols {
                let bytes = Array(name.utf8)
                guard (1...255).contains(bytes.count) else {
                    throw TransportError(
                        .tlsFailed, operation: "SSL_CTX_set_alpn_protos",
                        detail: "ALPN protocol name \"\(name)\" must be 1 to 255 bytes long")
                }
                wire.append(UInt8(bytes.count))
                wire.append(contentsOf: bytes)
            }
            ERR_clear_error()
            // Unlike most OpenSSL functions, this one returns 0 on success.
            guard SSL_CTX_set_alpn_protos(context, wire, UInt32(wire.count)) == 0 else {
                throw TransportError(
                    .tlsFailed, operation: "SSL_CTX_set_alpn_protos",
                    detail: "could not set ALPN protocols: \(OpenSSLErrors.drain())")
            }
        }
    }

    deinit {
        SSL_CTX_free(context)
    }

    /// How many certificates the trust store holds now (tests: whether a bundle was parsed).
    var trustedCertificateCount: Int { Int(dk_SSL_CTX_trusted_certificate_count(context)) }

    /// Loads a client certificate chain and its (possibly encrypted) key into `context`, checking
    /// that they belong together. OpenSSL never prompts on a terminal: the passphrase (or an empty
    /// one) is always supplied.
    private static func useClientCertificate(_ identity: ClientCertificate, in context: OpaquePointer)
        throws(TransportError)
    {
        ERR_clear_error()
        guard SSL_CTX_use_certificate_chain_file(context, identity.certificatePath) == 1 else {
            throw TransportError(
                .clientCertificateInvalid, operation: "SSL_CTX_use_certificate_chain_file",
                detail: "cannot use the client certificate \(identity.certificatePath): \(OpenSSLErrors.drain())")
        }
        let keyPath = identity.privateKeyPath ?? identity.certificatePath
        guard let pem = readSmallFile(keyPath) else {
            throw TransportError(
                .clientKeyInvalid, errorNumber: .current, operation: "open",
                detail: "cannot read the client key \(keyPath): \(String(cString: strerror(errno)))")
        }
        let isEncrypted = pem.contains("ENCRYPTED")
        if isEncrypted && identity.passphrase == nil {
            throw TransportError(
                .clientKeyPassphraseRequired, operation: "PEM_read_bio_PrivateKey",
                detail: "the client key \(keyPath) is encrypted; give its passphrase")
        }
        ERR_clear_error()
        let key: OpaquePointer? = pem.withCString { text in
            guard let bio = BIO_new_mem_buf(text, -1) else { return nil }
            defer { BIO_free(bio) }
            // A non-NULL user pointer with a NULL callback is taken as the passphrase (never a prompt).
            return (identity.passphrase ?? "").withCString { passphrase in
                PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: passphrase))
            }
        }
        guard let key else {
            let reasons = OpenSSLErrors.drain()
            if isEncrypted {
                throw TransportError(
                    .clientKeyPassphraseWrong, operation: "PEM_read_bio_PrivateKey",
                    detail: "cannot decrypt the client key \(keyPath) with the passphrase given: \(reasons)")
            }
            throw TransportError(
                .clientKeyInvalid, operation: "PEM_read_bio_PrivateKey",
                detail: "\(keyPath) holds no usable PEM private key: \(reasons)")
        }
        defer { EVP_PKEY_free(key) }
        ERR_clear_error()
        guard SSL_CTX_use_PrivateKey(context, key) == 1, SSL_CTX_check_private_key(context) == 1 else {
            throw TransportError(
                .clientKeyMismatch, operation: "SSL_CTX_check_private_key",
                detail: "the client key \(keyPath) does not belong to the certificate \(identity.certificatePath): "
                    + OpenSSLErrors.drain())
        }
    }

    /// The text of a file of at most 1 MiB, or `nil` (errno set) when it cannot be read.
    private static func readSmallFile(_ path: String) -> String? {
        guard let file = fopen(path, "re") else { return nil }
        defer { fclose(file) }
        var bytes = [UInt8](repeating: 0, count: 1 << 20)
        let count = fread(&bytes, 1, bytes.count, file)
        if ferror(file) != 0 { return nil }
        return String(decoding: bytes[0..<count], as: UTF8.self)
    }

    /// Whether OpenSSL's default hashed certificate directory (or `SSL_CERT_DIR`) exists.
    /// The first system certificate directory holding OpenSSL subject-hash links (`1a2b3c4d.0`), if any.
    static func hashedCertificateDirectory() -> String? {
        var candidates = ["/etc/ssl/certs", "/etc/pki/tls/certs"]
        if let compiled = X509_get_default_cert_dir() { candidates.append(String(cString: compiled)) }
        for directory in candidates where containsHashLinks(directory) { return directory }
        return nil
    }

    private static func containsHashLinks(_ directory: String) -> Bool {
        guard let handle = opendir(directory) else { return false }
        defer { closedir(handle) }
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            let parts = name.split(separator: ".")
            if parts.count == 2, parts[0].count == 8, parts[0].allSatisfy(\.isHexDigit), parts[1].allSatisfy(\.isNumber) {
                return true
            }
        }
        return false
    }

    private static func defaultCertificateDirectoryExists() -> Bool {
        var directories: [String] = []
        if let environment = getenv("SSL_CERT_DIR") { directories.append(String(cString: environment)) }
        if let environment = getenv("SSL_CERT_FILE") { directories.append(String(cString: environment)) }
        if let compiled = X509_get_default_cert_dir() { directories.append(String(cString: compiled)) }
        return directories.contains { access($0, R_OK) == 0 }
    }
}

extension DKTLSVersion {
    /// OpenSSL's protocol version constant (`TLS1_2_VERSION`, `TLS1_3_VERSION`).
    var openSSLVersion: Int32 {
        switch self {
        case .tlsv12: return TLS1_2_VERSION
        case .tlsv13: return TLS1_3_VERSION
        }
    }
}

/// Reading OpenSSL's per-thread error queue.
enum OpenSSLErrors {
    /// Empties the calling thread's OpenSSL error queue and returns its entries as plain words
    /// ("certificate verify failed; ..."), or "no further detail from OpenSSL" when it was empty.
    static func drain() -> String {
        var reasons: [String] = []
        while true {
            let error = ERR_get_error()
            if error == 0 { break }
            reasons.append(describe(error))
        }
        return reasons.isEmpty ? "no further detail from OpenSSL" : reasons.joined(separator: "; ")
    }

    /// One packed error as text: the reason string when OpenSSL has one, else the full error string.
    static func describe(_ error: UInt) -> String {
        if let reason = ERR_reason_error_string(error) { return String(cString: reason) }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(error, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
