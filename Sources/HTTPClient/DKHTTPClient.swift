internal import CDownloadKitSystem
import Glibc
import HTTPWire
import Logging

/// An HTTP/1.1 client: a connection pool plus the request/response exchange.
///
/// Every call blocks its calling thread (see docs/ARCHITECTURE.md, threading model); run it on a
/// dedicated thread, not on Swift's cooperative pool. The client itself is `Sendable` and may be
/// shared by many threads; connections are reused per origin.
public final class DKHTTPClient: Sendable {
    /// The configuration the client was created with.
    public let configuration: DKHTTPClientConfiguration
    /// Built on the first `https` connection, then shared: plain-HTTP clients never pay for it.
    private let tlsContext = LockedValue<TLSContext?>(nil)
    let pool: ConnectionPool
    /// The proxies in effect (the environment read once, at creation, when so configured).
    public let proxies: ProxyConfiguration
    /// Where connection decisions are logged, or `nil`.
    let logger: Logger?
    /// The HTTP proxies' credentials (from their URLs), answering a proxy's Digest `407` (RFC 7616 with
    /// RFC 9110 §11.7.1): the same rules and nonce counts as origin credentials, bound to each proxy.
    let proxyAuthenticator = Authenticator()

    /// Creates a client. The TLS context is built once, on the first `https` request.
    /// - Parameters:
    ///   - configuration: Timeouts, TLS, pool bounds, proxies.
    ///   - logger: Receives what an operator needs about connections, at `debug`: each new connection
    ///     (peer address, IP version, proxy, TLS version and cipher), each reuse of a kept-alive one, a
    ///     stale connection retried, a failed connect, a `401` challenge answered. Metadata
    ///     `http.origin` and `http.connection`. Nothing per request body or per read. Default `nil`.
    /// - Throws: `TransportError` (`.tlsFailed`) when an extra CA file in the TLS configuration cannot
    ///   be read, so a wrong `--cacert` fails at once rather than at the first https request;
    ///   `.invalidProxy` when a proxy variable in the environment is not a usable proxy URL.
    public init(
        configuration: DKHTTPClientConfiguration = DKHTTPClientConfiguration(), logger: Logger? = nil
    ) throws(TransportError) {
        self.configuration = configuration
        self.logger = logger
        self.proxies = try configuration.proxy.resolved()
        for proxy in [proxies.httpProxy, proxies.httpsProxy].compactMap({ $0 })
        where proxy.kind == .http && proxy.user != nil {
            proxyAuthenticator.addCredential(
                Credential(user: proxy.user ?? "", password: proxy.password ?? ""), for: proxy.authenticationOrigin)
        }
        for path in configuration.tls.additionalTrustRootFiles where access(path, R_OK) != 0 {
            throw TransportError(
                .tlsFailed, errorNumber: .current, operation: "access",
                detail: "cannot read the CA file \(path): \(String(cString: strerror(errno)))")
        }
        self.pool = ConnectionPool(
            maxPerOrigin: configuration.maxConnectionsPerOrigin,
            idleLifetime: configuration.idleConnectionLifetime.asSeconds)
        // A wrong client key or passphrase fails here, at once, not at the first https request.
        if configuration.tls.clientCertificate != nil { _ = try sharedTLSContext() }
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
    /// With a ``DKHTTPClientConfiguration/cookieJar`` the matching `Cookie` field is added and every
    /// `Set-Cookie` stored. With an ``DKHTTPClientConfiguration/authenticator``, a `401` whose challenge
    /// it can answer for this origin is not shown to `onHead`: its body is discarded and the request
    /// sent once more with credentials (see ``Authenticator`` for the origin rules).
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
        _ request: DKHTTPRequest,
        cancellation: CancellationToken? = nil,
        buffer: ReceiveBuffer? = nil,
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void,
        onSpliced: (Int) throws -> Void = { _ in }
    ) throws -> ExchangeSummary {
        let buffer = buffer ?? ReceiveBuffer(capacity: configuration.receiveBufferSize)
        let cookieJar = configuration.cookieJar
        let answersChallenges = answersChallenges(request)
        var challengeAnswered = false
        while true {
            var retryWithCredentials = false
            let summary = try executeOnce(
                decorated(request, answersChallenges: answersChallenges), cancellation: cancellation, buffer: buffer,
                onHead: { head in
                    cookieJar?.receive(head, from: request.url)
                    if answersChallenge(head, to: request, alreadyAnswered: challengeAnswered) {
                        retryWithCredentials = true
                        return .discard
                    }
                    return try onHead(head)
                }, onBody: onBody, onSpliced: onSpliced)
            if !retryWithCredentials { return summary }
            challengeAnswered = true
        }
    }

    /// The one rule for a `401`, on single requests and in series alike: answered (the request is sent
    /// once more, with credentials) when the caller left authentication to the ``Authenticator`` and it
    /// can answer the challenge for this origin — a first challenge, or a Digest nonce gone stale
    /// (`stale=true`, which every connection of a segmented download meets once the server's nonce
    /// lifetime has passed). One answered challenge per request: a second 401 to the same request goes
    /// to the caller.
    private func answersChallenge(_ head: ResponseHead, to request: DKHTTPRequest, alreadyAnswered: Bool) -> Bool {
        guard head.status == 401, !alreadyAnswered, answersChallenges(request),
            configuration.authenticator?.accept(challengeFrom: head, url: request.url) == true
        else { return false }
        logger?.debug(
            "answering a 401 challenge with credentials", metadata: ["http.origin": "\(request.url.origin)"])
        return true
    }

    /// Sends `first` and then, one after another on the same connection where it can, the requests
    /// `next` returns, streaming each response through the same callbacks — a series of range
    /// requests for one resource, for example, without a round trip between them.
    ///
    /// While a response body of known length arrives, `next` is asked after each delivery, with the
    /// body bytes still owed, until it returns a request; that request is written on the connection at
    /// once (HTTP/1.1 pipelining, RFC 9112 §9.3.2; at most one ahead), and its response is read when the
    /// current one has ended. When nothing was sent ahead, `next` is asked once more with 0 after the
    /// response; `nil` then ends the series. Nothing is sent ahead once a response head announced
    /// `Connection: close` (a server may reset a connection that holds unread requests, losing the rest
    /// of the response). A request sent ahead that the server closes the connection on, or never answers
    /// within the idle timeout, is sent again on another connection, and that route — like one that
    /// reset a connection while a request was sent ahead — gets nothing sent ahead by this client again
    /// (``DKHTTPClientConfiguration/pipelining`` turns sending ahead off altogether). Requests are
    /// pipelined only to the same origin and never through a plain-HTTP forward proxy; otherwise each is
    /// sent after the previous response.
    ///
    /// Cookies and preemptive credentials are added to each request, and a `401` the
    /// ``Authenticator`` can answer (a stale Digest nonce among them) is answered by sending the same
    /// request again, exactly as ``execute(_:cancellation:buffer:onHead:onBody:onSpliced:)`` does: such a
    /// 401 never reaches `onHead` or `onEnd`. Bodies are streamed, never spliced. With
    /// ``DKHTTPClientConfiguration/pipelining`` off, `next` is asked only with 0, after each response.
    ///
    /// - Parameters:
    ///   - first: The first request. Every request of a series must be a `GET` or a `HEAD`, so that one
    ///     sent ahead and left unanswered can be sent again.
    ///   - cancellation: Cancels the series from another thread.
    ///   - buffer: A receive buffer to reuse; one of `configuration.receiveBufferSize` is allocated if nil.
    ///   - next: The request to send after the current one, or `nil` (not yet, or, when asked with 0
    ///     after a response, the end of the series). A request it returns is always sent.
    ///   - onSent: Called when a request that was not sent ahead has been written on its connection
    ///     (connected, TLS handshake done): its response's wait starts then. A caller measuring the
    ///     round trip (the time of `onHead` minus this one) measures no connect or handshake in it.
    ///   - onHead: Called with each response's final head, in request order.
    ///   - onBody: Called with each run of the current response's body bytes.
    ///   - onEnd: Called when a response is complete, before the next one is read.
    /// - Throws: `TransportError`, `WireError`, or whatever the callbacks throw; the connection is then
    ///   closed, with any request sent ahead on it.
    public func execute(
        series first: DKHTTPRequest,
        cancellation: CancellationToken? = nil,
        buffer: ReceiveBuffer? = nil,
        next: (_ owedBodyBytes: Int64) -> DKHTTPRequest?,
        onSent: () -> Void = {},
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void,
        onEnd: (ExchangeSummary) throws -> Void
    ) throws {
        let buffer = buffer ?? ReceiveBuffer(capacity: configuration.receiveBufferSize)
        let cookieJar = configuration.cookieJar
        var request = first
        // The connection on which the response to `request` comes next (it was sent ahead), if any.
        var pipelined: ConnectionLease?
        defer { if let pipelined { pool.release(pipelined, reusable: false) } }
        // Whether `request` already had a 401 answered (it is being sent again with credentials).
        var challengeAnswered = false
        while true {
            let current = request
            let proxy = proxies.proxy(for: current.url)
            let route = ConnectionKey(origin: current.url.origin, proxy: proxy)
            let sendsAhead = configuration.pipelining && !(proxy?.kind == .http && current.url.scheme == .http)
            var following: DKHTTPRequest?
            var retryWithCredentials = false
            let lease = pipelined
            pipelined = nil
            let exchanged = try send(
                head: { try seriesHead(current, proxy: proxy) }, request: current, proxy: proxy, pipelinedOn: lease,
                cancellation: cancellation,
                buffer: buffer,
                sendAhead: { owed in
                    guard sendsAhead, following == nil, let candidate = next(owed) else { return nil }
                    following = candidate
                    // Another route, or one that once left a request sent ahead unanswered (perhaps in this
                    // very series), waits for the end of this response.
                    guard candidate.url.origin == current.url.origin, proxies.proxy(for: candidate.url) == proxy,
                        !pool.refusesPipelining(route)
                    else { return nil }
                    return try seriesHead(candidate, proxy: proxy)
                },
                onSent: onSent,
                onHead: { head in
                    cookieJar?.receive(head, from: current.url)
                    // Discarded, the 401 sends nothing ahead: the same request goes again, with credentials.
                    if answersChallenge(head, to: current, alreadyAnswered: challengeAnswered) {
                        retryWithCredentials = true
                        return .discard
                    }
                    return try onHead(head)
                }, onBody: onBody, onSpliced: { _ in })
            pipelined = exchanged.pipelined
            challengeAnswered = retryWithCredentials
            if retryWithCredentials { continue }
            try onEnd(exchanged.summary)
            if following == nil { following = next(0) }
            guard let following else { return }
            // Sent ahead on a connection that did not stay open (`pipelined` is nil): sent again, on another.
            request = following
        }
    }

    /// The encoded head of one request of a series, cookies and preemptive credentials added. Only `GET`
    /// and `HEAD` (safe to send again when a request sent ahead goes unanswered) may be in a series.
    private func seriesHead(_ request: DKHTTPRequest, proxy: ProxyURL?) throws -> [UInt8] {
        precondition(request.method == .GET || request.method == .HEAD, "a series sends only GET and HEAD requests")
        return try encodeHead(decorated(request, answersChallenges: answersChallenges(request)), proxy: proxy)
    }

    /// Whether a `401` to `request` may be answered (and credentials sent preemptively): only when an
    /// authenticator is configured and the caller supplied no credentials itself (a header or URL
    /// userinfo), which are never second-guessed.
    private func answersChallenges(_ request: DKHTTPRequest) -> Bool {
        configuration.authenticator != nil && !request.headers.contains(name: "Authorization") && request.url.user == nil
    }

    /// `request` with the jar's cookies and the authenticator's preemptive credentials added.
    private func decorated(_ request: DKHTTPRequest, answersChallenges: Bool) -> DKHTTPRequest {
        var sent = request
        if let cookieJar = configuration.cookieJar, !request.headers.contains(name: "Cookie"),
            let cookies = cookieJar.cookieHeader(for: request.url)
        {
            sent.headers.add(name: "Cookie", value: cookies)
        }
        if answersChallenges,
            let authorization = configuration.authenticator?.preemptiveAuthorization(
                method: request.method, url: request.url)
        {
            sent.headers.add(name: "Authorization", value: authorization)
        }
        return sent
    }

    /// One exchange without authentication or cookies: connection reuse and the stale-connection retry.
    private func executeOnce(
        _ request: DKHTTPRequest,
        cancellation: CancellationToken?,
        buffer: ReceiveBuffer,
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void,
        onSpliced: (Int) throws -> Void
    ) throws -> ExchangeSummary {
        let proxy = proxies.proxy(for: request.url)
        return try send(
            head: { try encodeHead(request, proxy: proxy) }, request: request, proxy: proxy, pipelinedOn: nil,
            cancellation: cancellation, buffer: buffer, sendAhead: { _ in nil }, onSent: {}, onHead: onHead, onBody: onBody,
            onSpliced: onSpliced
        ).summary
    }

    /// One response: to `head`, sent on a pooled or new connection, or — with `pipelinedOn` — to the
    /// request already sent ahead on that connection. The rules of dead connections live here: a
    /// request on a reused connection that the server had closed before answering is sent once more on
    /// a fresh one; a request sent ahead that the server closed the connection on, or never answered,
    /// is sent again on another connection, and a route that did so without announcing the close gets
    /// nothing sent ahead again. A plain-HTTP proxy's Digest `407` is answered once: `head` is encoded
    /// again, now with the proxy's Digest credentials, and sent.
    private func send(
        head makeHead: () throws -> [UInt8], request: DKHTTPRequest, proxy: ProxyURL?,
        pipelinedOn pipelined: ConnectionLease?,
        cancellation: CancellationToken?, buffer: ReceiveBuffer, sendAhead: (Int64) throws -> [UInt8]?,
        onSent: () -> Void,
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void,
        onSpliced: (Int) throws -> Void
    ) throws -> Exchanged {
        var preferFresh = false
        var pending = pipelined
        // Encoded even for a request sent ahead (its head is on the wire already): left unanswered, it is
        // sent again on another connection.
        var head = try makeHead()
        var proxyChallengeAnswered = false
        while true {
            let answersSentAhead = pending != nil
            var answerProxyChallenge = false
            let lease =
                try pending ?? acquire(for: request.url, proxy: proxy, preferFresh: preferFresh, cancellation: cancellation)
            pending = nil
            do {
                let exchanged = try exchange(
                    head: answersSentAhead ? nil : head, method: request.method, on: lease, cancellation: cancellation,
                    buffer: buffer, sendAhead: sendAhead, onSent: onSent,
                    onHead: { (head: ResponseHead) throws -> BodyDisposition in
                        // Through an HTTP proxy, a 407 to an absolute-form request is the proxy's, not the origin's.
                        if let proxy, proxy.kind == .http, request.url.scheme == .http, head.status == 407 {
                            if !proxyChallengeAnswered && !answersSentAhead
                                && proxyAuthenticator.acceptProxyChallenge(from: head, proxy: proxy.authenticationOrigin)
                            {
                                answerProxyChallenge = true
                                return .discard
                            }
                            throw ProxyConnector.refusal(
                                head, proxy: proxy, target: "GET \(request.url.absoluteFormTarget)", isConnect: false)
                        }
                        return try onHead(head)
                    }, onBody: onBody, onSpliced: onSpliced)
                guard answerProxyChallenge else { return exchanged }
                // Nothing is sent ahead through a plain-HTTP proxy: no response is owed on any connection.
                proxyChallengeAnswered = true
                head = try makeHead()
                logger?.debug(
                    "answering the proxy's Digest challenge", metadata: ["http.origin": "\(request.url.origin)"])
            } catch let failure as StaleConnection {
                pool.release(lease, reusable: false)
                if answersSentAhead {
                    // Never answered: sent again, on another connection.
                    refusePipelining(on: lease, after: failure.error)
                    continue
                }
                if preferFresh { throw proxy.map { ProxyConnector.annotated(failure.error, proxy: $0) } ?? failure.error }
                logger?.debug(
                    "the server closed kept-alive connection \(lease.connectionID) before answering; retrying on a new one",
                    metadata: ["http.origin": "\(lease.origin)", "http.connection": "\(lease.connectionID)"])
                preferFresh = true
            } catch let error as TransportError {
                pool.release(lease, reusable: false)
                // Name the proxy: "closed early" means something else when a proxy sits in between.
                throw proxy.map { ProxyConnector.annotated(error, proxy: $0) } ?? error
            } catch let error as WireError {
                pool.release(lease, reusable: false)
                // A response cut short (or garbled) through a proxy may be the proxy's doing: name it.
                throw proxy.map { ProxyConnector.annotated(error, proxy: $0) } ?? error
            } catch {
                pool.release(lease, reusable: false)
                throw error
            }
        }
    }

    /// A connection carrying a request sent ahead ended in the middle of a response: perhaps the server
    /// closed with that request unread (which resets the connection and loses the rest of the response),
    /// so nothing is sent ahead on this route again. The caller still gets the error.
    private func refusePipelining(on lease: ConnectionLease, after error: TransportError) {
        pool.recordPipeliningRefused(lease.origin)
        logger?.debug(
            """
            connection \(lease.connectionID) ended with a request sent ahead unanswered (\(error.code)); \
            no longer sending requests ahead to this origin
            """,
            metadata: ["http.origin": "\(lease.origin)", "http.connection": "\(lease.connectionID)"])
    }

    /// A complete response and, when a request was sent ahead and the connection stays open, the
    /// connection on which that request's response comes next (not back in the pool).
    private struct Exchanged {
        let summary: ExchangeSummary
        let pipelined: ConnectionLease?
    }

    private func sharedTLSContext() throws(TransportError) -> TLSContext {
        try tlsContext.withLock { (context: inout TLSContext?) throws(TransportError) -> TLSContext in
            if let context { return context }
            let built = try TLSContext(configuration: configuration.tls)
            context = built
            return built
        }
    }

    /// Splices up to `count` body bytes from the socket into the file at `position`, reporting each
    /// chunk to `onSpliced`. Returns the body bytes taken past the parser (fewer than `count` when the
    /// peer closed early; the parser then reports the truncation). When the file system refuses splice
    /// (`EINVAL`), the bytes already in the pipe go to `onBody` and `unsupported` is set so the rest of
    /// the body is streamed normally.
    private func splice(
        _ count: Int64, from connection: Connection, into fileDescriptor: Int32, at position: Int64,
        buffer: ReceiveBuffer, idleTimeout: Duration, onBody: (UnsafeRawBufferPointer) throws -> Void,
        onSpliced: (Int) throws -> Void, unsupported: inout Bool
    ) throws -> Int64 {
        let pipe = try buffer.splicePipe()
        var fileOffset = off_t(position)
        var moved: Int64 = 0
        var inPipe = 0
        do {
            while moved < count {
                let want = Int(min(count - moved, Int64(pipe.capacity)))
                let (received, failure) = retryingInterrupts {
                    dk_splice(connection.fileDescriptor, nil, pipe.write, nil, want, dk_splice_flags_nonblocking())
                }
                if let failure {
                    let code = failure.rawValue
                    if code == EAGAIN {
                        guard try connection.waitForReadable(deadline: .after(idleTimeout)) else {
                            throw TransportError(
                                .readTimeout, operation: "splice",
                                detail: "no data from \(connection.remoteAddress) for \(idleTimeout.asSeconds) s")
                        }
                        continue
                    }
                    if connection.canceller.isCancelled {
                        throw TransportError(.cancelled, operation: "splice", detail: "the request was cancelled")
                    }
                    throw TransportError(
                        code == ECONNRESET ? .connectionReset : .systemCall, errorNumber: failure, operation: "splice",
                        detail: "reading the body from \(connection.remoteAddress) failed: \(String(cString: strerror(code)))")
                }
                if received == 0 {
                    if connection.canceller.isCancelled {
                        throw TransportError(.cancelled, operation: "splice", detail: "the request was cancelled")
                    }
                    return moved  // EOF before the announced length: the caller's parser reports it
                }
                inPipe = received
                while inPipe > 0 {
                    let (written, failure) = retryingInterrupts {
                        dk_splice(pipe.read, nil, fileDescriptor, &fileOffset, inPipe, dk_splice_flags_move())
                    }
                    if let failure {
                        let code = failure.rawValue
                        if code == EINVAL && moved == 0 && inPipe == received {
                            // This file system cannot take spliced pages: hand these bytes over normally.
                            try drain(pipe: pipe.read, count: inPipe, into: buffer, onBody: onBody)
                            inPipe = 0
                            unsupported = true
                            return Int64(received)  // past the parser, though delivered through onBody
                        }
                        throw BodyFileWriteError(errorNumber: failure)
                    }
                    inPipe -= written
                }
                moved += Int64(received)
                try onSpliced(received)
            }
        } catch {
            // Bytes left in the pipe belong to this failed body; never let them reach another one.
            if inPipe > 0 { buffer.discardPipe() }
            throw error
        }
        return moved
    }

    /// Reads up to `count` body bytes from the connection into the receiver's windows. Returns the bytes
    /// taken past the parser (fewer than `count` when the peer closed early; the parser then reports the
    /// truncation).
    private func receiveInPlace(
        _ count: Int64, from connection: Connection, into receiver: any BodyReceiver, idleTimeout: Duration
    ) throws -> Int64 {
        var moved: Int64 = 0
        while moved < count {
            let left = count - moved
            let offered = receiver.window(limit: Int(clamping: left))
            // A receiver out of room: the rest of the body goes to the body callback.
            guard !offered.isEmpty else { return moved }
            let window = UnsafeMutableRawBufferPointer(rebasing: offered[..<Int(min(Int64(offered.count), left))])
            let received = try connection.read(into: window, deadline: .after(idleTimeout), remaining: left)
            if received == 0 { return moved }  // EOF before the announced length: the caller's parser reports it
            moved += Int64(received)
            try receiver.received(received)
        }
        return moved
    }

    /// Reads `count` bytes out of the splice pipe into the receive buffer and delivers them to `onBody`.
    private func drain(
        pipe: Int32, count: Int, into buffer: ReceiveBuffer, onBody: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var left = count
        while left > 0 {
            let chunk = min(left, buffer.storage.count)
            let n: Int
            do {
                n = try retryingEINTR("read") { read(pipe, buffer.storage.baseAddress, chunk) }
            } catch {
                buffer.discardPipe()
                throw TransportError(
                    .systemCall, errorNumber: error.errno, operation: error.call,
                    detail: "draining the splice pipe failed: \(error.errno)")
            }
            try onBody(UnsafeRawBufferPointer(rebasing: buffer.storage[0..<n]))
            left -= n
        }
    }

    /// The error used internally when a reused connection turns out to be dead before any response byte.
    private struct StaleConnection: Error {
        let error: TransportError
    }

    /// The request head. Through an HTTP proxy, `http` requests use the absolute form and carry the
    /// proxy's `Proxy-Authorization`; in tunnels (CONNECT, SOCKS5) a caller's `Proxy-Authorization`
    /// is dropped so proxy credentials never reach the origin.
    private func encodeHead(_ request: DKHTTPRequest, proxy: ProxyURL?) throws(WireError) -> [UInt8] {
        let viaHTTPProxy = proxy?.kind == .http && request.url.scheme == .http
        var headers = DKHTTPHeaders()
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
        for field in request.headers where !DKHTTPHeaders.namesEqual(field.name, "Host") {
            if proxy != nil && DKHTTPHeaders.namesEqual(field.name, "Proxy-Authorization") {
                if !viaHTTPProxy || proxy?.basicAuthorization != nil { continue }
            }
            headers.add(name: field.name, value: field.value)
        }
        // The proxy's Digest answer once it asked for one, else its URL's Basic credentials, up front.
        if viaHTTPProxy, let proxy,
            let credentials = proxyAuthenticator.authorization(
                method: request.method.rawValue, uri: request.url.absoluteFormTarget, origin: proxy.authenticationOrigin)
                ?? proxy.basicAuthorization
        {
            headers.add(name: "Proxy-Authorization", value: credentials)
        }
        let head = RequestHead(
            method: request.method, target: viaHTTPProxy ? request.url.absoluteFormTarget : request.url.requestTarget,
            host: request.url.hostHeaderValue, headers: headers)
        return try head.encoded()
    }

    private func acquire(for url: HTTPURL, proxy: ProxyURL?, preferFresh: Bool, cancellation: CancellationToken?)
        throws -> ConnectionLease
    {
        let origin = ConnectionKey(origin: url.origin, proxy: proxy)
        let deadline = Deadline.after(configuration.connectTimeout)
        let slot = try pool.reserve(
            origin: origin, deadline: deadline, preferFresh: preferFresh, cancellation: cancellation)
        switch slot {
        case .idle(let lease):
            logger?.debug(
                "reusing connection \(lease.connectionID)",
                metadata: ["http.origin": "\(origin)", "http.connection": "\(lease.connectionID)"])
            return lease
        case .new(let connectionID):
            do {
                // Waiting for a slot had its own bound; the connect and handshake get the full timeout.
                let dialled = proxy.map { ($0.host, $0.port) } ?? (url.host, url.effectivePort)
                let familyKey = "\(dialled.0):\(dialled.1)"
                let options = ConnectOptions(
                    addressFamily: configuration.addressFamily, preferredFamily: pool.preferredFamily(for: familyKey),
                    addressOverride: configuration.addressOverrides[dialled.0.lowercased()])
                let connection = try ProxyConnector.open(
                    url: url, proxy: proxy, tls: url.scheme == .https ? try sharedTLSContext() : nil, options: options,
                    userAgent: configuration.userAgent, parserLimits: configuration.parserLimits,
                    deadline: .after(configuration.connectTimeout), proxyAuthenticator: proxyAuthenticator)
                pool.recordFamily(connection.addressFamily, for: familyKey)
                if let logger { logConnected(connection, id: connectionID, origin: origin, to: logger) }
                return ConnectionLease(
                    connection: connection, origin: origin, isReused: false, connectionID: connectionID,
                    idleSince: monotonicSeconds())
            } catch {
                pool.cancelReservation(origin: origin)
                let error = proxy.map { ProxyConnector.annotated(error, proxy: $0) } ?? error
                logger?.debug("connect failed: \(error)", metadata: ["http.origin": "\(origin)"])
                throw error
            }
        }
    }

    private func logConnected(_ connection: Connection, id: Int, origin: ConnectionKey, to logger: Logger) {
        var line = "connected \(id) to \(connection.remoteAddress) over \(connection.addressFamily == .ipv6 ? "IPv6" : "IPv4")"
        if connection.connectAttempts.count > 1 { line += " after \(connection.connectAttempts.count) attempts" }
        if let version = connection.tlsVersion { line += ", \(version) \(connection.tlsCipher ?? "")" }
        logger.debug(Logger.Message(stringLiteral: line), metadata: ["http.origin": "\(origin)", "http.connection": "\(id)"])
    }

    /// The most one read takes while the response head is incomplete. Heads are far smaller; the parser
    /// keeps a partial head across reads, so a larger one only costs more reads. A body that is then
    /// spliced (plain HTTP into a file) never passes through the buffer, so the untouched rest of it costs
    /// no memory. One unbounded first read took the head and tens of KiB of body: ~70 MiB resident at
    /// 1,024 transfers (Scripts/scale-cli.sh); 16 KiB here left ~19 MiB, 4 KiB leaves about 4 KiB each.
    static let headReadSize = 4 << 10

    /// One request and its response on `lease`. `head` is nil when the request was already sent ahead on
    /// this connection. `sendAhead` is asked, after each delivery of a streamed body of known length
    /// that still owes bytes, for the head of a request to write at once; from then on reads never take
    /// a byte past this response's end, so the next response starts in a fresh read.
    private func exchange(
        head: [UInt8]?,
        method: DKHTTPMethod,
        on lease: ConnectionLease,
        cancellation: CancellationToken?,
        buffer: ReceiveBuffer,
        sendAhead: (Int64) throws -> [UInt8]?,
        onSent: () -> Void,
        onHead: (ResponseHead) throws -> BodyDisposition,
        onBody: (UnsafeRawBufferPointer) throws -> Void,
        onSpliced: (Int) throws -> Void
    ) throws -> Exchanged {
        let connection = lease.connection
        // Bytes of no response yet are as stale on a connection that carried a request ahead as on a reused one.
        let mayBeStale = lease.isReused || head == nil
        if let cancellation {
            guard cancellation.attach(connection.canceller) else {
                throw TransportError(.cancelled, detail: "the request was cancelled")
            }
        }
        defer { cancellation?.detach() }

        let idleTimeout = configuration.idleTimeout
        if let head {
            do {
                try head.withUnsafeBytes { bytes in
                    try connection.write(bytes, deadline: .after(idleTimeout))
                }
            } catch let error as TransportError {
                if lease.isReused && (error.code == .connectionReset || error.code == .connectionClosed) {
                    throw StaleConnection(error: error)
                }
                throw error
            }
            onSent()
        }

        var parser = ResponseParser(requestMethod: method, limits: configuration.parserLimits)
        var responseHead: ResponseHead?
        var disposition = BodyDisposition.stream
        var bodyBytes: Int64 = 0
        var discarded: Int64 = 0
        var receivedAnything = false
        var reusable = false
        var spliceUnsupported = false
        var sentAhead = false
        let storage = buffer.storage

        let headDeadline = Deadline.after(configuration.headTimeout)
        receive: while true {
            let count: Int
            do {
                let idleDeadline = Deadline.after(idleTimeout)
                // Until the head is complete, read at most `headReadSize`: a transfer whose body is then
                // spliced never touches the rest of its buffer (memory at 1,024 transfers, issue #23).
                // With a request sent ahead, the next response's bytes stay in the socket for its own exchange.
                let limit =
                    responseHead == nil
                    ? Self.headReadSize
                    : sentAhead ? Int(clamping: max(1, parser.remainingFixedBodyBytes ?? 1)) : storage.count
                let window = UnsafeMutableRawBufferPointer(rebasing: storage[..<min(storage.count, limit)])
                count = try connection.read(
                    into: window, deadline: responseHead == nil ? min(idleDeadline, headDeadline) : idleDeadline,
                    remaining: responseHead == nil ? nil : parser.remainingFixedBodyBytes)
            } catch {
                // A request sent ahead that gets no byte at all: the server ignored it (pipelining refused).
                if head == nil && !receivedAnything && error.code == .readTimeout {
                    throw StaleConnection(error: error)
                }
                if responseHead == nil, error.code == .readTimeout, headDeadline.hasPassed {
                    throw TransportError(
                        .readTimeout, operation: "read",
                        detail: "no complete response head from \(connection.remoteAddress) within \(configuration.headTimeout)")
                }
                // A TLS server may drop an idle kept-alive connection without close_notify (nginx does
                // for timed-out and `return 444` connections): that EOF is as stale as a plain one.
                if mayBeStale && !receivedAnything
                    && (error.code == .connectionReset || error.code == .connectionClosed
                        || error.code == .tlsUncleanShutdown)
                {
                    throw StaleConnection(error: error)
                }
                if sentAhead { refusePipelining(on: lease, after: error) }
                throw error
            }
            if count == 0 {
                if mayBeStale && !receivedAnything {
                    throw StaleConnection(
                        error: TransportError(
                            .connectionClosed, detail: "the server closed the kept-alive connection before answering"))
                }
                // EOF: either a close-delimited body ends here, or the response is truncated (throws).
                if sentAhead {
                    refusePipelining(
                        on: lease, after: TransportError(.connectionClosed, detail: "the server closed the connection"))
                }
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
                    if disposition != .discard {
                        bodyBytes += Int64(range.count)
                        try onBody(UnsafeRawBufferPointer(rebasing: window[range]))
                        // Never onto a connection the head said will close: the server could reset it with
                        // the request unread and lose the rest of this body (nginx at `keepalive_requests`).
                        if !sentAhead, disposition == .stream, parser.headAllowsReuse,
                            let owed = parser.remainingFixedBodyBytes, owed > 0, let next = try sendAhead(owed)
                        {
                            try next.withUnsafeBytes { bytes in
                                try connection.write(bytes, deadline: .after(idleTimeout))
                            }
                            sentAhead = true
                        }
                    } else {
                        discarded += Int64(range.count)
                        if discarded > 64 << 10 {
                            // Not worth draining: close instead of reading an unwanted body.
                            reusable = false
                            break receive
                        }
                    }
                case .end:
                    // Bytes after the end of a response mean a confused server (reads stop at the end of a
                    // response when a request was sent ahead, so the next one's bytes are never here).
                    reusable = parser.isReusable && offset + step.consumed == count
                    break receive
                }
                offset += step.consumed
            }
            // A Content-Length body on a plain connection can skip user space from here on; one received in
            // place skips the receive buffer.
            var outOfBand: Int64?
            if case .spliceToFile(let fileDescriptor, let start) = disposition, !connection.isTLS, !spliceUnsupported,
                let remaining = parser.remainingFixedBodyBytes, remaining > 0
            {
                outOfBand = try splice(
                    remaining, from: connection, into: fileDescriptor, at: start + bodyBytes, buffer: buffer,
                    idleTimeout: idleTimeout, onBody: onBody, onSpliced: onSpliced, unsupported: &spliceUnsupported)
            } else if case .receiveInPlace(let body) = disposition, let remaining = parser.remainingFixedBodyBytes,
                remaining > 0
            {
                outOfBand = try receiveInPlace(
                    remaining, from: connection, into: body.receiver, idleTimeout: idleTimeout)
            }
            if let moved = outOfBand {
                if moved > 0 {
                    try parser.consumeBodyOutOfBand(moved)
                    bodyBytes += moved
                }
                if parser.remainingFixedBodyBytes == 0 {
                    // The message is complete; the parser confirms it without more input.
                    let step = try parser.next(UnsafeRawBufferPointer(start: nil, count: 0))
                    if step.event == .end {
                        reusable = parser.isReusable
                        break receive
                    }
                }
            }
        }

        guard let finalHead = responseHead else {
            throw WireError(.missingResponseHead, "the response ended without a status line and header section")
        }
        if reusable { connection.endOfMessage() }
        let summary = ExchangeSummary(
            head: finalHead, bodyBytes: bodyBytes, connectionReused: mayBeStale,
            connectionID: lease.connectionID, connectionKeptAlive: reusable, wasSentAhead: head == nil)
        // The connection owes the response to the request sent ahead: it stays with the caller.
        if sentAhead && reusable { return Exchanged(summary: summary, pipelined: lease) }
        pool.release(lease, reusable: reusable)
        return Exchanged(summary: summary, pipelined: nil)
    }
}

extension WireError.Code {
    /// The connection ended before a response head was received.
    public static let missingResponseHead = WireError.Code("missingResponseHead")
}
