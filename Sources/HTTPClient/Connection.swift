import Glibc
import HTTPWire

/// A connected TCP socket, optionally with TLS on top, with deadline-bounded blocking I/O.
///
/// Create one with ``connect(host:port:tls:serverName:deadline:)``. Reads and writes block the
/// calling thread (the socket is non-blocking underneath and waits with `poll(2)`), so call them
/// from a dedicated I/O thread, never from Swift's cooperative pool.
///
/// Not `Sendable`: a connection belongs to one thread at a time (the pool hands it from thread to
/// thread with a happens-before edge). The only thing other threads may touch is its
/// ``canceller``.
public final class Connection {
    /// The socket descriptor, open until ``close()``. For a future `splice(2)` fast path on plain
    /// connections; do not read or write it directly on TLS connections, and never close it.
    public let fileDescriptor: Int32
    /// The peer's address and port, for example "127.0.0.1:8080" or "[::1]:443".
    public let remoteAddress: String
    /// The local port of the connection.
    public let localPort: Int
    /// The protocol selected with ALPN during the TLS handshake (for example "http/1.1"), or `nil`.
    public private(set) var negotiatedALPN: String?
    /// The negotiated TLS version ("TLSv1.2", "TLSv1.3"), or `nil` for plain connections.
    public private(set) var tlsVersion: String?
    /// The negotiated TLS cipher suite ("TLS_AES_128_GCM_SHA256", …), or `nil` for plain connections.
    public private(set) var tlsCipher: String?
    /// Whether the TLS handshake resumed a session of an earlier connection (an abbreviated handshake;
    /// see ``DKTLSConfiguration/resumesSessions``). `false` for plain connections.
    public private(set) var tlsSessionResumed = false
    /// Every address tried while connecting and what became of it (Happy Eyeballs, RFC 8305).
    public internal(set) var connectAttempts: [ConnectAttempt] = []
    /// The IP version of the connection to the peer (`.ipv4` or `.ipv6`).
    public internal(set) var addressFamily: AddressFamily = .any
    /// The proxy this connection goes through, or `nil` for a direct connection.
    public internal(set) var proxy: ProxyURL?

    private let control: ConnectionControl
    private var tls: TLSSession?
    private var isClosed = false

    private init(fileDescriptor: Int32, remoteAddress: SocketAddress) {
        self.fileDescriptor = fileDescriptor
        self.remoteAddress = remoteAddress.description
        self.localPort = Socket.localPort(fileDescriptor)
        self.control = ConnectionControl(fileDescriptor: fileDescriptor)
    }

    deinit {
        close()
    }

    /// Whether this connection runs TLS.
    public var isTLS: Bool { tls != nil }

    /// A handle that cancels this connection's I/O from any thread.
    public var canceller: ConnectionCanceller { ConnectionCanceller(control: control) }

    // MARK: - Connecting

    /// Resolves `host`, connects with Happy Eyeballs, and runs the TLS handshake when `tls` is given.
    ///
    /// Addresses from `getaddrinfo` (IPv4 and IPv6) are raced per RFC 8305: families interleaved
    /// (IPv6 first, or the family in `options.preferredFamily`), a new non-blocking `connect` every
    /// 250 ms while earlier ones are pending, or at once when one fails; the first to connect wins
    /// and the others are closed (see ``connectAttempts``). Sockets are close-on-exec, have
    /// `TCP_NODELAY`, and never raise `SIGPIPE`.
    ///
    /// With TLS, the server name is sent as SNI (not for IP literals) and the certificate is checked
    /// against it (`SSL_set1_host`, or the IP address for IP literals) when the context verifies.
    /// - Parameters:
    ///   - host: A DNS name or IP literal (IPv6 literals may be bracketed).
    ///   - port: The TCP port.
    ///   - tls: The TLS context, or `nil` for plain TCP.
    ///   - serverName: The name for SNI and certificate checks; `nil` means `host`.
    ///   - deadline: When resolving, connecting and the handshake together must be done.
    ///   - options: Address family restrictions, preferences and resolver overrides.
    /// - Returns: The open connection.
    /// - Throws: `.resolveFailed`, `.connectFailed` (with `errno`; transient for refused/unreachable),
    ///   `.connectTimeout`, a certificate code, `.tlsHandshakeFailed`, `.connectionClosed`/`.connectionReset`.
    public static func connect(
        host: String, port: Int, tls: TLSContext?, serverName: String?, deadline: Deadline,
        options: ConnectOptions = ConnectOptions()
    ) throws(TransportError) -> Connection {
        let connection = try openTCP(host: host, port: port, deadline: deadline, options: options)
        if let tls {
            // On failure `connection` is released, which closes the socket.
            try connection.startTLS(context: tls, serverName: serverName ?? host, port: port, deadline: deadline)
        }
        return connection
    }

    /// Resolves `host` (or takes `options.addressOverride`), filters by family and races the
    /// addresses. Plain TCP; the caller may then speak a proxy protocol or start TLS.
    static func openTCP(
        host: String, port: Int, deadline: Deadline, options: ConnectOptions
    ) throws(TransportError) -> Connection {
        var addresses: [SocketAddress] = []
        if let override = options.addressOverride {
            for literal in override {
                addresses += try Resolver.resolve(host: literal, port: port, deadline: deadline)
            }
        } else {
            addresses = try Resolver.resolve(host: host, port: port, deadline: deadline)
        }
        addresses = options.addressFamily.allowed(addresses)
        guard !addresses.isEmpty else {
            let family = options.addressFamily == .ipv4 ? "IPv4" : "IPv6"
            throw TransportError(
                .resolveFailed, operation: "getaddrinfo",
                detail: "\(IPAddressLiteral.unbracketed(host)) has no \(family) address")
        }
        let families = addresses.map { $0.family == AF_INET6 ? HappyEyeballs.Family.v6 : .v4 }
        let preferred: HappyEyeballs.Family? =
            switch options.preferredFamily {
            case .ipv4: .v4
            case .ipv6: .v6
            default: nil
            }
        let ordered = HappyEyeballs.order(families: families, preferring: preferred).map { addresses[$0] }
        let delay = UInt64(max(0.001, options.attemptDelay.asSeconds) * 1e9)
        let (fd, address, attempts) = try HappyEyeballsConnector.connect(
            to: ordered, host: host, deadline: deadline, delay: delay)
        let connection = Connection(fileDescriptor: fd, remoteAddress: address)
        connection.connectAttempts = attempts
        connection.addressFamily = address.family == AF_INET6 ? .ipv6 : .ipv4
        return connection
    }

    /// Runs the TLS handshake on this (plain, possibly tunnelled) connection, to the origin at `port`
    /// (which, with ``proxy``, picks the sessions it may resume).
    func startTLS(context: TLSContext, serverName: String, port: Int, deadline: Deadline) throws(TransportError) {
        let session = try TLSSession(
            context: context, fd: fileDescriptor, control: control, serverName: serverName, port: port, proxy: proxy)
        tls = session
        try session.handshake(deadline: deadline)
        negotiatedALPN = session.negotiatedALPN
        tlsVersion = session.protocolVersion
        tlsCipher = session.cipherName
        tlsSessionResumed = session.resumedSession
    }

    // MARK: - I/O

    /// Reads up to `buffer.count` bytes, waiting until some arrive, the peer closes, or the deadline.
    ///
    /// On TLS connections, several records are decrypted per call while they are already available
    /// and at least 16 KiB of space remains, so large buffers come back well filled. Give TLS
    /// connections at least 16 KiB. Wraps `recv(2)` or `SSL_read`; `EINTR` is retried.
    ///
    /// A caller that knows how many bytes the message still owes passes them as `remaining`: while a
    /// fast stream owes plenty, the wait (for bytes, or on TLS for ciphertext) uses a receive low-water
    /// mark (`SO_RCVLOWAT`) so the reader wakes for a large batch instead of every segment, without
    /// ever holding back bytes a slow sender already delivered (the rule: ``ReceiveLowWater``).
    /// - Parameters:
    ///   - buffer: Where to put the bytes; must not be empty.
    ///   - deadline: When to give up waiting.
    ///   - remaining: The bytes the message being read still owes, or `nil` when unknown.
    /// - Returns: The number of bytes read (> 0), or 0 at an orderly end of stream (TCP FIN; for TLS,
    ///   the peer's `close_notify`).
    /// - Throws: `.tlsUncleanShutdown` when a TLS peer closed TCP without `close_notify` (the caller
    ///   decides whether the HTTP framing proved the body complete), `.readTimeout`,
    ///   `.connectionReset`, `.cancelled`, `.tlsFailed`, `.systemCall`.
    public func read(
        into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline, remaining: Int64? = nil
    ) throws(TransportError) -> Int {
        try checkOpen("read")
        precondition(buffer.count > 0, "read(into:) needs a non-empty buffer")
        if let tls { return try tls.read(into: buffer, deadline: deadline, remaining: remaining) }
        while true {
            switch Socket.receive(fileDescriptor, into: buffer) {
            case .processed(0):
                if control.isCancelled { throw cancelledError("recv") }
                return 0
            case .processed(let count):
                readableWait.read(count)
                return count
            case .wouldBlock:
                if control.isCancelled { throw cancelledError("recv") }
                try readableWait.waitUntilReadable(
                    fileDescriptor, remaining: remaining, bufferCapacity: buffer.count, deadline: deadline, peer: remoteAddress)
            case .failed(let error):
                throw ioError(error, operation: "recv")
            }
        }
    }

    /// The receive low-water mark of this plain connection's socket (TLS sessions keep their own).
    private var readableWait = MarkedReadableWait()

    /// Puts the socket back to waking for any byte, at the end of a message: an idle kept-alive
    /// connection's stale check (``hasPendingInputOrEOF``) must see a single stray byte.
    func endOfMessage() {
        guard !isClosed else { return }
        if let tls { tls.endOfMessage() } else { readableWait.endOfMessage(fileDescriptor) }
    }

    /// Writes all of `bytes`, waiting whenever the socket buffer is full.
    ///
    /// Wraps `send(2)` with `MSG_NOSIGNAL`, or `SSL_write`.
    /// - Throws: `.writeTimeout`, `.connectionClosed` (`EPIPE`), `.connectionReset`, `.cancelled`,
    ///   `.tlsFailed`, `.systemCall`.
    public func write(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws(TransportError) {
        try checkOpen("write")
        if let tls { return try tls.write(bytes, deadline: deadline) }
        var offset = 0
        while offset < bytes.count {
            switch Socket.send(fileDescriptor, UnsafeRawBufferPointer(rebasing: bytes[offset...])) {
            case .processed(let count):
                offset += count
            case .wouldBlock:
                try waitUntilWritable(deadline: deadline)
            case .failed(let error):
                throw ioError(error, operation: "send")
            }
        }
    }

    /// Waits until the connection has something to read (bytes, EOF, or an error) or the deadline.
    /// - Returns: `true` when a read would not wait for the network (except, on TLS, when only
    ///   non-application records such as session tickets arrived), `false` at the deadline.
    /// - Throws: `.cancelled` after cancellation; `.systemCall` if `poll` fails.
    public func waitForReadable(deadline: Deadline) throws(TransportError) -> Bool {
        try checkOpen("poll")
        if let tls, tls.hasBufferedPlaintext { return true }
        switch Socket.poll(fileDescriptor, for: .readable, deadline: deadline) {
        case .success(.none):
            return false
        case .success(.some):
            if control.isCancelled { throw cancelledError("poll") }
            return true
        case .failure(let error):
            throw TransportError(
                .systemCall, errorNumber: error, operation: "poll", detail: "waiting for the socket failed: \(error)"
            )
        }
    }

    /// Whether the peer closed the connection or sent bytes nobody asked for, checked without
    /// waiting (`poll` with a zero timeout, plus `SSL_pending`/`SSL_peek` on TLS so session tickets
    /// do not count). The pool uses this to discard stale kept-alive connections before reuse.
    /// Always `true` once closed or cancelled.
    public var hasPendingInputOrEOF: Bool {
        if isClosed || control.isCancelled { return true }
        if let tls { return tls.hasPendingInputOrEOF }
        return Socket.isReadableNow(fileDescriptor)
    }

    /// Closes the connection: for TLS a best-effort, non-blocking `close_notify` (`SSL_shutdown`),
    /// then `close(2)`. Idempotent; also done in `deinit`. After closing, I/O throws.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        tls?.shutdown()
        tls = nil
        control.closeDescriptor()
    }

    // MARK: - Helpers

    private func checkOpen(_ operation: String) throws(TransportError) {
        if isClosed {
            throw TransportError(
                .connectionClosed, operation: operation,
                detail: "the connection to \(remoteAddress) was already closed locally")
        }
    }

    private func cancelledError(_ operation: String) -> TransportError {
        TransportError(.cancelled, operation: operation, detail: "the connection to \(remoteAddress) was cancelled")
    }

    private func ioError(_ error: DKErrno, operation: String) -> TransportError {
        if control.isCancelled { return cancelledError(operation) }
        switch error {
        case .connectionReset:
            return TransportError(
                .connectionReset, errorNumber: error, operation: operation,
                detail: "\(remoteAddress) reset the connection")
        case .brokenPipe, .notConnected:
            return TransportError(
                .connectionClosed, errorNumber: error, operation: operation,
                detail: "\(remoteAddress) closed the connection")
        case .timedOut:
            return TransportError(
                .connectionReset, errorNumber: error, operation: operation,
                detail: "the connection to \(remoteAddress) timed out in the kernel")
        default:
            return TransportError(
                .systemCall, errorNumber: error, operation: operation,
                detail: "\(operation) on \(remoteAddress) failed: \(error)")
        }
    }

    /// Waits until the socket takes more bytes (reads wait through ``MarkedReadableWait``).
    private func waitUntilWritable(deadline: Deadline) throws(TransportError) {
        if control.isCancelled { throw cancelledError("send") }
        switch Socket.poll(fileDescriptor, for: .writable, deadline: deadline) {
        case .success(.some):
            return
        case .success(.none):
            throw TransportError(.writeTimeout, operation: "poll", detail: "no progress writing to \(remoteAddress) before the deadline")
        case .failure(let error):
            throw TransportError(
                .systemCall, errorNumber: error, operation: "poll", detail: "waiting for the socket failed: \(error)"
            )
        }
    }
}

/// Cancels a ``Connection``'s I/O from any thread.
///
/// `cancel()` calls `shutdown(fd, SHUT_RDWR)`, which wakes a `poll` or blocked call at once; the
/// interrupted and all later operations throw `.cancelled`. Unlike `close(2)` it cannot race with
/// the descriptor number being reused: a lock orders it against the connection's own `close()`,
/// after which cancelling does nothing.
public struct ConnectionCanceller: Sendable {
    let control: ConnectionControl

    /// Cancels the connection's current and future I/O. Safe to call repeatedly, concurrently, and
    /// after the connection was closed.
    public func cancel() { control.cancel() }

    /// Whether ``cancel()`` was called while the connection was open.
    public var isCancelled: Bool { control.isCancelled }
}

/// The part of a connection shared with other threads: the descriptor's open/closed state and the
/// cancelled flag, under one lock so `shutdown` never touches a closed (and possibly reused) number.
final class ConnectionControl: Sendable {
    private struct State {
        var fileDescriptor: Int32
        var isClosed = false
        var isCancelled = false
    }

    private let state: LockedValue<State>

    init(fileDescriptor: Int32) {
        state = LockedValue(State(fileDescriptor: fileDescriptor))
    }

    /// Whether the connection was cancelled. Read on error and wait paths only, not per read.
    var isCancelled: Bool { state.withLock { $0.isCancelled } }

    func cancel() {
        state.withLock { state in
            guard !state.isClosed, !state.isCancelled else { return }
            state.isCancelled = true
            _ = Glibc.shutdown(state.fileDescriptor, Int32(SHUT_RDWR))
        }
    }

    /// Closes the descriptor once. `close(2)` errors are not actionable for a socket here: the
    /// descriptor is released either way on Linux (retrying `EINTR` could close a reused number).
    func closeDescriptor() {
        state.withLock { state in
            guard !state.isClosed else { return }
            state.isClosed = true
            _ = Glibc.close(state.fileDescriptor)
        }
    }
}
