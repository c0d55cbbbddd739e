/// An HTTP protocol version, `HTTP/major.minor` (RFC 9112 §2.3).
public struct DKHTTPVersion: Sendable, Hashable, CustomStringConvertible {
    /// The major version (1 for every response this parser accepts).
    public var major: Int
    /// The minor version.
    public var minor: Int

    /// Creates a version.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// HTTP/1.0.
    public static let http1_0 = DKHTTPVersion(major: 1, minor: 0)
    /// HTTP/1.1.
    public static let http1_1 = DKHTTPVersion(major: 1, minor: 1)

    public var description: String { "HTTP/\(major).\(minor)" }
}

/// How the end of a response body is found (RFC 9112 §6.3).
public enum BodyFraming: Sendable, Hashable {
    /// No body follows the head: a response to HEAD, or status 1xx, 204 or 304.
    case none
    /// Exactly this many body bytes follow (`Content-Length`).
    case contentLength(Int64)
    /// The body uses the chunked transfer coding (RFC 9112 §7.1); the parser removes the framing.
    case chunked
    /// The body ends when the server closes the connection; only ``ResponseParser/finish()`` ends it.
    case untilClose
}

extension WireError.Code {
    /// The status line is not `HTTP/x.y SP 3DIGIT SP reason` (RFC 9112 §4).
    public static let malformedStatusLine = WireError.Code("malformedStatusLine")
    /// The response's major HTTP version is not 1.
    public static let unsupportedHTTPVersion = WireError.Code("unsupportedHTTPVersion")
    /// A field line has no colon (RFC 9112 §5).
    public static let malformedHeaderField = WireError.Code("malformedHeaderField")
    /// Whitespace between a field name and its colon (RFC 9112 §5.1 requires rejecting it).
    public static let whitespaceBeforeColon = WireError.Code("whitespaceBeforeColon")
    /// A field line continues the previous one with leading whitespace (obs-fold, RFC 9112 §5.2).
    public static let obsFoldRejected = WireError.Code("obsFoldRejected")
    /// A NUL or a CR not followed by LF inside a head (RFC 9112 §2.2), or a control byte other than HTAB in a
    /// field value (RFC 9110 §5.5).
    public static let invalidCharacterInHead = WireError.Code("invalidCharacterInHead")
    /// `Content-Length` is not a non-negative decimal integer that fits in 63 bits (RFC 9110 §8.6).
    public static let invalidContentLength = WireError.Code("invalidContentLength")
    /// Several `Content-Length` values that differ (RFC 9112 §6.3 item 5).
    public static let conflictingContentLength = WireError.Code("conflictingContentLength")
    /// `Transfer-Encoding` is empty or applies chunked more than once (RFC 9112 §6.1).
    public static let invalidTransferEncoding = WireError.Code("invalidTransferEncoding")
    /// The server answered 101 Switching Protocols; DownloadKit never asks for an upgrade.
    public static let upgradeUnsupported = WireError.Code("upgradeUnsupported")
}

/// The head of an HTTP/1.1 response: status line and header fields.
public struct ResponseHead: Sendable, Hashable {
    /// The protocol version from the status line.
    public var version: DKHTTPVersion
    /// The three-digit status code, 100 through 599.
    public var status: Int
    /// The reason phrase, possibly empty. Clients should ignore it (RFC 9112 §4).
    public var reason: String
    /// The header fields in the order received, values trimmed of surrounding whitespace.
    public var headers: DKHTTPHeaders

    /// Creates a response head.
    public init(version: DKHTTPVersion, status: Int, reason: String, headers: DKHTTPHeaders = DKHTTPHeaders()) {
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers
    }

    /// Whether this is an interim response (1xx, RFC 9110 §15.2).
    public var isInformational: Bool { (100..<200).contains(status) }

    /// The `Content-Length` value, or `nil` when the field is absent or the message has a
    /// `Transfer-Encoding`, which overrides it (RFC 9112 §6.3 item 3: the coding frames the body, and the
    /// field says nothing about its length). The one length rule of the parser's framing, the engine and
    /// the range policy.
    ///
    /// Repeated identical values, as one list (`"5, 5"`) or as several fields, count as one
    /// (RFC 9110 §8.6). Useful after a HEAD request, whose response has a length but no body.
    /// - Throws: ``WireError/Code/invalidContentLength`` for anything but 1*DIGIT within `Int64`
    ///   (no sign, no empty element), ``WireError/Code/conflictingContentLength`` for differing values.
    public func contentLength() throws(WireError) -> Int64? {
        guard !headers.contains(name: "Transfer-Encoding") else { return nil }
        var result: Int64?
        for field in headers where DKHTTPHeaders.namesEqual(field.name, "Content-Length") {
            var value: Int64 = 0
            var digits = 0
            var afterElement = false  // saw OWS after the digits of the current element
            func close() throws(WireError) {
                guard digits > 0 else {
                    throw WireError(.invalidContentLength, "Content-Length \"\(field.value)\" has an empty element")
                }
                if let previous = result, previous != value {
                    throw WireError(
                        .conflictingContentLength, "Content-Length values \(previous) and \(value) differ")
                }
                result = value
            }
            for byte in field.value.utf8 {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9") where !afterElement:
                    let (shifted, overflowA) = value.multipliedReportingOverflow(by: 10)
                    let (sum, overflowB) = shifted.addingReportingOverflow(Int64(byte &- UInt8(ascii: "0")))
                    if overflowA || overflowB {
                        throw WireError(.invalidContentLength, "Content-Length \"\(field.value)\" overflows 63 bits")
                    }
                    value = sum
                    digits += 1
                case UInt8(ascii: " "), UInt8(ascii: "\t"):
                    afterElement = digits > 0
                case UInt8(ascii: ","):
                    try close()
                    value = 0
                    digits = 0
                    afterElement = false
                default:
                    throw WireError(
                        .invalidContentLength, "Content-Length \"\(field.value)\" is not a non-negative integer")
                }
            }
            try close()
        }
        return result
    }

    /// Whether the server allows another request on this connection (RFC 9112 §9.3): HTTP/1.1
    /// unless `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`.
    public var allowsPersistentConnection: Bool {
        var close = false
        var keepAlive = false
        for token in headers.listValues(name: "Connection") {
            if DKHTTPHeaders.namesEqual(token, "close") { close = true }
            if DKHTTPHeaders.namesEqual(token, "keep-alive") { keepAlive = true }
        }
        if close { return false }
        if version.major == 1 && version.minor == 0 { return keepAlive }
        return true
    }

    /// Decides how the body is delimited, per RFC 9112 §6.3, in the order the RFC lists the rules.
    /// - Returns: The framing, and whether the head carried both `Transfer-Encoding` and
    ///   `Content-Length` (or `Transfer-Encoding` in HTTP/1.0), which forbids reusing the connection.
    func bodyFraming(requestMethod: DKHTTPMethod) throws(WireError) -> (framing: BodyFraming, faultyFraming: Bool) {
        // §6.3 item 1: responses to HEAD, and 1xx, 204 and 304 responses, end at the empty line
        // after the head whatever their framing fields say.
        if requestMethod == .HEAD || isInformational || status == 204 || status == 304 {
            return (.none, false)
        }
        let codings = headers.listValues(name: "Transfer-Encoding")
        if headers.contains(name: "Transfer-Encoding") {
            guard let last = codings.last else {
                throw WireError(.invalidTransferEncoding, "Transfer-Encoding is present but lists no coding")
            }
            var chunkedCount = 0
            for coding in codings where Self.codingName(coding) == "chunked" { chunkedCount += 1 }
            if chunkedCount > 1 {
                // §6.1: a sender MUST NOT apply chunked more than once; the framing is ambiguous.
                throw WireError(.invalidTransferEncoding, "Transfer-Encoding applies chunked \(chunkedCount) times")
            }
            // §6.3 item 3: Transfer-Encoding overrides Content-Length, but the pair may be a
            // smuggling attempt, so the connection is closed afterwards. §6.1: Transfer-Encoding in
            // an HTTP/1.0 message also means faulty framing.
            let faulty = headers.contains(name: "Content-Length") || (version.major == 1 && version.minor == 0)
            // §6.3 item 4: chunked must be the final coding, otherwise the body runs until close.
            if Self.codingName(last) == "chunked" { return (.chunked, faulty) }
            return (.untilClose, faulty)
        }
        // §6.3 item 5: an invalid or conflicting Content-Length is an unrecoverable framing error.
        if let length = try contentLength() {
            return (.contentLength(length), false)
        }
        // §6.3 item 8: otherwise the body is everything until the server closes the connection.
        return (.untilClose, false)
    }

    /// The lowercased coding name of a transfer-coding element, without parameters.
    private static func codingName(_ coding: String) -> String {
        let name = coding.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return String(decoding: name.utf8.map(asciiLower), as: UTF8.self).trimmingHTTPWhitespace()
    }
}

// MARK: - Parsing a complete head

extension ResponseHead {
    /// Parses a complete head whose bytes the scanner in ``ResponseParser`` has already checked:
    /// it ends with an empty line, has LF or CRLF line endings, and contains no NUL or bare CR.
    /// - Parameters:
    ///   - bytes: The head, from the first byte of the status line through the final LF.
    ///   - baseOffset: Offset of `bytes[0]` in the message, for error offsets.
    static func parse(_ bytes: UnsafeRawBufferPointer, baseOffset: Int) throws(WireError) -> ResponseHead {
        var lineStart = 0
        var head = ResponseHead(version: .http1_1, status: 0, reason: "")
        var isStatusLine = true
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != 0x0A { lineEnd += 1 }
            let next = lineEnd + 1
            // RFC 9112 §2.2: a line may end in LF alone; drop the CR of a CRLF.
            if lineEnd > lineStart && bytes[lineEnd - 1] == 0x0D { lineEnd -= 1 }
            let line = UnsafeRawBufferPointer(rebasing: bytes[lineStart..<lineEnd])
            if isStatusLine {
                try parseStatusLine(line, into: &head, baseOffset: baseOffset + lineStart)
                isStatusLine = false
            } else if line.isEmpty {
                break
            } else {
                try parseFieldLine(line, into: &head.headers, baseOffset: baseOffset + lineStart)
            }
            lineStart = next
        }
        return head
    }

    /// status-line = HTTP-version SP status-code SP [ reason-phrase ] (RFC 9112 §4), tolerating a
    /// missing SP before an empty reason as RFC 9112 §4 suggests for robustness.
    private static func parseStatusLine(
        _ line: UnsafeRawBufferPointer, into head: inout ResponseHead, baseOffset: Int
    ) throws(WireError) {
        func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }
        func malformed(_ at: Int, _ why: String) -> WireError {
            WireError(.malformedStatusLine, offset: baseOffset + at, why)
        }
        let prefix: [UInt8] = [0x48, 0x54, 0x54, 0x50, 0x2F]  // "HTTP/"
        guard line.count >= 12 else {
            throw malformed(0, "status line has \(line.count) bytes, fewer than \"HTTP/1.1 200\"")
        }
        for index in 0..<5 where line[index] != prefix[index] {
            throw malformed(index, "status line does not start with \"HTTP/\"")
        }
        guard isDigit(line[5]), line[6] == UInt8(ascii: "."), isDigit(line[7]) else {
            throw malformed(5, "HTTP version is not DIGIT \".\" DIGIT (RFC 9112 §2.3)")
        }
        head.version = DKHTTPVersion(major: Int(line[5] - 0x30), minor: Int(line[7] - 0x30))
        guard head.version.major == 1 else {
            throw WireError(.unsupportedHTTPVersion, offset: baseOffset + 5, "response version is \(head.version)")
        }
        guard line[8] == UInt8(ascii: " ") else { throw malformed(8, "expected one SP after the HTTP version") }
        guard isDigit(line[9]), isDigit(line[10]), isDigit(line[11]) else {
            throw malformed(9, "status code is not three digits")
        }
        head.status = Int(line[9] - 0x30) * 100 + Int(line[10] - 0x30) * 10 + Int(line[11] - 0x30)
        // RFC 9110 §15: all valid status codes are within 100...599.
        guard (100...599).contains(head.status) else {
            throw malformed(9, "status code \(head.status) is outside 100...599")
        }
        if line.count > 12 {
            guard line[12] == UInt8(ascii: " ") else { throw malformed(12, "expected SP after the status code") }
            head.reason = String(decoding: UnsafeRawBufferPointer(rebasing: line[13...]), as: UTF8.self)
        }
    }

    /// field-line = field-name ":" OWS field-value OWS (RFC 9112 §5).
    private static func parseFieldLine(
        _ line: UnsafeRawBufferPointer, into headers: inout DKHTTPHeaders, baseOffset: Int
    ) throws(WireError) {
        let first = line[0]
        if first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
            // RFC 9112 §5.2 lets a user agent unfold obs-fold, and §2.2 lets it reject whitespace
            // before the first field; DownloadKit rejects both, so no two parsers ever disagree on
            // where a framing field ends.
            throw WireError(.obsFoldRejected, offset: baseOffset, "field line starts with whitespace (obs-fold)")
        }
        var colon = 0
        while colon < line.count && line[colon] != UInt8(ascii: ":") { colon += 1 }
        guard colon < line.count else {
            throw WireError(.malformedHeaderField, offset: baseOffset, "field line has no colon")
        }
        guard colon > 0 else {
            throw WireError(.invalidHeaderName, offset: baseOffset, "field name is empty")
        }
        for index in 0..<colon where !HTTPByteClass.isTokenByte(line[index]) {
            let byte = line[index]
            func isWhitespace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
            if (index..<colon).allSatisfy({ isWhitespace(line[$0]) }) {
                // RFC 9112 §5.1: "A server MUST reject ... any received request message that contains
                // whitespace between a header field name and colon"; responses get the same treatment
                // since the whitespace is a known smuggling vector.
                throw WireError(
                    .whitespaceBeforeColon, offset: baseOffset + index, "whitespace between field name and colon")
            }
            throw WireError(
                .invalidHeaderName, offset: baseOffset + index,
                "field name contains byte 0x\(HTTPByteClass.hex(byte)), not a token")
        }
        var valueStart = colon + 1
        var valueEnd = line.count
        while valueStart < valueEnd && (line[valueStart] == 0x20 || line[valueStart] == 0x09) { valueStart += 1 }
        while valueEnd > valueStart && (line[valueEnd - 1] == 0x20 || line[valueEnd - 1] == 0x09) { valueEnd -= 1 }
        // RFC 9110 §5.5: field-vchar is VCHAR / obs-text, with SP and HTAB between; any other control
        // byte (and DEL) is rejected, not passed on into names, files or logs (decisions table,
        // ResponseParser.swift).
        for index in valueStart..<valueEnd {
            let byte = line[index]
            if (byte < 0x20 && byte != 0x09) || byte == 0x7F {
                throw WireError(
                    .invalidCharacterInHead, offset: baseOffset + index,
                    "field value contains control byte 0x\(HTTPByteClass.hex(byte)) (RFC 9110 §5.5)")
            }
        }
        headers.add(
            name: String(decoding: UnsafeRawBufferPointer(rebasing: line[0..<colon]), as: UTF8.self),
            value: String(decoding: UnsafeRawBufferPointer(rebasing: line[valueStart..<valueEnd]), as: UTF8.self))
    }
}

extension ResponseHead {
    /// The registered reason phrase of `status` (`401` → `Unauthorized`; RFC 9110 §15, RFC 6585 for 429
    /// and 431), or `nil` for a code not listed. For messages about a status whose response's own phrase
    /// was not kept, and for test servers.
    public static func standardReason(for status: Int) -> String? {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 300: "Multiple Choices"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 402: "Payment Required"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 407: "Proxy Authentication Required"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 416: "Range Not Satisfiable"
        case 417: "Expectation Failed"
        case 421: "Misdirected Request"
        case 422: "Unprocessable Content"
        case 426: "Upgrade Required"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default: nil
        }
    }
}
