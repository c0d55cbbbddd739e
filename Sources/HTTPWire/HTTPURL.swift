extension WireError.Code {
    /// The text is not an absolute `http`/`https` URL or URI reference (RFC 3986 §3, §4.1), or it
    /// contains a control byte, DEL or a space, which could split a request line.
    public static let malformedURL = WireError.Code("malformedURL")
    /// The URL's scheme is not `http` or `https` (for example a redirect to `ftp:`, `file:` or
    /// `javascript:`). Callers must refuse such redirects.
    public static let unsupportedScheme = WireError.Code("unsupportedScheme")
    /// The URL's host is empty, not a valid reg-name or IP literal (RFC 3986 §3.2.2), or an
    /// internationalised name that would need IDNA, which this module does not implement.
    public static let invalidURLHost = WireError.Code("invalidURLHost")
    /// The URL's port is not a decimal number in 1...65535 (RFC 3986 §3.2.3).
    public static let invalidPort = WireError.Code("invalidPort")
}

/// Where requests go: scheme, host and effective port (RFC 6454 §4), the key for connection pooling.
public struct Origin: Sendable, Hashable, CustomStringConvertible {
    /// The scheme.
    public var scheme: HTTPURL.Scheme
    /// The host, lower-cased; an IPv6 literal is stored without brackets.
    public var host: String
    /// The port, always explicit (the scheme's default when the URL named none).
    public var port: Int

    /// Creates an origin; `host` is lower-cased.
    public init(scheme: HTTPURL.Scheme, host: String, port: Int) {
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
    }

    /// `"https://host:port"`, with an IPv6 literal in brackets and its zone as `%25zone`.
    public var description: String {
        "\(scheme.rawValue)://\(HTTPURL.hostForURL(host, isIPv6Literal: host.utf8.contains(0x3A))):\(port)"
    }
}

/// An absolute `http` or `https` URL (RFC 3986, RFC 9110 §4.2).
///
/// Parsing is strict about what could reach the wire: control bytes, DEL and spaces are refused
/// anywhere, the host must be a valid reg-name or IP literal, and the port must be decimal in
/// 1...65535. Path, query and fragment keep their percent-encoding exactly as given, but dot-segments
/// are removed from the path (RFC 3986 §5.2.4, as curl does), so `/a/../b` becomes `/b`.
///
/// Raw non-ASCII bytes are accepted in the path, query and fragment (IRIs, RFC 3987) and kept in
/// ``path`` and ``query``; ``requestTarget`` percent-encodes them as UTF-8, so the request line
/// never carries raw non-ASCII bytes.
public struct HTTPURL: Sendable, Hashable, CustomStringConvertible {
    /// The schemes DownloadKit speaks.
    public enum Scheme: String, Sendable, Hashable {
        case http, https

        /// 80 for `http`, 443 for `https` (RFC 9110 §4.2.1, §4.2.2).
        public var defaultPort: Int {
            switch self {
            case .http: 80
            case .https: 443
            }
        }
    }

    /// The scheme.
    public var scheme: Scheme
    /// The host: a lower-cased reg-name (percent-escapes decoded), IPv4 dotted text, or an IPv6
    /// literal without brackets whose zone, if any, follows a plain `%` (`fe80::1%eth0`, the form
    /// `getaddrinfo` takes).
    public var host: String
    /// Whether ``host`` is an IPv6 literal (written in brackets in the URL).
    public var isIPv6Literal: Bool
    /// The explicit port, if the URL gave one (an empty port, `http://h:/`, counts as none).
    public var port: Int?
    /// The user name from the userinfo, percent-decoded.
    public var user: String?
    /// The password from the userinfo, percent-decoded.
    public var password: String?
    /// The path, raw, percent-encoding preserved exactly as given; `"/"` when the URL had none.
    public var path: String
    /// The query, raw, without the `?`.
    public var query: String?
    /// The fragment, raw, without the `#`. Never sent on the wire.
    public var fragment: String?

    /// Parses an absolute `http` or `https` URL.
    /// - Parameter string: The URL. The scheme is case-insensitive.
    /// - Throws: ``WireError`` with code ``WireError/Code/unsupportedScheme`` for any scheme other
    ///   than `http`/`https`, ``WireError/Code/malformedURL``, ``WireError/Code/invalidURLHost`` or
    ///   ``WireError/Code/invalidPort``.
    public init(_ string: String) throws(WireError) {
        let bytes = Array(string.utf8)
        try Self.rejectUnsafeBytes(bytes)
        let reference = URIReference(bytes)
        guard let schemeBytes = reference.scheme else {
            throw WireError(.malformedURL, offset: 0, "no scheme: not an absolute URL")
        }
        let scheme = try Self.scheme(schemeBytes)
        try self.init(scheme: scheme, reference: reference)
    }

    /// Builds a URL from a split reference that has an authority.
    private init(scheme: Scheme, reference: URIReference) throws(WireError) {
        guard let authority = reference.authority else {
            throw WireError(.malformedURL, offset: reference.pathStart, "no authority: an http(s) URL needs '//host'")
        }
        self.scheme = scheme
        let parsed = try Self.parseAuthority(authority)
        user = parsed.user
        password = parsed.password
        host = parsed.host
        isIPv6Literal = parsed.isIPv6Literal
        port = parsed.port
        path = Self.string(Self.removeDotSegments(reference.path))
        if path.isEmpty { path = "/" }
        query = reference.query.map(Self.string)
        fragment = reference.fragment.map(Self.string)
    }

    /// `port ?? scheme.defaultPort`.
    public var effectivePort: Int { port ?? scheme.defaultPort }

    /// The origin-form request target (RFC 9112 §3.2.1): path plus `?query`, with raw non-ASCII
    /// bytes percent-encoded as UTF-8 and everything else exactly as given.
    public var requestTarget: String {
        var target = PercentEncoding.encodeNonASCII(path)
        if let query { target += "?" + PercentEncoding.encodeNonASCII(query) }
        return target
    }

    /// The `Host` field value (RFC 9110 §7.2): the host, bracketed if IPv6 (without a zone, which is
    /// meaningful only to this machine, RFC 6874 §4), plus `:port` only when the port is explicit
    /// and not the scheme's default.
    public var hostHeaderValue: String {
        var value: String
        if isIPv6Literal {
            let address = host.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)[0]
            value = "[\(address)]"
        } else {
            value = host
        }
        if let port, port != scheme.defaultPort { value += ":\(port)" }
        return value
    }

    /// The origin: scheme, host and effective port.
    public var origin: Origin { Origin(scheme: scheme, host: host, port: effectivePort) }

    /// Whether the host is an IP address literal (IPv6, or IPv4 dotted-decimal). TLS sends no SNI for
    /// these (RFC 6066 §3).
    public var isIPAddressLiteral: Bool { isIPv6Literal || Self.isIPv4Address(host) }

    /// The full URL: userinfo (re-encoded) and fragment included. Carries the password: for the
    /// wire, the task store and equality only, never for a log line, an error text or a listing.
    public var absoluteString: String { render(nil) }

    /// The URL as logs and error texts may show it (``Redaction/secrets``): the password replaced by
    /// `***`, every query value by `***` (names kept: `?sig=***&id=***`), the fragment by `***`.
    /// String interpolation (`"\(url)"`) uses it, so an error text that names a URL is safe by default.
    public var description: String { render(.secrets) }

    /// The URL as a listing may show it (``Redaction/password``): only the password replaced by `***`,
    /// query and fragment kept, because a front end (aria2's `getUris`, `session list`, `queue list`)
    /// needs to tell signed URLs apart. Never for logs or error texts: use ``description``.
    public var listingDescription: String { render(.password) }

    /// How much of a URL a text may show. The one redaction rule of DownloadKit: every log line,
    /// error text, event and listing that names a URL goes through ``HTTPURL/description``,
    /// ``HTTPURL/listingDescription`` or ``HTTPURL/redacting(_:_:)``.
    public enum Redaction: Sendable {
        /// Logs and error texts: password, query values and fragment masked.
        case secrets
        /// Listings: the password masked, the rest as given.
        case password
    }

    /// `text` as a URL with its secrets masked, for texts that hold a URL as a `String`, including one
    /// that does not parse (an invalid port, a control byte): the password after the first `:` of the
    /// userinfo (everything up to the authority's last `@`) becomes `***`, and with ``Redaction/secrets``
    /// every query value and the fragment too. Never fails and never returns the password.
    /// - Parameters:
    ///   - text: A URL, valid or not.
    ///   - redaction: ``Redaction/secrets`` (default) for logs and errors, ``Redaction/password`` for listings.
    public static func redacting(_ text: String, _ redaction: Redaction = .secrets) -> String {
        if let url = try? HTTPURL(text) { return url.render(redaction) }
        let bytes = Array(text.utf8)
        let parts = URIReference(bytes)
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        if let authority = parts.authority {
            output.append(contentsOf: bytes[0..<authority.startIndex])
            if let at = authority.lastIndex(of: 0x40) {
                let userinfo = authority[authority.startIndex..<at]
                if let colon = userinfo.firstIndex(of: 0x3A) {
                    output.append(contentsOf: bytes[authority.startIndex...colon])
                    output.append(contentsOf: Array("***".utf8))
                    output.append(contentsOf: bytes[at..<authority.endIndex])
                } else {
                    output.append(contentsOf: authority)
                }
            } else {
                output.append(contentsOf: authority)
            }
            index = authority.endIndex
        }
        output.append(contentsOf: bytes[index..<parts.path.endIndex])
        var rendered = string(output)
        if let query = parts.query {
            rendered += "?" + (redaction == .secrets ? maskingQueryValues(string(query)) : string(query))
        }
        if let fragment = parts.fragment {
            rendered += "#" + (redaction == .secrets ? "***" : string(fragment))
        }
        return rendered
    }

    /// `name=***` for every `&`-separated field with a non-empty value, `***` for a non-empty field
    /// without `=`: the names stay readable, the values (signatures, tokens) do not.
    static func maskingQueryValues(_ query: String) -> String {
        query.split(separator: "&", omittingEmptySubsequences: false).map { field -> String in
            if let equals = field.firstIndex(of: "=") {
                return field.index(after: equals) == field.endIndex ? String(field) : String(field[...equals]) + "***"
            }
            return field.isEmpty ? "" : "***"
        }.joined(separator: "&")
    }

    /// `"Basic " + base64(user ":" password)` (RFC 7617 §2, UTF-8) when the URL has userinfo.
    public var basicAuthorization: String? {
        guard let user else { return nil }
        return "Basic " + Base64.encode(user + ":" + (password ?? ""))
    }

    /// The same URL without user and password.
    public var withoutUserinfo: HTTPURL {
        var copy = self
        copy.user = nil
        copy.password = nil
        return copy
    }

    /// The last non-empty path segment, percent-decoded (invalid escapes kept, invalid UTF-8 replaced
    /// by U+FFFD). Not sanitised: it may contain `/`, `..` or control characters.
    public var lastPathSegment: String? {
        guard let segment = path.split(separator: "/").last else { return nil }
        return String(decoding: PercentEncoding.decodeLeniently(String(segment)), as: UTF8.self)
    }

    /// The extension of ``lastPathSegment`` without the dot; `nil` when there is no dot, or the only
    /// dot starts or ends the name (`.bashrc`, `file.`). A decoded `/` (from `%2F`) starts a new name.
    public var pathExtension: String? {
        guard let decoded = lastPathSegment else { return nil }
        let segment = decoded.split(separator: "/", omittingEmptySubsequences: false).last ?? decoded[...]
        guard let dot = segment.lastIndex(of: "."),
            dot != segment.startIndex, segment.index(after: dot) != segment.endIndex
        else { return nil }
        return String(segment[segment.index(after: dot)...])
    }

    /// Resolves a URI reference against this URL (RFC 3986 §5.2), as for a `Location` field
    /// (RFC 9110 §10.2.2).
    ///
    /// Handles relative (`g`, `../g`), absolute-path (`/g`), network-path (`//host/g`) and absolute
    /// references, and removes dot-segments (§5.2.4). Two tolerances: a reference whose scheme equals
    /// this URL's and that has no authority (`http:g`) is treated as relative, the backward-compatible
    /// reading §5.2.2 permits; and interior spaces, which some servers send unencoded, are
    /// percent-encoded as `%20` (as curl does). Control bytes are still refused. The fragment comes
    /// from the reference only; RFC 9110 §10.2.2's inheritance of the original fragment is the
    /// caller's choice.
    /// - Parameter reference: The reference, for example a `Location` value.
    /// - Returns: The target URL.
    /// - Throws: ``WireError`` with code ``WireError/Code/unsupportedScheme`` when the reference is
    ///   absolute with a scheme other than `http`/`https` (the caller must refuse the redirect), or
    ///   ``WireError/Code/malformedURL``, ``WireError/Code/invalidURLHost``, ``WireError/Code/invalidPort``.
    public func resolving(_ reference: String) throws(WireError) -> HTTPURL {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(reference.utf8.count)
        for byte in reference.utf8 {
            if byte == 0x20 { bytes.append(contentsOf: [0x25, 0x32, 0x30]) } else { bytes.append(byte) }
        }
        try Self.rejectUnsafeBytes(bytes)
        let parts = URIReference(bytes)
        if let schemeBytes = parts.scheme {
            let scheme = try Self.scheme(schemeBytes)
            if !(scheme == self.scheme && parts.authority == nil) {
                return try HTTPURL(scheme: scheme, reference: parts)
            }
        }
        if parts.authority != nil {
            return try HTTPURL(scheme: scheme, reference: parts)
        }
        var target = self
        if parts.path.isEmpty {
            if let query = parts.query { target.query = Self.string(query) }
        } else {
            let merged: [UInt8]
            if parts.path.first == 0x2F {
                merged = Array(parts.path)
            } else {
                // §5.2.3: everything up to and including the base path's last "/", then the reference.
                var basePath = Array(path.utf8)
                if let slash = basePath.lastIndex(of: 0x2F) { basePath.removeSubrange((slash + 1)...) }
                merged = basePath + parts.path
            }
            target.path = Self.string(Self.removeDotSegments(merged[...]))
            if target.path.isEmpty { target.path = "/" }
            target.query = parts.query.map(Self.string)
        }
        target.fragment = parts.fragment.map(Self.string)
        return target
    }

    // MARK: - Rendering

    /// The URL as text; `redaction` nil renders it whole (with the password).
    private func render(_ redaction: Redaction?) -> String {
        var text = scheme.rawValue + "://"
        if let user {
            text += PercentEncoding.encodeUserinfoComponent(user)
            if let password {
                text += ":" + (redaction == nil ? PercentEncoding.encodeUserinfoComponent(password) : "***")
            }
            text += "@"
        }
        text += Self.hostForURL(host, isIPv6Literal: isIPv6Literal)
        if let port { text += ":\(port)" }
        text += path
        if let query { text += "?" + (redaction == .secrets ? Self.maskingQueryValues(query) : query) }
        if let fragment { text += "#" + (redaction == .secrets ? "***" : fragment) }
        return text
    }

    /// The host as written in a URL: IPv6 in brackets with a zone written `%25zone` (RFC 6874 §2).
    static func hostForURL(_ host: String, isIPv6Literal: Bool) -> String {
        guard isIPv6Literal else { return host }
        let parts = host.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)
        return parts.count == 2 ? "[\(parts[0])%25\(parts[1])]" : "[\(host)]"
    }

    // MARK: - Parsing helpers

    private static func string(_ bytes: some Collection<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }

    /// Refuses bytes that could split or smuggle a request: C0 controls (CR, LF, NUL, …), SP and DEL.
    private static func rejectUnsafeBytes(_ bytes: [UInt8]) throws(WireError) {
        if let index = bytes.firstIndex(where: { $0 <= 0x20 || $0 == 0x7F }) {
            throw WireError(.malformedURL, offset: index, "control byte, space or DEL (\(bytes[index])) in URL")
        }
    }

    /// Validates `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )` (RFC 3986 §3.1) and maps it.
    private static func scheme(_ bytes: ArraySlice<UInt8>) throws(WireError) -> Scheme {
        guard let first = bytes.first, GrammarCharacters.isAlpha(first),
            bytes.allSatisfy({
                GrammarCharacters.isAlpha($0) || GrammarCharacters.isDigit($0) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E
            })
        else {
            throw WireError(.malformedURL, offset: 0, "invalid scheme")
        }
        let name = string(bytes.map(asciiLower))
        guard let scheme = Scheme(rawValue: name) else {
            throw WireError(.unsupportedScheme, offset: 0, "scheme '\(name)' is not http or https")
        }
        return scheme
    }

    private struct Authority {
        var user: String?
        var password: String?
        var host: String
        var isIPv6Literal: Bool
        var port: Int?
    }

    /// authority = [ userinfo "@" ] host [ ":" port ] (RFC 3986 §3.2). Slices keep the indices of
    /// the whole input, so error offsets are slice indices.
    private static func parseAuthority(_ bytes: ArraySlice<UInt8>) throws(WireError) -> Authority {
        var hostPort = bytes
        var user: String?
        var password: String?
        // The last "@" ends the userinfo: an unencoded "@" in a password is a common mistake, and
        // a host can never contain one.
        if let at = bytes.lastIndex(of: 0x40) {
            let userinfo = bytes[bytes.startIndex..<at]
            hostPort = bytes[(at + 1)...]
            if !userinfo.isEmpty {
                let colon = userinfo.firstIndex(of: 0x3A)
                let userPart = userinfo[userinfo.startIndex..<(colon ?? userinfo.endIndex)]
                user = try decodeComponent(userPart, offset: userinfo.startIndex)
                if let colon {
                    password = try decodeComponent(userinfo[(colon + 1)...], offset: colon + 1)
                }
            }
        }
        let host: String
        let isIPv6: Bool
        var portBytes: ArraySlice<UInt8>?
        if hostPort.first == 0x5B {
            guard let close = hostPort.firstIndex(of: 0x5D) else {
                throw WireError(.invalidURLHost, offset: hostPort.startIndex, "unterminated '[' in host")
            }
            host = try parseIPv6(hostPort[(hostPort.startIndex + 1)..<close], offset: hostPort.startIndex + 1)
            isIPv6 = true
            let rest = hostPort[(close + 1)...]
            if let first = rest.first {
                guard first == 0x3A else {
                    throw WireError(.invalidURLHost, offset: close + 1, "unexpected byte after IPv6 literal")
                }
                portBytes = rest.dropFirst()
            }
        } else {
            let colon = hostPort.firstIndex(of: 0x3A)
            host = try parseRegName(hostPort[hostPort.startIndex..<(colon ?? hostPort.endIndex)],
                offset: hostPort.startIndex)
            isIPv6 = false
            if let colon { portBytes = hostPort[(colon + 1)...] }
        }
        var port: Int?
        if let portBytes, !portBytes.isEmpty {
            port = try parsePort(portBytes, offset: portBytes.startIndex)
        }
        return Authority(user: user, password: password, host: host, isIPv6Literal: isIPv6, port: port)
    }

    private static func decodeComponent(_ bytes: ArraySlice<UInt8>, offset: Int) throws(WireError) -> String {
        do {
            return string(try PercentEncoding.decode(string(bytes)))
        } catch {
            throw WireError(.malformedURL, offset: offset + (error.offset ?? 0), "userinfo: \(error.detail)")
        }
    }

    /// reg-name = *( unreserved / pct-encoded / sub-delims ) (RFC 3986 §3.2.2), decoded and
    /// lower-cased. The decoded bytes must still be unreserved or sub-delims, so the host can never
    /// carry a delimiter, space or control byte into DNS, SNI or the `Host` field.
    private static func parseRegName(_ bytes: ArraySlice<UInt8>, offset: Int) throws(WireError) -> String {
        guard !bytes.isEmpty else { throw WireError(.invalidURLHost, offset: offset, "empty host") }
        var decoded: [UInt8] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let start = offset + index - bytes.startIndex
            var byte = bytes[index]
            if byte == 0x25 {
                guard index + 2 < bytes.endIndex, let high = PercentEncoding.hexValue(bytes[index + 1]),
                    let low = PercentEncoding.hexValue(bytes[index + 2])
                else {
                    throw WireError(.invalidURLHost, offset: start, "bad percent-escape in host")
                }
                byte = high << 4 | low
                index += 3
            } else {
                index += 1
            }
            guard GrammarCharacters.isUnreserved(byte) || GrammarCharacters.isSubDelimiter(byte) else {
                let why =
                    byte >= 0x80 ? "non-ASCII host (IDNA is not supported)" : "byte \(byte) is not allowed in a host"
                throw WireError(.invalidURLHost, offset: start, why)
            }
            decoded.append(asciiLower(byte))
        }
        return string(decoded)
    }

    /// IP-literal = "[" ( IPv6address / IPv6addrz ) "]" (RFC 3986 §3.2.2, RFC 6874 §2), validated
    /// loosely: hex digits, colons and dots (at least two colons), then an optional `%25` zone of
    /// unreserved or percent-encoded bytes. Returns `address%zone`, lower-cased address.
    private static func parseIPv6(_ bytes: ArraySlice<UInt8>, offset: Int) throws(WireError) -> String {
        let percent = bytes.firstIndex(of: 0x25)
        let address = bytes[bytes.startIndex..<(percent ?? bytes.endIndex)]
        guard address.count >= 2, address.count <= 45,
            address.allSatisfy({ PercentEncoding.hexValue($0) != nil || $0 == 0x3A || $0 == 0x2E }),
            address.filter({ $0 == 0x3A }).count >= 2
        else {
            throw WireError(.invalidURLHost, offset: offset, "not an IPv6 address literal")
        }
        var text = string(address.map(asciiLower))
        if let percent {
            let zone = bytes[(percent + 1)...]
            guard zone.starts(with: [0x32, 0x35]), zone.count > 2,
                let decoded = try? PercentEncoding.decode(string(zone.dropFirst(2))),
                decoded.allSatisfy(GrammarCharacters.isUnreserved)
            else {
                throw WireError(.invalidURLHost, offset: offset + percent - bytes.startIndex, "invalid IPv6 zone")
            }
            text += "%" + string(decoded)
        }
        return text
    }

    /// port = *DIGIT (RFC 3986 §3.2.3), limited to 1...65535.
    private static func parsePort(_ bytes: ArraySlice<UInt8>, offset: Int) throws(WireError) -> Int {
        var value = 0
        for byte in bytes {
            guard GrammarCharacters.isDigit(byte) else {
                throw WireError(.invalidPort, offset: offset, "port is not a decimal number")
            }
            value = value * 10 + Int(byte - 0x30)
            guard value <= 65535 else { throw WireError(.invalidPort, offset: offset, "port exceeds 65535") }
        }
        guard value >= 1 else { throw WireError(.invalidPort, offset: offset, "port 0") }
        return value
    }

    /// Four dot-separated decimal octets, each 0...255.
    private static func isIPv4Address(_ host: String) -> Bool {
        let parts = host.utf8.split(separator: 0x2E, omittingEmptySubsequences: false)
        return parts.count == 4
            && parts.allSatisfy { part in
                !part.isEmpty && part.count <= 3 && part.allSatisfy(GrammarCharacters.isDigit)
                    && part.reduce(0) { $0 * 10 + Int($1 - 0x30) } <= 255
            }
    }

    /// remove_dot_segments (RFC 3986 §5.2.4), literally: "." and ".." segments only, never their
    /// percent-encoded forms.
    static func removeDotSegments(_ path: ArraySlice<UInt8>) -> [UInt8] {
        var input = Array(path)
        var index = 0
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        let dot: UInt8 = 0x2E, slash: UInt8 = 0x2F

        func has(_ literal: [UInt8]) -> Bool {
            input.count - index >= literal.count && input[index..<(index + literal.count)].elementsEqual(literal)
        }
        func isExactly(_ literal: [UInt8]) -> Bool { input.count - index == literal.count && has(literal) }
        func removeLastOutputSegment() {
            if let last = output.lastIndex(of: slash) { output.removeSubrange(last...) } else { output.removeAll() }
        }

        while index < input.count {
            if has([dot, dot, slash]) {  // A
                index += 3
            } else if has([dot, slash]) {
                index += 2
            } else if has([slash, dot, slash]) {  // B: "/./" -> "/"
                index += 2
            } else if isExactly([slash, dot]) {  // B: "/." -> "/"
                index += 1
                input[index] = slash
            } else if has([slash, dot, dot, slash]) {  // C: "/../" -> "/", drop last output segment
                index += 3
                removeLastOutputSegment()
            } else if isExactly([slash, dot, dot]) {  // C: "/.." -> "/"
                index += 2
                input[index] = slash
                removeLastOutputSegment()
            } else if isExactly([dot]) || isExactly([dot, dot]) {  // D
                index = input.count
            } else {  // E: move the first segment, with its leading "/", to the output
                var end = index + (input[index] == slash ? 1 : 0)
                while end < input.count, input[end] != slash { end += 1 }
                output.append(contentsOf: input[index..<end])
                index = end
            }
        }
        return output
    }
}

/// A URI reference split into its five parts by the regular expression of RFC 3986 Appendix B:
/// `^(([^:/?#]+):)?(//([^/?#]*))?([^?#]*)(\?([^#]*))?(#(.*))?`.
private struct URIReference {
    var scheme: ArraySlice<UInt8>?
    var authority: ArraySlice<UInt8>?
    var path: ArraySlice<UInt8>
    var pathStart = 0
    var query: ArraySlice<UInt8>?
    var fragment: ArraySlice<UInt8>?

    init(_ bytes: [UInt8]) {
        var index = 0
        if let stop = bytes.firstIndex(where: { $0 == 0x3A || $0 == 0x2F || $0 == 0x3F || $0 == 0x23 }),
            bytes[stop] == 0x3A, stop > 0
        {
            scheme = bytes[0..<stop]
            index = stop + 1
        }
        if bytes[index...].starts(with: [0x2F, 0x2F]) {
            let start = index + 2
            let end = bytes[start...].firstIndex { $0 == 0x2F || $0 == 0x3F || $0 == 0x23 } ?? bytes.endIndex
            authority = bytes[start..<end]
            index = end
        }
        pathStart = index
        let pathEnd = bytes[index...].firstIndex(where: { $0 == 0x3F || $0 == 0x23 }) ?? bytes.endIndex
        path = bytes[index..<pathEnd]
        index = pathEnd
        if index < bytes.endIndex, bytes[index] == 0x3F {
            let end = bytes[(index + 1)...].firstIndex(of: 0x23) ?? bytes.endIndex
            query = bytes[(index + 1)..<end]
            index = end
        }
        if index < bytes.endIndex, bytes[index] == 0x23 {
            fragment = bytes[(index + 1)...]
        }
    }
}
