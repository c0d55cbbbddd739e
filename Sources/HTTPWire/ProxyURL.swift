extension WireError.Code {
    /// The proxy URL's scheme is not `http`, `socks5` or `socks5h`.
    public static let unsupportedProxyScheme = WireError.Code("unsupportedProxyScheme")
}

/// A proxy's address and credentials, parsed from text such as `http://user:pw@proxy:3128`,
/// `socks5h://10.0.0.1:1080` or a bare `proxy.example:8080` (which means `http`, as curl reads it).
///
/// Pure value: no resolving. The userinfo is percent-decoded; it is sent only to the proxy
/// (`Proxy-Authorization: Basic` for HTTP proxies, RFC 1929 for SOCKS5), never to an origin.
public struct ProxyURL: Sendable, Hashable, CustomStringConvertible {
    /// How the client talks to the proxy.
    public enum Kind: String, Sendable, Hashable {
        /// An HTTP/1.1 proxy: absolute-form requests for `http` targets, `CONNECT` tunnels for `https`.
        case http
        /// SOCKS5 (RFC 1928) with the target's name resolved locally; the proxy sees an IP address.
        case socks5
        /// SOCKS5 with the target's name sent to the proxy, which resolves it (remote DNS).
        case socks5h

        /// 1080 for SOCKS, 1080 for HTTP as curl does (a proxy URL without a port names one).
        public var defaultPort: Int { 1080 }
    }

    /// The protocol spoken to the proxy.
    public var kind: Kind
    /// The proxy's host: a lower-cased name, IPv4 text, or an IPv6 literal without brackets.
    public var host: String
    /// The proxy's port (the kind's default when the URL named none).
    public var port: Int
    /// The user name for the proxy, percent-decoded.
    public var user: String?
    /// The password for the proxy, percent-decoded.
    public var password: String?

    /// Creates a proxy address.
    public init(kind: Kind, host: String, port: Int, user: String? = nil, password: String? = nil) {
        self.kind = kind
        self.host = host.lowercased()
        self.port = port
        self.user = user
        self.password = password
    }

    /// Parses a proxy URL. `http://`, `socks5://` and `socks5h://` are accepted (case-insensitive);
    /// text without `://` is an `http` proxy. A path other than `/` is ignored, as curl ignores it.
    /// - Throws: ``WireError`` with code ``WireError/Code/unsupportedProxyScheme`` (for example
    ///   `https://` or `socks4://` proxies), or the URL grammar's codes for a bad host or port.
    public init(_ text: String) throws(WireError) {
        var kind = Kind.http
        var rest = Substring(text)
        if let range = text.firstRange(of: "://") {
            let scheme = text[text.startIndex..<range.lowerBound].lowercased()
            guard let parsed = Kind(rawValue: scheme) else {
                throw WireError(
                    .unsupportedProxyScheme, offset: 0,
                    "proxy scheme \"\(scheme)\" is not supported (use http://, socks5:// or socks5h://)")
            }
            kind = parsed
            rest = text[range.upperBound...]
        }
        // The authority grammar is the same as an http URL's; borrow its strict parser.
        let url = try HTTPURL("http://" + rest)
        self.init(
            kind: kind, host: url.host, port: url.port ?? kind.defaultPort, user: url.user, password: url.password)
    }

    /// Whether the host is an IPv6 literal.
    public var isIPv6Literal: Bool { host.utf8.contains(UInt8(ascii: ":")) }

    /// `host:port` with brackets around an IPv6 literal.
    public var authority: String { isIPv6Literal ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// `"Basic " + base64(user ":" password)` for `Proxy-Authorization` when the URL has a user.
    public var basicAuthorization: String? {
        guard let user else { return nil }
        return "Basic " + Base64.encode(user + ":" + (password ?? ""))
    }

    /// The proxy as a URL with the password masked (`socks5h://user:***@host:1080`), for logs.
    public var description: String {
        var text = kind.rawValue + "://"
        if let user {
            text += PercentEncoding.encodeUserinfoComponent(user)
            if password != nil { text += ":***" }
            text += "@"
        }
        return text + authority
    }
}

extension HTTPURL {
    /// The absolute-form request target (RFC 9112 §3.2.2) sent to an HTTP proxy:
    /// `http://host[:port]/path?query`, without userinfo or fragment.
    public var absoluteFormTarget: String {
        scheme.rawValue + "://" + hostHeaderValue + requestTarget
    }
}
