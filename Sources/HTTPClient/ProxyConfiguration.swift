import Glibc
import HTTPWire

/// Which proxy, if any, each request goes through.
///
/// Three ways to set it: ``environment`` (the default: read `http_proxy`, `https_proxy`, `all_proxy`,
/// `no_proxy` as curl does when the client is created), ``direct`` (no proxy), or explicit proxies with
/// ``init(httpProxy:httpsProxy:noProxy:)`` / ``init(all:noProxy:)``.
///
/// What each proxy kind sees: an HTTP proxy gets `http` requests in absolute form, headers
/// included (that is how HTTP proxies work: an `Authorization` for an `http` origin is visible to
/// it), and for `https` only the `CONNECT host:port` line; the TLS session inside the tunnel is
/// verified against the origin's name. SOCKS5 proxies see only the target address (or name with
/// `socks5h`). Proxy credentials (the proxy URL's userinfo) go only to the proxy: in `CONNECT` and
/// absolute-form requests as `Proxy-Authorization: Basic`, to SOCKS5 proxies per RFC 1929 — never
/// inside a tunnel.
public struct ProxyConfiguration: Sendable, Hashable {
    /// The proxy for `http` URLs, or `nil` for direct connections.
    public var httpProxy: ProxyURL?
    /// The proxy for `https` URLs, or `nil` for direct connections.
    public var httpsProxy: ProxyURL?
    /// Hosts reached directly even when a proxy is set.
    public var noProxy: NoProxyList
    /// When `true`, the proxies come from the environment, read when an ``DKHTTPClient`` is created
    /// (see ``init(environment:)``); the other properties are then ignored.
    public var readsEnvironment: Bool

    /// Explicit proxies per scheme.
    public init(httpProxy: ProxyURL? = nil, httpsProxy: ProxyURL? = nil, noProxy: NoProxyList = NoProxyList()) {
        self.httpProxy = httpProxy
        self.httpsProxy = httpsProxy
        self.noProxy = noProxy
        self.readsEnvironment = false
    }

    /// One proxy for both schemes (like curl's `--proxy`).
    public init(all proxy: ProxyURL?, noProxy: NoProxyList = NoProxyList()) {
        self.init(httpProxy: proxy, httpsProxy: proxy, noProxy: noProxy)
    }

    /// No proxy at all, whatever the environment says.
    public static let direct = ProxyConfiguration()

    /// Read the environment when the client is created (the default).
    public static let environment: ProxyConfiguration = {
        var configuration = ProxyConfiguration()
        configuration.readsEnvironment = true
        return configuration
    }()

    /// Reads proxy variables as curl does:
    /// - `http` URLs: `http_proxy` (lower case only: an upper-case `HTTP_PROXY` can be set by a
    ///   request header in CGI programs, "httpoxy"), else `all_proxy`/`ALL_PROXY`;
    /// - `https` URLs: `https_proxy`, else `HTTPS_PROXY`, else `all_proxy`/`ALL_PROXY`;
    /// - `no_proxy`, else `NO_PROXY`. Empty values count as unset.
    /// - Parameter environment: The variables (``processEnvironment()`` for this process's).
    /// - Throws: ``TransportError`` with code ``TransportError/Code/invalidProxy`` naming the
    ///   variable whose value is not a usable proxy URL.
    public init(environment: [String: String]) throws(TransportError) {
        func value(_ names: String...) -> (String, String)? {
            for name in names { if let value = environment[name], !value.isEmpty { return (name, value) } }
            return nil
        }
        func parse(_ entry: (String, String)?) throws(TransportError) -> ProxyURL? {
            guard let (name, text) = entry else { return nil }
            do {
                return try ProxyURL(text)
            } catch {
                throw TransportError(.invalidProxy, detail: "\(name) is not a usable proxy URL: \(error.detail)")
            }
        }
        self.init(
            httpProxy: try parse(value("http_proxy", "all_proxy", "ALL_PROXY")),
            httpsProxy: try parse(value("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")),
            noProxy: NoProxyList(value("no_proxy", "NO_PROXY")?.1 ?? ""))
    }

    /// This process's environment variables (`environ`).
    public static func processEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            cursor += 1
        }
        return result
    }

    /// The proxy for `url`, or `nil` when it goes direct (no proxy for its scheme, or `noProxy`
    /// matches its host).
    public func proxy(for url: HTTPURL) -> ProxyURL? {
        let proxy = url.scheme == .https ? httpsProxy : httpProxy
        guard let proxy, !noProxy.matches(host: url.host) else { return nil }
        return proxy
    }

    /// The configuration with environment reading done.
    func resolved() throws(TransportError) -> ProxyConfiguration {
        readsEnvironment ? try ProxyConfiguration(environment: Self.processEnvironment()) : self
    }
}

extension TransportError.Code {
    /// A proxy URL (explicit or from the environment) cannot be used.
    public static let invalidProxy = TransportError.Code("invalidProxy")
    /// The proxy asks for credentials (HTTP 407), or refused the ones sent (407 again, or a SOCKS5
    /// username/password failure, or no acceptable SOCKS5 method).
    public static let proxyAuthenticationRequired = TransportError.Code("proxyAuthenticationRequired")
    /// The proxy asks for authentication only in schemes DownloadKit does not answer to proxies
    /// (Negotiate, NTLM, a Digest variant it cannot compute: Basic and Digest are answered); `detail`
    /// names the schemes offered.
    public static let proxyAuthenticationUnsupported = TransportError.Code("proxyAuthenticationUnsupported")
    /// The proxy would not open the tunnel: `CONNECT` answered with a non-2xx status, or a SOCKS5
    /// reply other than "succeeded" (its RFC 1928 name in `detail`).
    public static let proxyConnectFailed = TransportError.Code("proxyConnectFailed")
    /// The proxy broke its protocol: a malformed answer to `CONNECT`, bytes after a `2xx` before the
    /// client spoke, or a malformed SOCKS5 reply.
    public static let proxyProtocolViolation = TransportError.Code("proxyProtocolViolation")
}
