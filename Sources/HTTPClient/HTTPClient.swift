/// HTTPClient: POSIX sockets, DNS, TLS over OpenSSL, a connection pool and the request/response
/// exchange that streams a response body into a caller-supplied sink. Speaks HTTP/1.1 via `HTTPWire`.
///
/// Threading model: every blocking call here (connect, read, write, TLS handshake) runs on the
/// calling thread with a deadline enforced by `poll(2)`. The download engine runs each transfer on a
/// dedicated thread, never on Swift's cooperative pool, and bridges to async code at coarse grain.
/// Cancellation from another thread goes through a `Sendable` canceller that calls `shutdown(2)` on
/// the socket, which wakes any `poll` promptly without the file-descriptor reuse race of `close`.
public enum HTTPClientModule {
    /// The ALPN protocol identifier this client offers and speaks.
    public static let alpnProtocol = "http/1.1"
}
