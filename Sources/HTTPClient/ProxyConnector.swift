import Glibc
import HTTPWire

/// Opens the connection a request needs: direct, through an HTTP proxy (plain for `http`
/// targets, a `CONNECT` tunnel for `https`), or through SOCKS5 — then TLS to the origin when the
/// target is `https`, verified against the origin's name whatever the path.
enum ProxyConnector {
    /// Connects to `url`'s origin, through `proxy` when given.
    /// - Throws: `TransportError`: the connect codes, TLS codes, and for proxies
    ///   `.proxyAuthenticationRequired`, `.proxyConnectFailed`, `.proxyProtocolViolation`,
    ///   `.connectionClosed` (the proxy hung up during its handshake; transient).
    ///
    /// A `CONNECT` carries the credentials `proxyAuthenticator` holds for the proxy (Digest, once the
    /// proxy asked for it), else the proxy URL's Basic ones. A `407` offering Digest that the
    /// authenticator can answer is answered once, on a new connection (a proxy may close after a 407).
    static func open(
        url: HTTPURL, proxy: ProxyURL?, tls: TLSContext?, options: ConnectOptions, userAgent: String,
        parserLimits: ParserLimits, deadline: Deadline, proxyAuthenticator: Authenticator
    ) throws(TransportError) -> Connection {
        guard let proxy else {
            return try Connection.connect(
                host: url.host, port: url.effectivePort, tls: tls, serverName: url.host, deadline: deadline,
                options: options)
        }
        // The family/override options are about the proxy's address here: that is what we dial.
        var connection = try Connection.openTCP(host: proxy.host, port: proxy.port, deadline: deadline, options: options)
        connection.proxy = proxy
        switch proxy.kind {
        case .http:
            guard tls != nil else { break }
            var challengeAnswered = false
            while true {
                let target = authority(of: url)
                let authorization =
                    proxyAuthenticator.authorization(method: "CONNECT", uri: target, origin: proxy.authenticationOrigin)
                    ?? proxy.basicAuthorization
                let established = try openConnectTunnel(
                    connection, to: url, proxy: proxy, authorization: authorization, userAgent: userAgent,
                    limits: parserLimits, deadline: deadline,
                    answers: { head in
                        !challengeAnswered
                            && proxyAuthenticator.acceptProxyChallenge(from: head, proxy: proxy.authenticationOrigin)
                    })
                if established { break }
                challengeAnswered = true
                connection.close()
                connection = try Connection.openTCP(host: proxy.host, port: proxy.port, deadline: deadline, options: options)
                connection.proxy = proxy
            }
        case .socks5, .socks5h:
            try socksHandshake(connection, to: url, proxy: proxy, options: options, deadline: deadline)
        }
        if let tls {
            do {
                try connection.startTLS(context: tls, serverName: url.host, port: url.effectivePort, deadline: deadline)
            } catch {
                throw annotated(error, proxy: proxy)
            }
        }
        return connection
    }

    /// `host:port` for CONNECT and logs: brackets around IPv6, zone dropped, port always given.
    static func authority(of url: HTTPURL) -> String {
        if url.isIPv6Literal {
            let address = url.host.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)[0]
            return "[\(address)]:\(url.effectivePort)"
        }
        return "\(url.host):\(url.effectivePort)"
    }

    /// Adds "through proxy …" to an error's detail once.
    static func annotated(_ error: TransportError, proxy: ProxyURL) -> TransportError {
        var error = error
        error.detail = annotated(error.detail, proxy: proxy)
        return error
    }

    /// `error` (a response cut short or malformed on a proxied connection) with the proxy named.
    static func annotated(_ error: WireError, proxy: ProxyURL) -> WireError {
        var error = error
        error.detail = annotated(error.detail, proxy: proxy)
        return error
    }

    /// `detail` ending in " (through proxy …)" unless it names the proxy already.
    private static func annotated(_ detail: String, proxy: ProxyURL) -> String {
        detail.contains("\(proxy)") ? detail : detail + " (through proxy \(proxy))"
    }

    // MARK: - HTTP CONNECT

    /// Sends `CONNECT` with `authorization` and reads the answer.
    /// - Returns: `true` when the tunnel is open; `false` when the proxy's refusal is a challenge that
    ///   `answers` took up (send `CONNECT` again, with the new credentials).
    private static func openConnectTunnel(
        _ connection: Connection, to url: HTTPURL, proxy: ProxyURL, authorization: String?, userAgent: String,
        limits: ParserLimits, deadline: Deadline, answers: (ResponseHead) -> Bool
    ) throws(TransportError) -> Bool {
        let target = authority(of: url)
        let request: [UInt8]
        do throws(WireError) {
            request = try HTTPConnectTunnel.request(
                authority: target, proxyAuthorization: authorization, userAgent: userAgent)
        } catch {
            throw TransportError(.invalidProxy, detail: "cannot build CONNECT \(target): \(error.detail)")
        }
        try connection.write(bytes: request, deadline: deadline)
        var parser = HTTPConnectTunnel.makeParser(limits: limits)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 << 10, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try connection.read(into: buffer, deadline: deadline)
            if count == 0 {
                throw TransportError(
                    .connectionClosed, operation: "CONNECT",
                    detail: "the proxy \(proxy) closed the connection before answering CONNECT \(target)")
            }
            let outcome: HTTPConnectTunnel.Outcome
            do throws(WireError) {
                outcome = try HTTPConnectTunnel.read(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), parser: &parser)
            } catch {
                throw TransportError(
                    .proxyProtocolViolation, operation: "CONNECT",
                    detail: "the proxy \(proxy) broke HTTP answering CONNECT \(target): \(error.detail)")
            }
            switch outcome {
            case .needMore:
                continue
            case .established:
                return true
            case .refused(let head):
                if answers(head) { return false }
                throw refusal(head, proxy: proxy, target: "CONNECT \(target)", isConnect: true)
            }
        }
    }

    /// The typed error for a proxy's non-2xx answer (to CONNECT, or 407 to an absolute-form request).
    static func refusal(_ head: ResponseHead, proxy: ProxyURL, target: String, isConnect: Bool) -> TransportError {
        // A CONNECT answer is always the proxy's own, so its 401 (tinyproxy's answer to wrong
        // credentials) means the same as 407.
        if head.status == 407 || (head.status == 401 && isConnect) {
            let challenge = head.headers.first(name: "Proxy-Authenticate") ?? head.headers.first(name: "WWW-Authenticate")
            let realm = challenge.flatMap(HTTPConnectTunnel.realm(ofChallenge:))
            let realmText = realm.map { " (realm \"\($0)\")" } ?? ""
            // Basic and Digest are answered to a proxy: one offering neither (Negotiate, NTLM) is told
            // apart from one that refused the credentials.
            let values = head.headers["Proxy-Authenticate"].isEmpty ? head.headers["WWW-Authenticate"] : head.headers["Proxy-Authenticate"]
            let challenges = (try? AuthChallenge.parse(values)) ?? []
            let answerable = challenges.contains {
                $0.isScheme("Basic") || ($0.isScheme("Digest") && (try? DigestChallenge($0)) != nil)
            }
            if !challenges.isEmpty, !answerable {
                let offered = challenges.map(\.scheme).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
                return TransportError(
                    .proxyAuthenticationUnsupported, operation: isConnect ? "CONNECT" : "GET",
                    detail: """
                        the proxy \(proxy) asks for \(offered.joined(separator: " or ")) authentication\(realmText) for \(target), \
                        which DownloadKit does not support for proxies (it answers Basic and Digest)
                        """)
            }
            let why =
                proxy.user == nil
                ? "no credentials were given: put them in the proxy URL (http://user:password@host:port)"
                : "it refused the credentials for user \"\(proxy.user ?? "")\""
            return TransportError(
                .proxyAuthenticationRequired, operation: "CONNECT",
                detail: "the proxy \(proxy) requires authentication\(realmText) for \(target): \(why)")
        }
        let detail = "the proxy \(proxy) answered \(target) with \(head.status) \(head.reason)"
        if [502, 503, 504].contains(head.status) {
            return TransportError.transient(.proxyConnectFailed, operation: "CONNECT", detail: detail)
        }
        return TransportError(.proxyConnectFailed, operation: "CONNECT", detail: detail)
    }

    // MARK: - SOCKS5

    private static func socksHandshake(
        _ connection: Connection, to url: HTTPURL, proxy: ProxyURL, options: ConnectOptions, deadline: Deadline
    ) throws(TransportError) {
        var received: [UInt8] = []
        func violation(_ error: WireError) -> TransportError {
            TransportError(
                .proxyProtocolViolation, operation: "SOCKS5", detail: "the SOCKS5 proxy \(proxy) broke RFC 1928: \(error.detail)")
        }
        func send(_ bytes: [UInt8]) throws(TransportError) {
            try connection.write(bytes: bytes, deadline: deadline)
        }
        /// Reads until `parse` returns a value; leaves no byte unaccounted for.
        func receive<T>(_ what: String, _ parse: ([UInt8]) throws(WireError) -> (T, Int)?) throws(TransportError) -> T {
            var chunk = [UInt8](repeating: 0, count: 512)
            while true {
                let parsed: (T, Int)?
                do throws(WireError) {
                    parsed = try parse(received)
                } catch {
                    throw violation(error)
                }
                if let (value, consumed) = parsed {
                    guard consumed == received.count else {
                        throw TransportError(
                            .proxyProtocolViolation, operation: "SOCKS5",
                            detail: "the SOCKS5 proxy \(proxy) sent \(received.count - consumed) bytes after its \(what) before the client spoke")
                    }
                    received = []
                    return value
                }
                let count = try connection.read(into: &chunk, deadline: deadline)
                if count == 0 {
                    throw TransportError(
                        .connectionClosed, operation: "SOCKS5",
                        detail: "the SOCKS5 proxy \(proxy) closed the connection during its \(what)")
                }
                received += chunk[0..<count]
            }
        }

        let hasCredentials = proxy.user != nil
        try send(SOCKS5.greeting(offeringUsernamePassword: hasCredentials))
        let method: UInt8 = try receive("method selection") { bytes throws(WireError) in
            try SOCKS5.parseMethodSelection(bytes).map { ($0, 2) }
        }
        switch method {
        case SOCKS5.methodNoAuthentication:
            break
        case SOCKS5.methodUsernamePassword where hasCredentials:
            let request: [UInt8]
            do throws(WireError) {
                request = try SOCKS5.usernamePasswordRequest(user: proxy.user ?? "", password: proxy.password ?? "")
            } catch {
                throw TransportError(.invalidProxy, detail: "SOCKS5 credentials for \(proxy): \(error.detail)")
            }
            try send(request)
            let accepted: Bool = try receive("authentication reply") { bytes throws(WireError) in
                try SOCKS5.parseAuthenticationReply(bytes).map { ($0, 2) }
            }
            guard accepted else {
                throw TransportError(
                    .proxyAuthenticationRequired, operation: "SOCKS5",
                    detail: "the SOCKS5 proxy \(proxy) refused the user name/password for \"\(proxy.user ?? "")\"")
            }
        case SOCKS5.methodNoneAcceptable:
            throw TransportError(
                .proxyAuthenticationRequired, operation: "SOCKS5",
                detail: "the SOCKS5 proxy \(proxy) accepts none of the offered methods (no authentication\(hasCredentials ? ", username/password" : ""))"
                    + (hasCredentials ? "" : ": put credentials in the proxy URL (socks5://user:password@host:port)"))
        default:
            throw TransportError(
                .proxyProtocolViolation, operation: "SOCKS5",
                detail: "the SOCKS5 proxy \(proxy) chose method \(method), which was not offered")
        }

        let address = try socksAddress(for: url, remoteDNS: proxy.kind == .socks5h, options: options, deadline: deadline)
        let request: [UInt8]
        do throws(WireError) {
            request = try SOCKS5.connectRequest(to: address, port: url.effectivePort)
        } catch {
            throw TransportError(.invalidProxy, detail: "cannot ask \(proxy) for \(authority(of: url)): \(error.detail)")
        }
        try send(request)
        let reply: SOCKS5.Reply = try receive("reply to CONNECT") { bytes throws(WireError) in
            try SOCKS5.parseReply(bytes).map { ($0.reply, $0.consumed) }
        }
        guard reply.code.isSuccess else {
            let detail = "the SOCKS5 proxy \(proxy) could not connect to \(authority(of: url)): \(reply.code)"
            if reply.code.isTransient {
                throw TransportError.transient(.proxyConnectFailed, operation: "SOCKS5", detail: detail)
            }
            throw TransportError(.proxyConnectFailed, operation: "SOCKS5", detail: detail)
        }
    }

    /// The target as SOCKS5 wants it: IP literals as bytes; names sent as names (`socks5h`) or
    /// resolved here first (`socks5`, honouring the address family).
    private static func socksAddress(
        for url: HTTPURL, remoteDNS: Bool, options: ConnectOptions, deadline: Deadline
    ) throws(TransportError) -> SOCKS5.Address {
        func address(_ bytes: [UInt8]) -> SOCKS5.Address { bytes.count == 4 ? .ipv4(bytes) : .ipv6(bytes) }
        if let literal = IPAddressText.parse(url.host) { return address(literal) }
        if remoteDNS { return .domain(url.host) }
        let resolved = options.addressFamily.allowed(
            try Resolver.resolve(host: url.host, port: url.effectivePort, deadline: deadline))
        guard let first = resolved.first, let bytes = IPAddressText.parse(first.ipAddress) else {
            throw TransportError(
                .resolveFailed, operation: "getaddrinfo", detail: "\(url.host) has no usable address for the SOCKS5 proxy")
        }
        return address(bytes)
    }
}

extension Connection {
    /// Writes all of `bytes` (handshake messages; not the body path).
    func write(bytes: [UInt8], deadline: Deadline) throws(TransportError) {
        var failure: TransportError?
        bytes.withUnsafeBytes { raw in
            do throws(TransportError) { try write(raw, deadline: deadline) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Reads into `array` from its start (handshake messages; not the body path); 0 means EOF.
    func read(into array: inout [UInt8], deadline: Deadline) throws(TransportError) -> Int {
        var result: Result<Int, TransportError> = .success(0)
        array.withUnsafeMutableBytes { raw in
            do throws(TransportError) { result = .success(try read(into: raw, deadline: deadline)) } catch {
                result = .failure(error)
            }
        }
        return try result.get()
    }
}

extension ProxyURL {
    /// The origin an ``Authenticator`` binds this proxy's credentials to (`http`, host, port).
    var authenticationOrigin: Origin { Origin(scheme: .http, host: host, port: port) }
}
