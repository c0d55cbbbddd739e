import HTTPWire

/// What an exchange did, returned once the response is complete.
public struct ExchangeSummary: Sendable, Hashable {
    /// The final (non-1xx) response head.
    public var head: ResponseHead
    /// Body bytes delivered to the body callback (0 when discarded).
    public var bodyBytes: Int64
    /// Whether the request went over a kept-alive connection that had served an earlier exchange.
    public var connectionReused: Bool
    /// The pool's number for the connection, stable for the connection's lifetime.
    public var connectionID: Int
    /// Whether the connection went back to the pool for reuse (or, in a series, carries the next request).
    public var connectionKeptAlive: Bool
    /// Whether the request had been sent ahead, while the previous response on the connection was still
    /// arriving (``DKHTTPClient/execute(series:cancellation:buffer:next:onHead:onBody:onEnd:)``).
    public var wasSentAhead: Bool = false
}
