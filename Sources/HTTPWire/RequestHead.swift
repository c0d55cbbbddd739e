/// The request methods DownloadKit sends. Neither carries a request body.
public enum DKHTTPMethod: String, Sendable, Hashable {
    /// Fetch a representation (RFC 9110 §9.3.1).
    case GET
    /// Fetch only the head a GET would produce (RFC 9110 §9.3.2); the response never has a body.
    case HEAD
}

extension WireError {
    /// Whether the error is about a request the caller built (its target, `Host` or header fields),
    /// not about the server's bytes: such an error must be reported as the caller's input.
    public var isCallerInput: Bool {
        [.invalidRequestTarget, .invalidHost, .invalidHeaderName, .invalidHeaderValue, .forbiddenRequestHeader]
            .contains(code)
    }
}

extension WireError.Code {
    /// The request target is not an origin-form target (RFC 9112 §3.2.1) that is safe to send.
    public static let invalidRequestTarget = WireError.Code("invalidRequestTarget")
    /// The Host value is empty or contains bytes that could split or redirect the request.
    public static let invalidHost = WireError.Code("invalidHost")
    /// A header field name is not an RFC 9110 §5.1 token.
    public static let invalidHeaderName = WireError.Code("invalidHeaderName")
    /// A header field value contains CR, LF, NUL or another control byte (RFC 9110 §5.5).
    public static let invalidHeaderValue = WireError.Code("invalidHeaderValue")
    /// A caller header would describe a request body, which GET and HEAD requests never carry.
    public static let forbiddenRequestHeader = WireError.Code("forbiddenRequestHeader")
}

/// The head of an HTTP/1.1 request: request line, `Host` and the caller's header fields.
///
/// Everything is validated when encoded, so no caller-supplied string can inject a line break,
/// a second request or a different target into the bytes on the wire.
public struct RequestHead: Sendable, Hashable {
    /// The request method.
    public var method: DKHTTPMethod
    /// The request target, sent exactly as given: origin-form `"/path?query"`, or absolute-form
    /// `"http://host/path"` (RFC 9112 §3.2.2) for requests through an HTTP proxy.
    public var target: String
    /// The `Host` field value, for example `"example.com"` or `"[::1]:8080"`.
    public var host: String
    /// Additional header fields, sent in order. Any field named `Host` is dropped when encoding:
    /// `Host` is always the first field and appears once (RFC 9112 §3.2).
    public var headers: DKHTTPHeaders

    /// Creates a request head.
    /// - Parameters:
    ///   - method: The request method.
    ///   - target: The origin-form target (starts with `/`), or an absolute-form `http(s)://` target.
    ///   - host: The `Host` value (host and optional port).
    ///   - headers: Extra header fields; a `Host` field among them is ignored.
    public init(method: DKHTTPMethod, target: String, host: String, headers: DKHTTPHeaders = DKHTTPHeaders()) {
        self.method = method
        self.target = target
        self.host = host
        self.headers = headers
    }

    /// Appends the encoded head, `"GET /x HTTP/1.1\r\nHost: h\r\n<fields>\r\n"`, to `buffer`.
    ///
    /// Validation happens before anything is appended, so on error `buffer` is unchanged.
    /// - Parameter buffer: The buffer to append to.
    /// - Throws: ``WireError`` with code ``WireError/Code/invalidRequestTarget``,
    ///   ``WireError/Code/invalidHost``, ``WireError/Code/invalidHeaderName``,
    ///   ``WireError/Code/invalidHeaderValue`` or ``WireError/Code/forbiddenRequestHeader``.
    public func encode(into buffer: inout [UInt8]) throws(WireError) {
        try Self.validateTarget(target)
        try Self.validateHost(host)
        var size = method.rawValue.utf8.count + target.utf8.count + host.utf8.count + 27
        for field in headers where !DKHTTPHeaders.namesEqual(field.name, "Host") {
            try Self.validateField(field)
            size += field.name.utf8.count + field.value.utf8.count + 4
        }

        buffer.reserveCapacity(buffer.count + size)
        buffer.append(contentsOf: method.rawValue.utf8)
        buffer.append(UInt8(ascii: " "))
        buffer.append(contentsOf: target.utf8)
        buffer.append(contentsOf: " HTTP/1.1\r\nHost: ".utf8)
        buffer.append(contentsOf: host.utf8)
        buffer.append(contentsOf: "\r\n".utf8)
        for field in headers where !DKHTTPHeaders.namesEqual(field.name, "Host") {
            buffer.append(contentsOf: field.name.utf8)
            buffer.append(contentsOf: ": ".utf8)
            buffer.append(contentsOf: field.value.utf8)
            buffer.append(contentsOf: "\r\n".utf8)
        }
        buffer.append(contentsOf: "\r\n".utf8)
    }

    /// Returns the encoded head as new bytes.
    /// - Throws: The same errors as ``encode(into:)``.
    public func encoded() throws(WireError) -> [UInt8] {
        var bytes: [UInt8] = []
        try encode(into: &bytes)
        return bytes
    }

    // MARK: - Validation

    /// origin-form = absolute-path [ "?" query ] (RFC 9112 §3.2.1). We accept any visible ASCII
    /// after the leading "/" except "#": a fragment is never sent (RFC 9110 §7.1), and space,
    /// controls, DEL or non-ASCII bytes would let the target end the request line early.
    /// absolute-form = absolute-URI (RFC 9112 §3.2.2), accepted when it starts with `http://` or
    /// `https://` and passes the same byte rules.
    private static func validateTarget(_ target: String) throws(WireError) {
        var index = 0
        let isAbsoluteForm = target.utf8.starts(with: "http://".utf8) || target.utf8.starts(with: "https://".utf8)
        for byte in target.utf8 {
            if index == 0 && byte != UInt8(ascii: "/") && !isAbsoluteForm {
                throw WireError(.invalidRequestTarget, offset: 0, "request target must start with \"/\" (origin-form) or http(s):// (absolute-form)")
            }
            if byte <= 0x20 || byte >= 0x7F || byte == UInt8(ascii: "#") {
                throw WireError(
                    .invalidRequestTarget, offset: index,
                    "request target contains byte 0x\(HTTPByteClass.hex(byte)); visible ASCII but \"#\" is allowed")
            }
            index += 1
        }
        if index == 0 {
            throw WireError(.invalidRequestTarget, offset: 0, "request target is empty")
        }
    }

    /// Host = uri-host [ ":" port ] (RFC 9110 §7.2). Beyond the line-breaking bytes, "/", "?", "#",
    /// "@" and "\" are refused: each would make a receiver see a different authority or a path.
    private static func validateHost(_ host: String) throws(WireError) {
        var index = 0
        for byte in host.utf8 {
            switch byte {
            case 0...0x20, 0x7F...0xFF,
                UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "@"), UInt8(ascii: "\\"):
                throw WireError(.invalidHost, offset: index, "Host contains byte 0x\(HTTPByteClass.hex(byte))")
            default:
                index += 1
            }
        }
        if index == 0 {
            throw WireError(.invalidHost, offset: 0, "Host is empty")
        }
    }

    /// Checks caller-supplied header fields as ``encode(into:)`` would, without a request line: what a
    /// client refuses before it connects, so a CR, LF or NUL in a header is reported as the caller's
    /// input rather than found later.
    /// - Parameter headers: The caller's fields.
    /// - Throws: ``WireError`` with code ``WireError/Code/invalidHeaderName``,
    ///   ``WireError/Code/invalidHeaderValue`` or ``WireError/Code/forbiddenRequestHeader``, naming the field
    ///   (a name with control bytes is shown escaped, the value never).
    public static func validateFields(_ headers: DKHTTPHeaders) throws(WireError) {
        for field in headers { try validateField(field) }
    }

    /// A header name as an error text may show it: bytes outside printable ASCII as `\xHH`, so a CR or
    /// LF in a caller's name cannot break the error line.
    private static func printable(_ name: String) -> String {
        var text = ""
        for byte in name.utf8 {
            if byte >= 0x20 && byte < 0x7F && byte != 0x5C {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + HTTPByteClass.hex(byte)
            }
        }
        return text
    }

    private static func validateField(_ field: DKHTTPHeaders.Field) throws(WireError) {
        if field.name.utf8.isEmpty {
            throw WireError(.invalidHeaderName, "header field name is empty")
        }
        for byte in field.name.utf8 where !HTTPByteClass.isTokenByte(byte) {
            throw WireError(
                .invalidHeaderName,
                "header field name \"\(printable(field.name))\" contains byte 0x\(HTTPByteClass.hex(byte)), not a token")
        }
        // RFC 9110 §5.5: CR, LF and NUL are never valid in a field value; other controls are
        // obsolete and some servers treat them as separators, so they are refused too. HTAB is allowed.
        if field.value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A }) {
            throw WireError(
                .invalidHeaderValue, "request header \"\(printable(field.name))\" contains a line break (CR or LF)")
        }
        for byte in field.value.utf8 where (byte < 0x20 && byte != 0x09) || byte == 0x7F {
            throw WireError(
                .invalidHeaderValue,
                "value of header field \"\(printable(field.name))\" contains control byte 0x\(HTTPByteClass.hex(byte))")
        }
        // GET and HEAD requests are sent without content; a framing field would make the server
        // wait for a body that never comes, or read the next request as one (RFC 9112 §6.1, §6.2).
        if DKHTTPHeaders.namesEqual(field.name, "Transfer-Encoding")
            || DKHTTPHeaders.namesEqual(field.name, "Content-Length")
        {
            throw WireError(.forbiddenRequestHeader, "\(field.name) is not allowed: the request has no body")
        }
    }
}

/// Byte classes from the HTTP grammars, shared by the request encoder and the response parser.
enum HTTPByteClass {
    /// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~"
    ///       / DIGIT / ALPHA (RFC 9110 §5.6.2)
    @inline(__always)
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// Two uppercase hex digits for a byte, for error details.
    static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]], as: UTF8.self)
    }
}
