internal import CDownloadKitShims
internal import COpenSSL
import Glibc
import HTTPWire

/// One TLS client session (`SSL`) over a connected non-blocking socket, owned by one ``Connection``.
///
/// Every OpenSSL call is preceded by `ERR_clear_error()` so the error queue read afterwards belongs
/// to that call; `SSL_get_error` is mapped to want-read / want-write (wait with `poll` and retry the
/// same call), clean close (`close_notify`), or a failure whose error queue becomes the error's
/// detail. Not `Sendable`: it belongs to its connection's thread.
final class TLSSession {
    /// When `read` stops filling the caller's buffer: one more TLS record (at most 16 KiB of
    /// plaintext) might not fit.
    static let maximumRecordSize = 16 * 1024

    private let ssl: OpaquePointer
    private let fd: Int32
    private let control: ConnectionControl
    /// The name the certificate is checked against (host name or IP literal), for error messages.
    private let serverName: String
    private let verifiesPeer: Bool
    /// The server's public key must match one of these (checked after the handshake) when non-empty.
    private let pinnedPublicKeys: [PublicKeyPin]
    /// The handshake completed; only then is `close_notify` sent on close.
    private var isEstablished = false
    /// A fatal error occurred; OpenSSL forbids `SSL_shutdown` afterwards and further I/O fails.
    private var hasFailed = false
    /// The peer sent `close_notify`; reads return 0 from now on.
    private var receivedCloseNotify = false
    /// An error met after some bytes were already returned; thrown by the next read.
    private var pendingError: TransportError?
    /// Where the sessions this connection receives are kept for later connections, and under which key;
    /// `nil` when the context does not resume sessions.
    private let sessionCache: TLSSessionCache?
    private let sessionKey: TLSSessionCache.Key
    /// The handshake completed and passed verification and the key pins: sessions may be kept from now on.
    private var mayKeepSessions = false
    /// Sessions OpenSSL delivered before the checks ended (a TLS 1.2 session arrives inside the handshake,
    /// before the pins are checked): kept once they pass, dropped with this object otherwise.
    private var sessionsHeldBack: [StoredTLSSession] = []

    /// The `SSL` ex-data index holding the `TLSSession` that owns it, for the new-session callback: 0, the
    /// application's own slot (`SSL_set_app_data`).
    static let ownerIndex: Int32 = 0

    /// Creates the session and configures SNI, host-name or IP verification and the socket BIO.
    /// - Parameters:
    ///   - context: The shared context.
    ///   - fd: A connected, non-blocking TCP socket. Not closed by the session.
    ///   - control: The connection's cancellation state (to report cancellation as such).
    ///   - serverName: Host name or IP literal (brackets allowed) to send as SNI and to verify.
    ///   - port: The origin's port, and
    ///   - proxy: the proxy the connection goes through: with `serverName`, which sessions may be resumed
    ///     (``TLSSessionCache/Key``).
    init(
        context: TLSContext, fd: Int32, control: ConnectionControl, serverName: String, port: Int, proxy: ProxyURL?
    ) throws(TransportError) {
        ERR_clear_error()
        guard let ssl = SSL_new(context.context) else {
            throw TransportError(
                .tlsFailed, operation: "SSL_new", detail: "could not create a TLS session: \(OpenSSLErrors.drain())")
        }
        self.ssl = ssl
        self.fd = fd
        self.control = control
        let bareName = IPAddressLiteral.unbracketed(serverName)
        self.serverName = bareName
        self.verifiesPeer = context.configuration.certificateVerification == .fullVerification
        self.pinnedPublicKeys = context.configuration.pinnedPublicKeys
        self.sessionCache = context.sessionCache
        self.sessionKey = TLSSessionCache.Key(serverName: bareName, port: port, proxy: proxy)

        guard let bio = dk_BIO_new_socket_nosigpipe(fd) else {
            throw TransportError(
                .tlsFailed, operation: "BIO_new", detail: "could not create a socket BIO: \(OpenSSLErrors.drain())")
        }
        // The SSL takes ownership of the BIO (one reference for both directions).
        SSL_set_bio(ssl, bio, bio)
        SSL_set_connect_state(ssl)

        let isIPLiteral = IPAddressLiteral.isLiteral(bareName)
        // RFC 6066 §3: "Literal IPv4 and IPv6 addresses are not permitted in HostName".
        if !isIPLiteral && !bareName.isEmpty {
            guard dk_SSL_set_tlsext_host_name(ssl, bareName) == 1 else {
                throw TransportError(
                    .tlsFailed, operation: "SSL_set_tlsext_host_name",
                    detail: "could not set the server name \(bareName): \(OpenSSLErrors.drain())")
            }
        }
        if verifiesPeer {
            let status = isIPLiteral ? dk_SSL_set1_ip_asc(ssl, bareName) : SSL_set1_host(ssl, bareName)
            guard status == 1 else {
                throw TransportError(
                    .tlsFailed, operation: isIPLiteral ? "X509_VERIFY_PARAM_set1_ip_asc" : "SSL_set1_host",
                    detail: "could not set the name to verify (\(bareName)): \(OpenSSLErrors.drain())")
            }
        }
        if let sessionCache {
            SSL_set_ex_data(ssl, Self.ownerIndex, Unmanaged.passUnretained(self).toOpaque())
            // SSL_set_session takes its own reference; a session the server declines costs nothing but
            // its bytes in the ClientHello (the handshake is then a full one).
            if let offered = sessionCache.take(for: sessionKey) {
                ERR_clear_error()
                _ = SSL_set_session(ssl, offered.pointer)
                ERR_clear_error()
            }
        }
    }

    deinit {
        SSL_free(ssl)
    }

    // MARK: - Operations

    /// Runs the client handshake (`SSL_connect`) until it completes or the deadline passes.
    /// - Throws: A certificate code (`.certificateExpired`, `.hostnameMismatch`, …) when verification
    ///   failed, `.tlsHandshakeFailed` for other protocol failures, `.connectTimeout`,
    ///   `.connectionClosed`/`.connectionReset`, or `.cancelled`.
    func handshake(deadline: Deadline) throws(TransportError) {
        while true {
            switch perform({ SSL_connect(ssl) }) {
            case .done:
                isEstablished = true
                try checkPinnedPublicKey()
                mayKeepSessions = true
                for session in sessionsHeldBack { sessionCache?.store(session, for: sessionKey) }
                sessionsHeldBack = []
                return
            case .wantRead:
                try wait(for: .readable, deadline: deadline, timeout: .connectTimeout, phase: .handshake)
            case .wantWrite:
                try wait(for: .writable, deadline: deadline, timeout: .connectTimeout, phase: .handshake)
            case .closed:
                throw failure(.unexpectedEOF, phase: .handshake)
            case .failed(let reason):
                throw failure(reason, phase: .handshake)
            }
        }
    }

    /// Takes a new session from OpenSSL's new-session callback (on this connection's thread, inside
    /// `SSL_connect`, `SSL_read` or `SSL_peek`): kept in the cache once the handshake has passed its checks.
    /// - Returns: Whether the reference was taken over (the callback then returns 1 and OpenSSL does not
    ///   free it).
    func received(_ session: OpaquePointer) -> Bool {
        guard let sessionCache else { return false }
        let stored = StoredTLSSession(adopting: session)
        if mayKeepSessions {
            sessionCache.store(stored, for: sessionKey)
        } else {
            sessionsHeldBack.append(stored)
        }
        return true
    }

    /// Whether the handshake resumed an earlier session (`SSL_session_reused`).
    var resumedSession: Bool { SSL_session_reused(ssl) == 1 }

    /// After a completed handshake (and verification), requires the server's public key to match one
    /// of the context's pins, when there are any.
    /// - Throws: `.publicKeyPinMismatch` naming the key seen, as `sha256//BASE64`.
    private func checkPinnedPublicKey() throws(TransportError) {
        guard !pinnedPublicKeys.isEmpty else { return }
        guard let seen = Self.publicKeyPin(of: ssl) else {
            throw TransportError(
                .publicKeyPinMismatch, operation: "SSL_get1_peer_certificate",
                detail: "\(serverName) presented no certificate whose public key could be pinned")
        }
        guard pinnedPublicKeys.contains(seen) else {
            let expected = pinnedPublicKeys.map(\.description).joined(separator: ";")
            throw TransportError(
                .publicKeyPinMismatch, operation: "SSL_connect",
                detail: "the public key of \(serverName) is \(seen), which matches no pinned key (\(expected))")
        }
    }

    /// The SHA-256 pin of the peer certificate's SubjectPublicKeyInfo (DER), as curl computes it.
    static func publicKeyPin(of ssl: OpaquePointer) -> PublicKeyPin? {
        guard let certificate = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(certificate) }
        guard let publicKey = X509_get_X509_PUBKEY(certificate) else { return nil }
        let length = i2d_X509_PUBKEY(publicKey, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_X509_PUBKEY(publicKey, &cursor)
        }
        guard written == length else { return nil }
        return PublicKeyPin(sha256: DKDigest.hash(.sha256, der))
    }

    /// Reads decrypted bytes into `buffer`, several records per call while they are already
    /// available and at least ``maximumRecordSize`` bytes of space remain. Wraps `SSL_read`.
    /// - Returns: The byte count (> 0), or 0 after the peer's `close_notify`.
    /// - Throws: `.tlsUncleanShutdown` on EOF without `close_notify`, `.readTimeout`,
    ///   `.connectionReset`, `.tlsFailed`, or `.cancelled`.
    func read(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline, remaining: Int64? = nil) throws(TransportError) -> Int {
        if let pendingError { throw pendingError }
        if receivedCloseNotify { return 0 }
        guard let base = buffer.baseAddress, buffer.count > 0 else {
            preconditionFailure("read(into:) needs a non-empty buffer")
        }
        var total = 0
        while total < buffer.count {
            let space = Int32(clamping: buffer.count - total)
            switch perform({ SSL_read(ssl, base + total, space) }) {
            case .done(let count):
                total += Int(count)
                readableWait.read(Int(count))
                // Stop when another whole record might not fit; otherwise keep draining what is
                // already buffered, so callers get large chunks.
                if buffer.count - total < Self.maximumRecordSize { return total }
            case .wantRead:
                // No complete record buffered and the socket would block: return what we have.
                if total > 0 { return total }
                try waitForRecords(deadline: deadline, remaining: remaining, bufferCapacity: buffer.count)
            case .wantWrite:
                if total > 0 { return total }
                try wait(for: .writable, deadline: deadline, timeout: .readTimeout, phase: .read)
            case .closed:
                receivedCloseNotify = true
                return total
            case .failed(let reason):
                let error = failure(reason, phase: .read)
                if total > 0 {
                    pendingError = error
                    return total
                }
                pendingError = error
                throw error
            }
        }
        return total
    }

    /// Writes all of `bytes`, waiting with `poll` when the socket is full. Wraps `SSL_write`.
    /// - Throws: `.writeTimeout`, `.connectionClosed`, `.connectionReset`, `.tlsFailed`, or `.cancelled`.
    func write(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws(TransportError) {
        if let pendingError { throw pendingError }
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        var offset = 0
        while offset < bytes.count {
            // After WANT_READ/WANT_WRITE the retry passes the same pointer and length, as OpenSSL requires.
            let length = Int32(clamping: bytes.count - offset)
            switch perform({ SSL_write(ssl, base + offset, length) }) {
            case .done(let count):
                offset += Int(count)
            case .wantWrite:
                try wait(for: .writable, deadline: deadline, timeout: .writeTimeout, phase: .write)
            case .wantRead:
                try wait(for: .readable, deadline: deadline, timeout: .writeTimeout, phase: .write)
            case .closed:
                throw failure(.unexpectedEOF, phase: .write)
            case .failed(let reason):
                let error = failure(reason, phase: .write)
                pendingError = error
                throw error
            }
        }
    }

    /// Whether the peer closed or sent application data while the connection sat idle.
    ///
    /// A readable socket alone is not enough: after a TLS 1.3 handshake the server sends session
    /// tickets, which make the socket readable without meaning anything for HTTP. `SSL_peek`
    /// consumes such records without consuming application data, and reports WANT_READ when only
    /// they were there.
    var hasPendingInputOrEOF: Bool {
        if pendingError != nil || receivedCloseNotify || hasFailed { return true }
        if SSL_pending(ssl) > 0 { return true }
        guard Socket.isReadableNow(fd) || SSL_has_pending(ssl) == 1 else { return false }
        var byte: UInt8 = 0
        switch perform({ SSL_peek(ssl, &byte, 1) }) {
        case .done:
            return true
        case .wantRead, .wantWrite:
            return false
        case .closed:
            receivedCloseNotify = true
            return true
        case .failed(let reason):
            pendingError = failure(reason, phase: .read)
            return true
        }
    }

    /// Whether bytes are buffered inside OpenSSL: decrypted ones, or (with read-ahead) records not yet
    /// processed (`SSL_has_pending`). A reader must try `SSL_read` before waiting on the socket.
    var hasBufferedPlaintext: Bool { SSL_has_pending(ssl) == 1 }

    /// Sends `close_notify` once, without waiting for the peer's (`SSL_shutdown`). Best effort:
    /// skipped after a fatal error or cancellation, and a full socket buffer is not waited for.
    func shutdown() {
        guard isEstablished, !hasFailed, !control.isCancelled else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
        isEstablished = false
    }

    /// The ALPN protocol the server selected, if any (`SSL_get0_alpn_selected`).
    var negotiatedALPN: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// The negotiated protocol version, for example "TLSv1.3" (`SSL_get_version`).
    var protocolVersion: String? {
        guard let version = SSL_get_version(ssl) else { return nil }
        return String(cString: version)
    }

    /// The negotiated cipher suite's IANA-style OpenSSL name, for example "TLS_AES_256_GCM_SHA384".
    var cipherName: String? {
        guard let cipher = SSL_get_current_cipher(ssl), let name = SSL_CIPHER_get_name(cipher) else { return nil }
        return String(cString: name)
    }

    // MARK: - Error mapping

    /// What an OpenSSL call reported.
    private enum Outcome {
        case done(Int32)
        case wantRead
        case wantWrite
        /// `SSL_ERROR_ZERO_RETURN`: the peer sent `close_notify`.
        case closed
        case failed(Reason)
    }

    /// Why an OpenSSL call failed.
    private enum Reason {
        /// TCP EOF without `close_notify`.
        case unexpectedEOF
        /// A system call failed (`SSL_ERROR_SYSCALL`).
        case system(DKErrno, String)
        /// A protocol error (`SSL_ERROR_SSL`), with OpenSSL's reasons.
        case protocolError(String)
    }

    private enum Phase {
        case handshake, read, write

        var operation: String {
            switch self {
            case .handshake: return "SSL_connect"
            case .read: return "SSL_read"
            case .write: return "SSL_write"
            }
        }
    }

    /// Calls `body` with a clean error queue and classifies its result with `SSL_get_error`.
    private func perform(_ body: () -> Int32) -> Outcome {
        ERR_clear_error()
        Glibc.errno = 0
        let result = body()
        if result > 0 { return .done(result) }
        let systemError = DKErrno.current
        let error = SSL_get_error(ssl, result)
        switch error {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        case SSL_ERROR_SYSCALL:
            hasFailed = true
            let queue = OpenSSLErrors.drain()
            if systemError.rawValue == 0 { return .failed(.unexpectedEOF) }
            return .failed(.system(systemError, queue))
        case SSL_ERROR_SSL:
            hasFailed = true
            let first = ERR_peek_error()
            if first != 0 && dk_ERR_is_unexpected_eof(first) == 1 {
                ERR_clear_error()
                return .failed(.unexpectedEOF)
            }
            return .failed(.protocolError(OpenSSLErrors.drain()))
        default:
            hasFailed = true
            return .failed(.protocolError("SSL_get_error returned \(error): \(OpenSSLErrors.drain())"))
        }
    }

    /// The receive low-water mark of the socket while a body's ciphertext streams (``ReceiveLowWater``).
    private var readableWait = MarkedReadableWait()

    /// Back to waking for any byte at the end of a message.
    func endOfMessage() {
        readableWait.endOfMessage(fd)
    }

    /// Waits for ciphertext while reading a body, with the receive low-water mark when the body still
    /// owes plenty.
    private func waitForRecords(deadline: Deadline, remaining: Int64?, bufferCapacity: Int) throws(TransportError) {
        if control.isCancelled { throw cancelled(.read) }
        try readableWait.waitUntilReadable(fd, remaining: remaining, bufferCapacity: bufferCapacity, deadline: deadline, peer: serverName)
    }

    /// Waits for the socket, throwing the phase's timeout code when the deadline passes.
    private func wait(for events: Socket.Events, deadline: Deadline, timeout: TransportError.Code, phase: Phase)
        throws(TransportError)
    {
        if control.isCancelled { throw cancelled(phase) }
        switch Socket.poll(fd, for: events, deadline: deadline) {
        case .success(.some):
            return
        case .success(.none):
            let what: String
            switch phase {
            case .handshake: what = "the TLS handshake with \(serverName) did not complete"
            case .read: what = "no data arrived from \(serverName)"
            case .write: what = "\(serverName) did not accept data"
            }
            throw TransportError(timeout, operation: "poll", detail: "\(what) before the deadline")
        case .failure(let error):
            throw TransportError(
                .systemCall, errorNumber: error, operation: "poll", detail: "waiting for the socket failed: \(error)"
            )
        }
    }

    private func cancelled(_ phase: Phase) -> TransportError {
        TransportError(.cancelled, operation: phase.operation, detail: "the connection was cancelled")
    }

    /// Maps a failure to the most specific error for the phase.
    private func failure(_ reason: Reason, phase: Phase) -> TransportError {
        // shutdown(2) by a canceller makes the next call fail with EOF, a reset or EPIPE; report why.
        if control.isCancelled { return cancelled(phase) }
        switch reason {
        case .unexpectedEOF:
            switch phase {
            case .handshake:
                return TransportError(
                    .connectionClosed, operation: phase.operation,
                    detail: "\(serverName) closed the connection during the TLS handshake")
            case .read:
                return TransportError(
                    .tlsUncleanShutdown, operation: phase.operation,
                    detail: "\(serverName) closed the connection without a TLS close_notify; the data may be truncated")
            case .write:
                return TransportError(
                    .connectionClosed, operation: phase.operation, detail: "\(serverName) closed the TLS connection")
            }
        case .system(let error, let queue):
            let code: TransportError.Code
            switch error {
            case .connectionReset: code = .connectionReset
            case .brokenPipe: code = .connectionClosed
            default: code = .systemCall
            }
            var detail = "\(phase == .handshake ? "TLS handshake" : "TLS I/O") with \(serverName) failed: \(error)"
            if queue != "no further detail from OpenSSL" { detail += " (\(queue))" }
            return TransportError(code, errorNumber: error, operation: phase.operation, detail: detail)
        case .protocolError(let reasons):
            if phase == .handshake, verifiesPeer {
                let result = SSL_get_verify_result(ssl)
                if result != X509_V_OK {
                    return verificationError(Int32(result), reasons: reasons)
                }
            }
            if phase == .handshake {
                return TransportError(
                    .tlsHandshakeFailed, operation: phase.operation,
                    detail: "TLS handshake with \(serverName) failed: \(reasons)")
            }
            return TransportError(
                .tlsFailed, operation: phase.operation, detail: "TLS error with \(serverName): \(reasons)")
        }
    }

    /// Maps an X.509 verification result (`SSL_get_verify_result`) to a specific code, with
    /// OpenSSL's message (`X509_verify_cert_error_string`) in the detail.
    private func verificationError(_ result: Int32, reasons: String) -> TransportError {
        let code: TransportError.Code
        switch result {
        case X509_V_ERR_CERT_HAS_EXPIRED:
            code = .certificateExpired
        case X509_V_ERR_CERT_NOT_YET_VALID:
            code = .certificateNotYetValid
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH:
            code = .hostnameMismatch
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
            code = .selfSignedCertificate
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
            X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            code = .unknownIssuer
        case X509_V_ERR_EE_KEY_TOO_SMALL, X509_V_ERR_CA_KEY_TOO_SMALL, X509_V_ERR_CA_MD_TOO_WEAK:
            code = .weakCertificateKey
        default:
            code = .certificateVerificationFailed
        }
        let message =
            X509_verify_cert_error_string(Int(result)).map { String(cString: $0) } ?? "verification error \(result)"
        return TransportError(
            code, operation: "SSL_connect",
            detail: "the certificate of \(serverName) was rejected: \(message) (X.509 error \(result); \(reasons))")
    }
}
