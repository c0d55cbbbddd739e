import Glibc
import HTTPWire
import Synchronization

/// One HTTP request: a method, an absolute URL and extra header fields.
public struct HTTPRequest: Sendable, Hashable {
    /// `GET` or `HEAD`.
    public var method: HTTPMethod
    /// The absolute `http` or `https` URL. Userinfo becomes Basic authorization unless `headers`
    /// carries its own `Authorization`; it never appears in the request line.
    public var url: HTTPURL
    /// Extra fields, sent after `Host` in the given order. A `Host` field here is ignored.
    public var headers: HTTPHeaders

    /// Creates a request.
    public init(method: HTTPMethod = .GET, url: HTTPURL, headers: HTTPHeaders = HTTPHeaders()) {
        self.method = method
        self.url = url
        self.headers = headers
    }
}

/// What to do with a response body once its head has been seen.
public enum BodyDisposition: Sendable, Hashable {
    /// Deliver the body to the body callback.
    case stream
    /// Do not deliver it. A short body (≤ 64 KiB) is read and dropped so the connection can be
    /// reused; a longer one closes the connection.
    case discard
}

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
    /// Whether the connection went back to the pool for reuse.
    public var connectionKeptAlive: Bool
}

/// Cancels an exchange in progress from any thread.
///
/// Cancelling shuts the socket down (`shutdown(2)`), which wakes a blocked read at once; the exchange
/// then throws a `TransportError` with code `.cancelled`. A token may be reused across exchanges until it
/// is cancelled; once cancelled it stays cancelled.
public final class CancellationToken: Sendable {
    private struct State: ~Copyable {
        var isCancelled = false
        var canceller: ConnectionCanceller?
    }

    private let state = Mutex(State())

    /// Creates a token that is not cancelled.
    public init() {}

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Cancels the current and any future exchange using this token.
    public func cancel() {
        let canceller: ConnectionCanceller? = state.withLock { state in
            state.isCancelled = true
            return state.canceller
        }
        canceller?.cancel()
    }

    /// Registers the connection of the running exchange. Returns `false` if already cancelled.
    func attach(_ canceller: ConnectionCanceller) -> Bool {
        state.withLock { state in
            if state.isCancelled { return false }
            state.canceller = canceller
            return true
        }
    }

    func detach() {
        state.withLock { $0.canceller = nil }
    }
}

/// A receive buffer owned by one thread and reused across exchanges, so a transfer allocates it once.
///
/// Not `Sendable`: it belongs to the thread that runs the exchanges.
public final class ReceiveBuffer {
    let storage: UnsafeMutableRawBufferPointer

    /// Allocates `capacity` bytes (at least 64 KiB, so one TLS record always fits).
    public init(capacity: Int = 1 << 20) {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(64 << 10, capacity), alignment: 64)
    }

    /// The buffer size in bytes.
    public var capacity: Int { storage.count }

    deinit { storage.deallocate() }
}

/// An HTTP/1.1 client: a connection pool plus the request/response exchange.
///
/// Every call blocks its calling thread (see docs/ARCHITECTURE.md, threading model); run it on a
/// dedicated thread, not on Swift's cooperative pool. The client itself is `Sendable` and may be
/// shared by many threads; connections are reused per origin.
public final class HTTPClient: Sendable {
    /// The configuration the client was created with.
    public let configuration: HTTPClientConfiguration
    /// Built on the first `https` connection, then shared: plain-HTTP clients never pay for it.
    private let tlsContext = Mutex<TLSContext?>(nil)
    let pool: ConnectionPool

    /// Creates a client. The TLS context is built once, on the first `https` request.
    /// - Throws: `TransportError` (`.tlsFailed`) when an extra CA file in the TLS configuration cannot
    ///   be read, so a wrong `--cacert` fails at once rather than at the first https request.
    public init(configuration: HTTPClientConfiguration = HTTPClientConfiguration()) throws(TransportError) {
        self.configuration = configuration
        for path in configuration.tls.additionalTrustRootFiles where access(path, R_OK) != 0 {
            throw TransportError(
                .tlsFailed, errno: errno, operation: "access",
                detail: "cannot read the CA file \(path): \(String(cString: strerror(errno)))")
        }
        self.pool = ConnectionPool(
            maxPerOrigin: configuration.maxConnectionsPerOrigin,
            idleLifetime: configuration.idleConnectionLifetime)
    }

    /// How many TCP connections this client has opened so far (for tests and statistics).
    public var connectionsOpened: Int { pool.connectionsOpened }

    /// Closes all idle connections. Exchanges in progress finish normally.
    public func closeIdleConnections() { pool.closeAll() }

    /// Sends `request` and streams the response.
    ///
    /// `onHead` sees the final response head (interim 1xx responses are skipped) and decides whether
    /// the body is wanted. `onBody` then receives the body in order, as slices of the connection's
    /// receive buffer, valid only during the call (no copy is made). The whole body is never held.
    ///
    /// A request sent over a reused kept-alive connection that the server had already closed (EOF, a
    /// TLS close without close_notify, or reset before any response byte) is retried once on a fresh
    /// connection, which is safe for GET and HEAD.
    ///
    /// - Parameters:
    ///   - request: What to send.
    ///   - cancellation: Cancels the exchange from another thread.
    ///   - buffer: A receive buffer to reuse; one of `configuration.receiveBufferSize` is allocated if nil.
    ///   - onHead: Called once with the final head.
    ///   - onBody: Called with each run of body bytes.
    /// - Returns: A summary once the response is complete.
    /// - Throws: `TransportError`, `WireError`, or whatever the callbacks throw.
    public func execute(
        _ request: HTTPRequest,
        cancellation: CancellationToken? = nil,
        buffer: ReceiveBuffer? = nil,
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> ExchangeSummary {
        let buffer = buffer ?? ReceiveBuffer(capacity: configuration.receiveBufferSize)
        let head = try encodeHead(request)
        var preferFresh = false
        while true {
            let lease = try acquire(for: request.url, preferFresh: preferFresh, cancellation: cancellation)
            do {
                return try exchange(
                    head: head, method: request.method, on: lease, cancellation: cancellation, buffer: buffer,
                    onHead: onHead, onBody: onBody)
            } catch let failure as StaleConnection {
                // The server closed the kept-alive connection before answering: retry once, fresh.
                pool.release(lease, reusable: false)
                if preferFresh { throw failure.error }
                preferFresh = true
            } catch {
                pool.release(lease, reusable: false)
                throw error
            }
        }
    }

    private func sharedTLSContext() throws(TransportError) -> TLSContext {
        try tlsContext.withLock { (context: inout TLSContext?) throws(TransportError) -> TLSContext in
            if let context { return context }
            let built = try TLSContext(configuration: configuration.tls)
            context = built
            return built
        }
    }

    /// The error used internally when a reused connection turns out to be dead before any response byte.
    private struct StaleConnection: Error {
        let error: TransportError
    }

    private func encodeHead(_ request: HTTPRequest) throws(WireError) -> [UInt8] {
        var headers = HTTPHeaders()
        if !request.headers.contains(name: "User-Agent") {
            headers.add(name: "User-Agent", value: configuration.userAgent)
        }
        if !request.headers.contains(name: "Accept") {
            headers.add(name: "Accept", value: "*/*")
        }
        // Byte offsets must refer to the representation on disk, so ask for no content coding.
        if !request.headers.contains(name: "Accept-Encoding") {
            headers.add(name: "Accept-Encoding", value: "identity")
        }
        if !request.headers.contains(name: "Authorization"), let basic = request.url.basicAuthorization {
            headers.add(name: "Authorization", value: basic)
        }
        for field in request.headers where !HTTPHeaders.namesEqual(field.name, "Host") {
            headers.add(name: field.name, value: field.value)
        }
        let head = RequestHead(
            method: request.method, target: request.url.requestTarget, host: request.url.hostHeaderValue,
            headers: headers)
        return try head.encoded()
    }

    private func acquire(for url: HTTPURL, preferFresh: Bool, cancellation: CancellationToken?) throws
        -> ConnectionLease
    {
        let origin = url.origin
        let deadline = Deadline.after(seconds: configuration.connectTimeout)
        let slot = try pool.reserve(
            origin: origin, deadline: deadline, preferFresh: preferFresh,
            isCancelled: { cancellation?.isCancelled ?? false })
        switch slot {
        case .idle(let lease):
            return lease
        case .new(let connectionID):
            do {
                // Waiting for a slot had its own bound; the connect and handshake get the full timeout.
                let connection = try Connection.connect(
                    host: url.host, port: url.effectivePort, tls: url.scheme == .https ? try sharedTLSContext() : nil,
                    serverName: url.host, deadline: .after(seconds: configuration.connectTimeout))
                return ConnectionLease(
                    connection: connection, origin: origin, isReused: false, connectionID: connectionID,
                    idleSince: monotonicSeconds())
            } catch {
                pool.cancelReservation(origin: origin)
                throw error
            }
        }
    }

    private func exchange(
        head: [UInt8],
        method: HTTPMethod,
        on lease: ConnectionLease,
        cancellation: CancellationToken?,
        buffer: ReceiveBuffer,
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> ExchangeSummary {
        let connection = lease.connection
        if let cancellation {
            guard cancellation.attach(connection.canceller) else {
                throw TransportError(.cancelled, detail: "the request was cancelled")
            }
        }
        defer { cancellation?.detach() }

        let idleTimeout = configuration.idleTimeout
        do {
            try head.withUnsafeBytes { bytes in
                try connection.write(bytes, deadline: .after(seconds: idleTimeout))
            }
        } catch let error as TransportError {
            if lease.isReused && (error.code == .connectionReset || error.code == .connectionClosed) {
                throw StaleConnection(error: error)
            }
            throw error
        }

        var parser = ResponseParser(requestMethod: method, limits: configuration.parserLimits)
        var responseHead: ResponseHead?
        var disposition = BodyDisposition.stream
        var bodyBytes: Int64 = 0
        var discarded: Int64 = 0
        var receivedAnything = false
        var reusable = false
        let storage = buffer.storage

        receive: while true {
            let count: Int
            do {
                count = try connection.read(into: storage, deadline: .after(seconds: idleTimeout))
            } catch {
                // A TLS server may drop an idle kept-alive connection without close_notify (nginx does
                // for timed-out and `return 444` connections): that EOF is as stale as a plain one.
                if lease.isReused && !receivedAnything
                    && (error.code == .connectionReset || error.code == .connectionClosed
                        || error.code == .tlsUncleanShutdown)
                {
                    throw StaleConnection(error: error)
                }
                throw error
            }
            if count == 0 {
                if lease.isReused && !receivedAnything {
                    throw StaleConnection(
                        error: TransportError(
                            .connectionClosed, detail: "the server closed the kept-alive connection before answering"))
                }
                // EOF: either a close-delimited body ends here, or the response is truncated (throws).
                let event = try parser.finish()
                guard event == .end else {
                    throw WireError(.missingResponseHead, "the connection closed before a complete response arrived")
                }
                reusable = false
                break receive
            }
            receivedAnything = true
            var offset = 0
            // Call the parser until it asks for more input: a response without a body (or whose last
            // body byte was just delivered) reports `.end` on a call with no bytes left.
            parsing: while true {
                let window = UnsafeRawBufferPointer(rebasing: storage[offset..<count])
                let step = try parser.next(window)
                switch step.event {
                case .needMore:
                    break parsing
                case .head(let head):
                    responseHead = head
                    disposition = try onHead(head)
                case .body(let range):
                    if disposition == .stream {
                        bodyBytes += Int64(range.count)
                        try onBody(UnsafeRawBufferPointer(rebasing: window[range]))
                    } else {
                        discarded += Int64(range.count)
                        if discarded > 64 << 10 {
                            // Not worth draining: close instead of reading an unwanted body.
                            reusable = false
                            break receive
                        }
                    }
                case .end:
                    // Bytes after the end of a response we did not pipeline mean a confused server.
                    reusable = parser.isReusable && offset + step.consumed == count
                    break receive
                }
                offset += step.consumed
            }
        }

        guard let finalHead = responseHead else {
            throw WireError(.missingResponseHead, "the response ended without a status line and header section")
        }
        pool.release(lease, reusable: reusable)
        return ExchangeSummary(
            head: finalHead, bodyBytes: bodyBytes, connectionReused: lease.isReused,
            connectionID: lease.connectionID, connectionKeptAlive: reusable)
    }
}

extension WireError.Code {
    /// The connection ended before a response head was received.
    public static let missingResponseHead = WireError.Code("missingResponseHead")
}
