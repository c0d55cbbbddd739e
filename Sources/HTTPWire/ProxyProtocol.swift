extension WireError.Code {
    /// A SOCKS5 proxy sent bytes that break RFC 1928/1929 (wrong version, reserved byte, address type).
    public static let malformedSOCKSReply = WireError.Code("malformedSOCKSReply")
    /// A SOCKS5 request cannot be encoded (a user name, password or host name longer than 255 bytes,
    /// or empty where a value is required).
    public static let invalidSOCKSRequest = WireError.Code("invalidSOCKSRequest")
    /// An HTTP proxy sent bytes after its `2xx` answer to `CONNECT` before the client spoke: the
    /// tunnel's first bytes must come from the client (TLS ClientHello), so these cannot be the origin's.
    public static let unexpectedBytesAfterConnect = WireError.Code("unexpectedBytesAfterConnect")
}

/// The messages of SOCKS version 5 (RFC 1928) and its username/password authentication (RFC 1929),
/// encoded and decoded as bytes. No I/O.
public enum SOCKS5 {
    /// Authentication methods (RFC 1928 §3).
    public static let methodNoAuthentication: UInt8 = 0x00
    /// Username/password (RFC 1929).
    public static let methodUsernamePassword: UInt8 = 0x02
    /// "No acceptable methods".
    public static let methodNoneAcceptable: UInt8 = 0xFF

    /// Where the proxy should connect.
    public enum Address: Sendable, Hashable {
        /// An IPv4 address (4 bytes).
        case ipv4([UInt8])
        /// An IPv6 address (16 bytes).
        case ipv6([UInt8])
        /// A host name for the proxy to resolve (`socks5h`), 1...255 bytes.
        case domain(String)
    }

    /// A reply code (RFC 1928 §6) with its name.
    public struct ReplyCode: Sendable, Hashable, CustomStringConvertible {
        /// The byte from the reply.
        public var rawValue: UInt8
        /// Creates a code.
        public init(_ rawValue: UInt8) { self.rawValue = rawValue }
        /// Whether the request succeeded (`0x00`).
        public var isSuccess: Bool { rawValue == 0 }
        /// Whether another attempt may succeed (network/host unreachable, refused, TTL expired, general failure).
        public var isTransient: Bool { [1, 3, 4, 5, 6].contains(rawValue) }
        /// RFC 1928's name for the code.
        public var name: String {
            switch rawValue {
            case 0: "succeeded"
            case 1: "general SOCKS server failure"
            case 2: "connection not allowed by ruleset"
            case 3: "network unreachable"
            case 4: "host unreachable"
            case 5: "connection refused"
            case 6: "TTL expired"
            case 7: "command not supported"
            case 8: "address type not supported"
            default: "unassigned reply code"
            }
        }
        public var description: String { "\(name) (SOCKS reply \(rawValue))" }
    }

    /// The proxy's reply to CONNECT: its code and the address it bound (usually uninteresting).
    public struct Reply: Sendable, Hashable {
        /// The reply code.
        public var code: ReplyCode
        /// BND.ADDR.
        public var boundAddress: Address
        /// BND.PORT.
        public var boundPort: Int
    }

    /// The greeting: version 5 and the offered methods (no authentication, and username/password
    /// when credentials are given).
    public static func greeting(offeringUsernamePassword: Bool) -> [UInt8] {
        offeringUsernamePassword
            ? [5, 2, methodNoAuthentication, methodUsernamePassword] : [5, 1, methodNoAuthentication]
    }

    /// Decodes the 2-byte method selection. Returns `nil` while fewer than 2 bytes are given.
    /// - Throws: ``WireError/Code/malformedSOCKSReply`` when the version is not 5.
    public static func parseMethodSelection(_ bytes: some Collection<UInt8>) throws(WireError) -> UInt8? {
        guard bytes.count >= 2 else { return nil }
        let version = bytes[bytes.startIndex]
        guard version == 5 else {
            throw WireError(
                .malformedSOCKSReply, offset: 0,
                "the proxy answered the SOCKS5 greeting with version \(version), not 5 (not a SOCKS5 proxy?)")
        }
        return bytes[bytes.index(after: bytes.startIndex)]
    }

    /// The RFC 1929 username/password request.
    /// - Throws: ``WireError/Code/invalidSOCKSRequest`` when either is empty (user only) or longer than 255 bytes.
    public static func usernamePasswordRequest(user: String, password: String) throws(WireError) -> [UInt8] {
        let name = Array(user.utf8), secret = Array(password.utf8)
        guard (1...255).contains(name.count), secret.count <= 255 else {
            throw WireError(
                .invalidSOCKSRequest, "SOCKS5 user names must be 1 to 255 bytes and passwords at most 255 (RFC 1929)")
        }
        return [1, UInt8(name.count)] + name + [UInt8(secret.count)] + secret
    }

    /// Decodes the RFC 1929 reply. Returns `nil` while fewer than 2 bytes are given, else whether
    /// the proxy accepted the credentials.
    /// - Throws: ``WireError/Code/malformedSOCKSReply`` when the sub-negotiation version is not 1.
    public static func parseAuthenticationReply(_ bytes: some Collection<UInt8>) throws(WireError) -> Bool? {
        guard bytes.count >= 2 else { return nil }
        let version = bytes[bytes.startIndex]
        guard version == 1 else {
            throw WireError(
                .malformedSOCKSReply, offset: 0, "the proxy's authentication reply has version \(version), not 1")
        }
        return bytes[bytes.index(after: bytes.startIndex)] == 0
    }

    /// The CONNECT request for `address` and `port`.
    /// - Throws: ``WireError/Code/invalidSOCKSRequest`` for a bad address length or port.
    public static func connectRequest(to address: Address, port: Int) throws(WireError) -> [UInt8] {
        guard (1...65535).contains(port) else {
            throw WireError(.invalidSOCKSRequest, "port \(port) is out of range")
        }
        var bytes: [UInt8] = [5, 1, 0]
        switch address {
        case .ipv4(let raw):
            guard raw.count == 4 else { throw WireError(.invalidSOCKSRequest, "an IPv4 address has 4 bytes") }
            bytes += [1] + raw
        case .ipv6(let raw):
            guard raw.count == 16 else { throw WireError(.invalidSOCKSRequest, "an IPv6 address has 16 bytes") }
            bytes += [4] + raw
        case .domain(let name):
            let raw = Array(name.utf8)
            guard (1...255).contains(raw.count), !raw.contains(0) else {
                throw WireError(.invalidSOCKSRequest, "a SOCKS5 host name must be 1 to 255 bytes without NUL")
            }
            bytes += [3, UInt8(raw.count)] + raw
        }
        return bytes + [UInt8(port >> 8), UInt8(port & 0xFF)]
    }

    /// Decodes the reply to CONNECT. Returns `nil` while the reply is incomplete, else the reply and
    /// how many bytes it took (bytes after it belong to the tunnel).
    /// - Throws: ``WireError/Code/malformedSOCKSReply`` for a wrong version, a non-zero reserved byte
    ///   or an unknown address type.
    public static func parseReply(_ bytes: some Collection<UInt8>) throws(WireError) -> (reply: Reply, consumed: Int)? {
        let b = Array(bytes.prefix(262))
        guard b.count >= 4 else {
            if let first = b.first, first != 5 { throw versionError(first) }
            return nil
        }
        guard b[0] == 5 else { throw versionError(b[0]) }
        guard b[2] == 0 else {
            throw WireError(.malformedSOCKSReply, offset: 2, "the SOCKS5 reply's reserved byte is \(b[2]), not 0")
        }
        let length: Int
        switch b[3] {
        case 1: length = 4 + 4 + 2
        case 4: length = 4 + 16 + 2
        case 3:
            guard b.count >= 5 else { return nil }
            length = 4 + 1 + Int(b[4]) + 2
        default:
            throw WireError(.malformedSOCKSReply, offset: 3, "the SOCKS5 reply has unknown address type \(b[3])")
        }
        guard b.count >= length else { return nil }
        let address: Address
        switch b[3] {
        case 1: address = .ipv4(Array(b[4..<8]))
        case 4: address = .ipv6(Array(b[4..<20]))
        default: address = .domain(String(decoding: b[5..<(5 + Int(b[4]))], as: UTF8.self))
        }
        let port = Int(b[length - 2]) << 8 | Int(b[length - 1])
        return (Reply(code: ReplyCode(b[1]), boundAddress: address, boundPort: port), length)
    }

    private static func versionError(_ version: UInt8) -> WireError {
        WireError(.malformedSOCKSReply, offset: 0, "the SOCKS5 reply has version \(version), not 5")
    }
}

/// The `CONNECT` exchange with an HTTP proxy (RFC 9110 §9.3.6): the request in authority-form and
/// the reading of the proxy's answer. No I/O.
public enum HTTPConnectTunnel {
    /// `CONNECT host:port HTTP/1.1` with `Host`, an optional `Proxy-Authorization` and `User-Agent`.
    /// - Throws: ``WireError/Code/invalidHost`` when the authority could split the request line, or
    ///   ``WireError/Code/invalidHeaderValue`` for a control byte in a value.
    public static func request(authority: String, proxyAuthorization: String?, userAgent: String) throws(WireError)
        -> [UInt8]
    {
        for (index, byte) in authority.utf8.enumerated() {
            switch byte {
            case 0...0x20, 0x7F...0xFF, UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "@"):
                throw WireError(.invalidHost, offset: index, "CONNECT authority contains byte 0x\(HTTPByteClass.hex(byte))")
            default: continue
            }
        }
        for value in [proxyAuthorization ?? "", userAgent] {
            for byte in value.utf8 where (byte < 0x20 && byte != 0x09) || byte == 0x7F {
                throw WireError(.invalidHeaderValue, "a CONNECT header value contains control byte 0x\(HTTPByteClass.hex(byte))")
            }
        }
        var text = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        if let proxyAuthorization { text += "Proxy-Authorization: \(proxyAuthorization)\r\n" }
        text += "User-Agent: \(userAgent)\r\nProxy-Connection: Keep-Alive\r\n\r\n"
        return Array(text.utf8)
    }

    /// The outcome of reading the proxy's answer.
    public enum Outcome: Sendable, Hashable {
        /// More bytes are needed.
        case needMore
        /// A `2xx`: the tunnel is open; `consumed` bytes were the answer's head.
        case established(ResponseHead, consumed: Int)
        /// Any other final status: no tunnel. The caller closes the connection.
        case refused(ResponseHead)
    }

    /// Reads the proxy's answer to `CONNECT` from `parser` (created with ``makeParser(limits:)``),
    /// skipping interim 1xx heads.
    /// - Throws: the parser's errors for a malformed head, and
    ///   ``WireError/Code/unexpectedBytesAfterConnect`` when a `2xx` head is followed by more bytes
    ///   in `bytes` (the proxy spoke first inside the tunnel).
    public static func read(_ bytes: UnsafeRawBufferPointer, parser: inout ResponseParser) throws(WireError) -> Outcome {
        var offset = 0
        while true {
            let step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            offset += step.consumed
            switch step.event {
            case .head(let head):
                guard (200..<300).contains(head.status) else { return .refused(head) }
                if offset < bytes.count {
                    throw WireError(
                        .unexpectedBytesAfterConnect, offset: offset,
                        "the proxy sent \(bytes.count - offset) bytes after \"\(head.status) \(head.reason)\" before the client spoke; not a clean tunnel")
                }
                return .established(head, consumed: offset)
            case .needMore:
                return .needMore
            default:
                if offset >= bytes.count { return .needMore }
            }
        }
    }

    /// A parser for the answer to `CONNECT`: framed like the answer to `HEAD` (a `2xx` has no body;
    /// the tunnel begins right after the head).
    public static func makeParser(limits: ParserLimits = .default) -> ResponseParser {
        ResponseParser(requestMethod: .HEAD, limits: limits)
    }

    /// The `realm` parameter of a `Proxy-Authenticate` challenge (first one), for error messages.
    public static func realm(ofChallenge value: String) -> String? {
        let bytes = Array(value.utf8)
        let key = Array("realm=".utf8)
        guard bytes.count >= key.count,
            let start = (0...(bytes.count - key.count)).first(where: { index in
                (0..<key.count).allSatisfy { asciiLower(bytes[index + $0]) == key[$0] }
            })
        else { return nil }
        var rest = bytes[(start + key.count)...]
        if rest.first == UInt8(ascii: "\"") {
            rest = rest.dropFirst()
            return String(decoding: rest.prefix { $0 != UInt8(ascii: "\"") }, as: UTF8.self)
        }
        return String(decoding: rest.prefix { $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: " ") }, as: UTF8.self)
    }
}
