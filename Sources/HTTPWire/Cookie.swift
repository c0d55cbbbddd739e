extension WireError.Code {
    /// A `Set-Cookie` value has no `name=value` pair or an empty name (RFC 6265 §5.2: ignored).
    public static let malformedSetCookie = WireError.Code("malformedSetCookie")
    /// A line of a Netscape cookie file does not have 6 or 7 tab-separated fields, or a field is invalid.
    public static let malformedCookieFile = WireError.Code("malformedCookieFile")
}

/// A stored cookie (RFC 6265 §5.3's storage model, without the last-access time).
public struct Cookie: Sendable, Hashable {
    /// The name.
    public var name: String
    /// The value.
    public var value: String
    /// The domain, lower-cased, without a leading dot.
    public var domain: String
    /// Sent only to exactly ``domain`` (no `Domain` attribute was given), not to its subdomains.
    public var hostOnly: Bool
    /// The path the cookie applies to (and below).
    public var path: String
    /// Sent only over `https`.
    public var secure: Bool
    /// Not for scripts (kept so files round-trip; HTTP clients send it like any other).
    public var httpOnly: Bool
    /// Expiry in seconds since 1970, or `nil` for a session cookie.
    public var expires: Int64?
    /// When it was first stored (seconds since 1970), for ordering.
    public var creation: Int64

    /// Creates a cookie; `domain` is lower-cased and loses a leading dot.
    public init(
        name: String, value: String, domain: String, hostOnly: Bool, path: String = "/", secure: Bool = false,
        httpOnly: Bool = false, expires: Int64? = nil, creation: Int64 = 0
    ) {
        self.name = name
        self.value = value
        self.domain = Self.withoutLeadingDot(domain.lowercased())
        self.hostOnly = hostOnly
        self.path = path
        self.secure = secure
        self.httpOnly = httpOnly
        self.expires = expires
        self.creation = creation
    }

    /// The domain without one leading dot. By Unicode scalar, not by `Character`: a dot followed by a combining
    /// mark is one grapheme cluster, so `hasPrefix(".")` would miss it and `removeFirst()` would drop the mark
    /// too (found by fuzz-cookies: such a domain did not survive a cookie file round trip).
    static func withoutLeadingDot(_ domain: String) -> String {
        domain.utf8.first == UInt8(ascii: ".") ? String(domain.unicodeScalars.dropFirst()) : domain
    }

    /// Whether the cookie has expired at `now`.
    public func isExpired(at now: Int64) -> Bool { expires.map { $0 <= now } ?? false }

    /// Whether the cookie goes with a request for `url` (RFC 6265 §5.4 step 1): the domain matches
    /// (exactly when host-only), the path matches, `secure` only over `https`, and not expired.
    public func matches(_ url: HTTPURL, now: Int64) -> Bool {
        let host = url.host.lowercased()
        let domainOK = hostOnly ? host == domain : CookieRules.domainMatches(host: host, domain: domain)
        return domainOK && CookieRules.pathMatches(requestPath: url.path, cookiePath: path)
            && (!secure || url.scheme == .https) && !isExpired(at: now)
    }
}

/// A parsed `Set-Cookie` value (RFC 6265 §5.2), before the storage rules apply.
public struct SetCookie: Sendable, Hashable {
    /// The name.
    public var name: String
    /// The value.
    public var value: String
    /// The `Domain` attribute, lower-cased without a leading dot, if present and non-empty.
    public var domain: String?
    /// The `Path` attribute if it starts with `/`.
    public var path: String?
    /// `Max-Age` in seconds, if present and valid (may be zero or negative: delete).
    public var maxAge: Int64?
    /// `Expires` in seconds since 1970, if present and a valid cookie date.
    public var expires: Int64?
    /// `Secure` was present.
    public var secure: Bool
    /// `HttpOnly` was present.
    public var httpOnly: Bool

    /// Longest name plus value accepted (RFC 6265 §6.1 asks for at least 4096).
    public static let maximumNameValueBytes = 4096

    /// Parses one `Set-Cookie` field value.
    /// - Throws: ``WireError/Code/malformedSetCookie`` when there is no `=`, the name is empty, the
    ///   pair is longer than ``maximumNameValueBytes``, or a control byte appears.
    public init(parsing text: String) throws(WireError) {
        if text.utf8.contains(where: GrammarCharacters.isForbiddenControl) {
            throw WireError(.malformedSetCookie, "control byte in Set-Cookie")
        }
        let parts = text.split(separator: ";", omittingEmptySubsequences: false)
        let pair = parts[0]
        guard let equals = pair.firstIndex(of: "=") else {
            throw WireError(.malformedSetCookie, "Set-Cookie without name=value")
        }
        name = pair[..<equals].trimmingHTTPWhitespace()
        value = pair[pair.index(after: equals)...].trimmingHTTPWhitespace()
        guard !name.isEmpty else { throw WireError(.malformedSetCookie, "Set-Cookie with an empty name") }
        // A tab inside the pair could not be written to a Netscape cookie file.
        guard !name.utf8.contains(0x09), !value.utf8.contains(0x09) else {
            throw WireError(.malformedSetCookie, "tab inside a Set-Cookie name or value")
        }
        guard name.utf8.count + value.utf8.count <= Self.maximumNameValueBytes else {
            throw WireError(.malformedSetCookie, "Set-Cookie name and value longer than \(Self.maximumNameValueBytes) bytes")
        }
        secure = false
        httpOnly = false
        for attribute in parts.dropFirst() {
            let key: String
            let attributeValue: String
            if let equals = attribute.firstIndex(of: "=") {
                key = attribute[..<equals].trimmingHTTPWhitespace().lowercased()
                attributeValue = attribute[attribute.index(after: equals)...].trimmingHTTPWhitespace()
            } else {
                key = attribute.trimmingHTTPWhitespace().lowercased()
                attributeValue = ""
            }
            switch key {
            case "expires":
                if let date = CookieRules.parseDate(attributeValue) { expires = date }
            case "max-age":
                let digits = attributeValue.hasPrefix("-") ? attributeValue.dropFirst() : attributeValue[...]
                if !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
                    let magnitude = digits.count > 12 ? Int64(1e12) : (Int64(digits) ?? 0)
                    maxAge = attributeValue.hasPrefix("-") ? -magnitude : magnitude
                }
            case "domain":
                let domain = Cookie.withoutLeadingDot(attributeValue.lowercased())
                self.domain = domain.isEmpty ? nil : domain
            case "path":
                path = attributeValue.hasPrefix("/") && !attributeValue.utf8.contains(0x09) ? attributeValue : nil
            case "secure":
                secure = true
            case "httponly":
                httpOnly = true
            default:
                continue  // SameSite and unknown attributes are ignored.
            }
        }
    }
}

/// The matching rules of RFC 6265 §5.1.
public enum CookieRules {
    /// §5.1.3: `host` equals `domain`, or ends with `.domain` and is not an IP address.
    public static func domainMatches(host: String, domain: String) -> Bool {
        if host == domain { return true }
        guard host.hasSuffix("." + domain), !isIPAddress(host) else { return false }
        return true
    }

    /// §5.1.4: the cookie path equals the request path, or is a prefix ending in `/`, or is a prefix
    /// followed by `/` in the request path.
    public static func pathMatches(requestPath: String, cookiePath: String) -> Bool {
        if requestPath == cookiePath { return true }
        guard requestPath.hasPrefix(cookiePath) else { return false }
        if cookiePath.hasSuffix("/") { return true }
        return requestPath.dropFirst(cookiePath.count).hasPrefix("/")
    }

    /// §5.1.4: the directory of the request path (`/a/b/c` → `/a/b`; `/a` or none → `/`).
    public static func defaultPath(_ requestPath: String) -> String {
        guard requestPath.hasPrefix("/"), let slash = requestPath.lastIndex(of: "/"),
            slash != requestPath.startIndex
        else { return "/" }
        return String(requestPath[..<slash])
    }

    static func isIPAddress(_ host: String) -> Bool {
        host.contains(":") || (!host.isEmpty && host.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E })
    }

    /// §5.1.1's cookie-date algorithm; `nil` when the text is not a cookie date.
    public static func parseDate(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        func isDelimiter(_ byte: UInt8) -> Bool {
            byte == 0x09 || (0x20...0x2F).contains(byte) || (0x3B...0x40).contains(byte)
                || (0x5B...0x60).contains(byte) || (0x7B...0x7E).contains(byte)
        }
        var tokens: [[UInt8]] = []
        var current: [UInt8] = []
        for byte in bytes {
            if isDelimiter(byte) {
                if !current.isEmpty { tokens.append(current) }
                current = []
            } else {
                current.append(byte)
            }
        }
        if !current.isEmpty { tokens.append(current) }
        func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }
        /// Leading 1...max digits, optionally followed by non-digits.
        func leadingNumber(_ token: [UInt8], min: Int, max: Int) -> Int64? {
            let digits = token.prefix { isDigit($0) }
            guard (min...max).contains(digits.count) else { return nil }
            return Int64(String(decoding: digits, as: UTF8.self))
        }
        var time: (Int64, Int64, Int64)?
        var day: Int64?
        var month: Int64?
        var year: Int64?
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        for token in tokens {
            if time == nil {
                let fields = token.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
                if fields.count == 3, let hour = leadingNumber(Array(fields[0]), min: 1, max: 2),
                    fields[0].allSatisfy(isDigit), fields[1].allSatisfy(isDigit),
                    let minute = leadingNumber(Array(fields[1]), min: 1, max: 2),
                    let second = leadingNumber(Array(fields[2]), min: 1, max: 2)
                {
                    time = (hour, minute, second)
                    continue
                }
            }
            if day == nil, let value = leadingNumber(token, min: 1, max: 2) {
                day = value
                continue
            }
            if month == nil, token.count >= 3 {
                let prefix = String(decoding: token.prefix(3).map { $0 | 0x20 }, as: UTF8.self)
                if let index = months.firstIndex(of: prefix) {
                    month = Int64(index + 1)
                    continue
                }
            }
            if year == nil, let value = leadingNumber(token, min: 2, max: 4) {
                year = value
                continue
            }
        }
        guard var year, let day, let month, let (hour, minute, second) = time else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, hour <= 23, minute <= 59, second <= 59 else { return nil }
        let days = HTTPDate.days(fromCivilYear: year, month: month, day: day)
        return days * 86_400 + hour * 3600 + minute * 60 + second
    }
}

/// A set of cookies with RFC 6265's storage and retrieval rules (§5.3, §5.4). A pure value: the time
/// is always passed in.
///
/// Without a public-suffix list, a `Domain` attribute naming a single label (`com`, `localhost`) is
/// accepted only when it equals the request host, and then makes a host-only cookie.
public struct CookieStore: Sendable, Hashable {
    /// The cookies, oldest first.
    public private(set) var cookies: [Cookie]
    /// The most cookies kept; the oldest are dropped beyond it.
    public static let maximumCount = 3000

    /// Creates a store holding `cookies`.
    public init(cookies: [Cookie] = []) {
        self.cookies = []
        for cookie in cookies { insert(cookie) }
    }

    /// Applies one `Set-Cookie` value received in a response to `url` (§5.3). Invalid values and
    /// cookies the rules refuse are ignored, as the RFC says.
    /// - Returns: Whether the store changed.
    @discardableResult
    public mutating func receive(_ setCookie: String, from url: HTTPURL, now: Int64) -> Bool {
        guard let parsed = try? SetCookie(parsing: setCookie) else { return false }
        let host = url.host.lowercased()
        var domain = host
        var hostOnly = true
        if let attribute = parsed.domain {
            if attribute == host {
                hostOnly = !attribute.contains(".") ? true : false
            } else {
                // The request host must be inside the domain, and the domain must have at least two labels.
                guard CookieRules.domainMatches(host: host, domain: attribute), attribute.contains(".") else {
                    return false
                }
                hostOnly = false
            }
            domain = attribute
        }
        // draft-ietf-httpbis-rfc6265bis §5.7 step 8: a Secure cookie is only accepted over https.
        if parsed.secure && url.scheme != .https { return false }
        var expires: Int64?
        if let maxAge = parsed.maxAge {
            expires = maxAge <= 0 ? Int64.min : now &+ maxAge
        } else if let date = parsed.expires {
            expires = date
        }
        let cookie = Cookie(
            name: parsed.name, value: parsed.value, domain: domain, hostOnly: hostOnly,
            path: parsed.path ?? CookieRules.defaultPath(url.path), secure: parsed.secure,
            httpOnly: parsed.httpOnly, expires: expires, creation: now)
        let before = cookies
        if cookie.isExpired(at: now) {
            cookies.removeAll { $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path }
        } else {
            insert(cookie)
        }
        return cookies != before
    }

    /// Adds `cookie`, replacing one with the same name, domain and path (keeping its creation time).
    public mutating func insert(_ cookie: Cookie) {
        var cookie = cookie
        if let index = cookies.firstIndex(where: {
            $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path
        }) {
            cookie.creation = cookies[index].creation
            cookies.remove(at: index)
        }
        cookies.append(cookie)
        if cookies.count > Self.maximumCount { cookies.removeFirst(cookies.count - Self.maximumCount) }
    }

    /// Drops expired cookies.
    public mutating func removeExpired(now: Int64) {
        cookies.removeAll { $0.isExpired(at: now) }
    }

    /// The `Cookie` field value for a request to `url` (§5.4), or `nil` when no cookie matches. Longer
    /// paths first, then older cookies first.
    public func cookieHeader(for url: HTTPURL, now: Int64) -> String? {
        let matching = cookies.enumerated().filter { $0.element.matches(url, now: now) }
            .sorted { lhs, rhs in
                if lhs.element.path.count != rhs.element.path.count {
                    return lhs.element.path.count > rhs.element.path.count
                }
                if lhs.element.creation != rhs.element.creation { return lhs.element.creation < rhs.element.creation }
                return lhs.offset < rhs.offset
            }
        guard !matching.isEmpty else { return nil }
        return matching.map { "\($0.element.name)=\($0.element.value)" }.joined(separator: "; ")
    }
}

/// The Netscape cookie file format that curl, wget and browsers' exporters use: one cookie per line,
/// seven tab-separated fields `domain includeSubdomains path secure expires name value`, `#` comments,
/// and the `#HttpOnly_` domain prefix.
public enum NetscapeCookieFile {
    /// The first line written.
    public static let header = "# Netscape HTTP Cookie File"

    /// Parses a cookie file. An expiry of 0 means a session cookie. Blank lines and comments are skipped.
    /// - Throws: ``WireError/Code/malformedCookieFile`` naming the line (from 1) and what is wrong.
    public static func parse(_ text: String) throws(WireError) -> [Cookie] {
        var cookies: [Cookie] = []
        var lineNumber = 0
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = Substring(rawLine)
            if line.hasSuffix("\r") { line = line.dropLast() }
            var httpOnly = false
            if line.hasPrefix("#HttpOnly_") {
                httpOnly = true
                line = line.dropFirst("#HttpOnly_".count)
            } else if line.hasPrefix("#") || line.allSatisfy({ $0 == " " || $0 == "\t" }) {
                continue
            }
            var fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            if fields.count == 6 { fields.append("") }
            func bad(_ detail: String) -> WireError {
                WireError(.malformedCookieFile, "line \(lineNumber): \(detail)")
            }
            guard fields.count == 7 else {
                throw bad("expected 7 tab-separated fields, found \(fields.count)")
            }
            guard !fields.contains(where: { $0.utf8.contains { $0 < 0x20 || $0 == 0x7F } }) else {
                throw bad("control byte in a field")
            }
            guard let includeSubdomains = flag(fields[1]), let secure = flag(fields[3]) else {
                throw bad("the 2nd and 4th fields must be TRUE or FALSE")
            }
            guard let expires = Int64(fields[4]) else { throw bad("the expiry \"\(fields[4])\" is not a number") }
            let domain = fields[0]
            guard !domain.isEmpty, domain != "." else { throw bad("empty domain") }
            guard !fields[5].isEmpty else { throw bad("empty cookie name") }
            guard fields[2].hasPrefix("/") else { throw bad("the path must start with /") }
            cookies.append(
                Cookie(
                    name: fields[5], value: fields[6], domain: domain,
                    hostOnly: !includeSubdomains && domain.utf8.first != UInt8(ascii: "."), path: fields[2], secure: secure,
                    httpOnly: httpOnly, expires: expires == 0 ? nil : expires, creation: Int64(lineNumber)))
        }
        return cookies
    }

    /// Writes cookies in the format (session cookies with expiry 0).
    public static func serialize(_ cookies: [Cookie]) -> String {
        var text = header + "\n# Written by DownloadKit. Edit at your own risk.\n\n"
        for cookie in cookies {
            let domain = (cookie.hostOnly ? "" : ".") + cookie.domain
            let fields = [
                (cookie.httpOnly ? "#HttpOnly_" : "") + domain, cookie.hostOnly ? "FALSE" : "TRUE", cookie.path,
                cookie.secure ? "TRUE" : "FALSE", String(cookie.expires.map { max(1, $0) } ?? 0), cookie.name,
                cookie.value,
            ]
            text += fields.joined(separator: "\t") + "\n"
        }
        return text
    }

    private static func flag(_ text: String) -> Bool? {
        switch text.uppercased() {
        case "TRUE": return true
        case "FALSE": return false
        default: return nil
        }
    }
}
