import HTTPWire

/// Settings for an ``DKHTTPClient``.
public struct DKHTTPClientConfiguration: Sendable, Hashable {
    /// The longest time to wait for a TCP connection (and TLS handshake) to complete, and separately
    /// the longest time to wait for a free connection slot when the origin is at its bound. Default 30 s.
    public var connectTimeout: Duration
    /// The longest time to wait without receiving a single byte while a response is expected. Default 30 s.
    public var idleTimeout: Duration
    /// The longest time from sending a request to receiving its complete response head, however the
    /// bytes trickle in (a server that sends one header byte every few seconds never trips
    /// ``idleTimeout``). Default 60 s.
    public var headTimeout: Duration = .seconds(60)
    /// TLS settings for `https` URLs. Verification is on by default; turning it off is explicit.
    public var tls: DKTLSConfiguration
    /// The most connections open at once to one origin (scheme, host, port), busy and idle together. Default 8.
    public var maxConnectionsPerOrigin: Int
    /// How long a kept-alive connection may sit idle in the pool before it is closed. Default 60 s.
    public var idleConnectionLifetime: Duration
    /// Size in bytes of each connection's receive buffer, allocated once and reused. Default 1 MiB.
    ///
    /// Large reads mean fewer system calls and fewer body callbacks per GiB; TLS needs at least one
    /// full record (16 KiB) of free space, so values below 64 KiB are raised to 64 KiB.
    public var receiveBufferSize: Int
    /// Limits applied to response heads and chunked framing.
    public var parserLimits: ParserLimits
    /// The `User-Agent` sent unless a request carries its own.
    public var userAgent: String
    /// Answers `401` challenges with credentials bound to their origin (see ``Authenticator``). Default `nil`.
    public var authenticator: Authenticator? = nil
    /// Sends and stores cookies for every exchange (see ``CookieJar``). Default `nil`.
    public var cookieJar: CookieJar? = nil
    /// Proxies (HTTP with CONNECT, SOCKS5) and the hosts that bypass them. Default
    /// ``ProxyConfiguration/environment``: `http_proxy`, `https_proxy`, `all_proxy`, `no_proxy` as curl
    /// reads them, when the client is created. Connections are pooled per origin and proxy.
    public var proxy: ProxyConfiguration = .environment
    /// Which IP versions to connect over (`-4`/`-6`). Default `.any`: Happy Eyeballs (RFC 8305)
    /// races IPv6 and IPv4 and the pool remembers the family that won for each host.
    public var addressFamily: AddressFamily = .any
    /// Host names mapped to IP literals used instead of DNS (like curl's `--resolve`), for tests and
    /// pinned deployments; keys are lower-case host names. Default empty.
    public var addressOverrides: [String: [String]] = [:]
    /// Whether ``DKHTTPClient/execute(series:cancellation:buffer:next:onHead:onBody:onEnd:)`` may send
    /// the next request of a series while the current response is still arriving (HTTP/1.1
    /// pipelining, RFC 9112 §9.3.2), so the next response follows without a round trip in between.
    /// Never through a plain-HTTP forward proxy. A route where a request sent ahead went unanswered is
    /// not pipelined again by this client. Default `true`; `false` sends each request after the
    /// previous response has ended.
    public var pipelining: Bool = true

    /// The receive buffer size for `connections` transfers (or segments) running at once: together the
    /// buffers stay within 64 MiB — 1 MiB each up to 64 connections, less beyond, and the 64 KiB floor from
    /// 1,024 — so memory stays flat as concurrency grows (issue #23). `downloadkit get` and `queue run`
    /// apply it to `--max-concurrent` × `--connections`; a program running many downloads on one client
    /// can do the same.
    public static func receiveBufferSize(forConcurrentConnections connections: Int) -> Int {
        let share = (64 << 20) / max(1, connections)
        return min(1 << 20, max(64 << 10, share))
    }

    /// Creates a configuration with the documented defaults.
    public init(
        connectTimeout: Duration = .seconds(30),
        idleTimeout: Duration = .seconds(30),
        tls: DKTLSConfiguration = .makeClientConfiguration(),
        maxConnectionsPerOrigin: Int = 8,
        idleConnectionLifetime: Duration = .seconds(60),
        receiveBufferSize: Int = 1 << 20,
        parserLimits: ParserLimits = .default,
        userAgent: String = "DownloadKit/0.1"
    ) {
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.tls = tls
        self.maxConnectionsPerOrigin = max(1, maxConnectionsPerOrigin)
        self.idleConnectionLifetime = idleConnectionLifetime
        self.receiveBufferSize = max(64 << 10, receiveBufferSize)
        self.parserLimits = parserLimits
        self.userAgent = userAgent
    }
}
