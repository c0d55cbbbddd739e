/// An error from the transport layer: resolving, connecting, reading, writing, or TLS.
///
/// Public errors are extensible: a struct wrapping a ``Code`` with static members, so new causes can
/// be added without breaking callers. Retry policy should read ``isTransient``, never ``detail``.
public struct TransportError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The category of a transport error. Compare against the static members (`.connectFailed`, …).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable, payload-free name for logs and metrics.
        public let name: String
        /// Creates a code. Codes are declared as static members below.
        public init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The host name could not be resolved (`getaddrinfo` failed).
        public static let resolveFailed = Code("resolveFailed")
        /// No resolved address accepted a TCP connection (see `errno`).
        public static let connectFailed = Code("connectFailed")
        /// The connection (TCP connect plus TLS handshake) did not complete before its deadline.
        public static let connectTimeout = Code("connectTimeout")
        /// No bytes arrived before the read deadline.
        public static let readTimeout = Code("readTimeout")
        /// The peer did not accept bytes before the write deadline.
        public static let writeTimeout = Code("writeTimeout")
        /// The peer reset the connection (`ECONNRESET`).
        public static let connectionReset = Code("connectionReset")
        /// The peer closed the connection when more was expected (for example `EPIPE` on write, or
        /// EOF during the TLS handshake).
        public static let connectionClosed = Code("connectionClosed")
        /// The TLS handshake failed for a reason other than certificate verification (for example no
        /// common protocol version or cipher); `detail` carries OpenSSL's reason.
        public static let tlsHandshakeFailed = Code("tlsHandshakeFailed")
        /// The server's certificate (or one in its chain) has expired.
        public static let certificateExpired = Code("certificateExpired")
        /// The server's certificate (or one in its chain) is not valid yet.
        public static let certificateNotYetValid = Code("certificateNotYetValid")
        /// The server's certificate does not name the host (or IP address) that was asked for.
        public static let hostnameMismatch = Code("hostnameMismatch")
        /// The server presented a self-signed certificate that is not trusted.
        public static let selfSignedCertificate = Code("selfSignedCertificate")
        /// The server's certificate was issued by a certificate authority that is not trusted.
        public static let unknownIssuer = Code("unknownIssuer")
        /// The server's certificate key is too weak for the security level (e.g. RSA below 2048 bits).
        public static let weakCertificateKey = Code("weakCertificateKey")
        /// Certificate verification failed for another reason; `detail` carries OpenSSL's message.
        public static let certificateVerificationFailed = Code("certificateVerificationFailed")
        /// A TLS operation other than the handshake failed, or the TLS context could not be built.
        public static let tlsFailed = Code("tlsFailed")
        /// The peer closed the TCP connection without sending TLS close_notify. The bytes read so far
        /// are intact; whether they are complete is for the HTTP framing to decide.
        public static let tlsUncleanShutdown = Code("tlsUncleanShutdown")
        /// The operation was cancelled through a ``ConnectionCanceller``.
        public static let cancelled = Code("cancelled")
        /// A system call failed in an unexpected way (see `errno` and `operation`).
        public static let systemCall = Code("systemCall")
    }

    /// What went wrong.
    public var code: Code
    /// The POSIX error number, when a system call failed.
    public var errorNumber: DKErrno?
    /// ``errorNumber``'s raw C value.
    @available(*, deprecated, renamed: "errorNumber")
    public var errno: Int32? {
        get { errorNumber?.rawValue }
        set { errorNumber = newValue.map(DKErrno.init(rawValue:)) }
    }
    /// The operation that failed, for example `"connect"`, `"recv"` or `"SSL_connect"`.
    public var operation: String?
    /// A human-readable explanation that names the cause in plain words, including OpenSSL's reason
    /// string or the X.509 verification message when TLS is involved.
    public var detail: String
    /// Set for failures whose transience is not implied by `code` and `errorNumber` (a temporary DNS failure).
    private var isMarkedTransient: Bool

    /// Creates an error.
    /// - Parameters:
    ///   - code: The category.
    ///   - errorNumber: The POSIX error number, if a system call failed.
    ///   - operation: The operation that failed, if useful.
    ///   - detail: The cause in plain words.
    public init(_ code: Code, errorNumber: DKErrno? = nil, operation: String? = nil, detail: String) {
        self.code = code
        self.errorNumber = errorNumber
        self.operation = operation
        self.detail = detail
        self.isMarkedTransient = false
    }

    /// Creates an error from a raw C error number.
    @available(*, deprecated, renamed: "init(_:errorNumber:operation:detail:)")
    public init(_ code: Code, errno: Int32?, operation: String? = nil, detail: String) {
        self.init(code, errorNumber: errno.map(DKErrno.init(rawValue:)), operation: operation, detail: detail)
    }

    /// Creates an error whose ``isTransient`` is `true` regardless of its code.
    static func transient(_ code: Code, operation: String? = nil, detail: String) -> TransportError {
        var error = TransportError(code, operation: operation, detail: detail)
        error.isMarkedTransient = true
        return error
    }

    /// Whether retrying (on a new connection) may succeed: resets, early closes, timeouts, refused or
    /// unreachable connects, temporary DNS failures and unclean TLS shutdowns. Certificate and other
    /// TLS failures, cancellation and unexpected system-call failures are not transient.
    public var isTransient: Bool {
        if isMarkedTransient { return true }
        switch code {
        case .connectionReset, .connectionClosed, .connectTimeout, .readTimeout, .writeTimeout,
            .tlsUncleanShutdown:
            return true
        case .connectFailed:
            return errorNumber?.isTransientNetworkFailure ?? false
        default:
            return false
        }
    }

    /// A payload-free description for logs and metrics (the code's name).
    public var shortDescription: String { code.name }

    public var description: String {
        var text = code.name
        if let operation { text += " (\(operation))" }
        text += ": " + detail
        if let errorNumber, !detail.contains(errorNumber.description) {
            text += " [errno \(errorNumber.rawValue): \(errorNumber)]"
        }
        return text
    }
}
