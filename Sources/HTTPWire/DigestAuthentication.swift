extension WireError.Code {
    /// A Digest challenge lacks `realm` or `nonce`, or names an algorithm or qop this module does not
    /// implement (RFC 7616 §3.3).
    public static let unsupportedDigestChallenge = WireError.Code("unsupportedDigestChallenge")
}

/// The hash algorithms of HTTP Digest authentication (RFC 7616 §3.3, §6.1).
public enum DigestHashAlgorithm: String, Sendable, Hashable, CaseIterable {
    /// MD5, the default when a challenge names no algorithm.
    case md5 = "MD5"
    /// SHA-256.
    case sha256 = "SHA-256"
}

/// A parsed `Digest` challenge (RFC 7616 §3.3).
public struct DigestChallenge: Sendable, Hashable {
    /// The protection space.
    public var realm: String
    /// The server nonce.
    public var nonce: String
    /// Returned unchanged in the response when present.
    public var opaque: String?
    /// The server says the previous nonce expired but the credentials were right (`stale=true`).
    public var isStale: Bool
    /// The hash algorithm.
    public var algorithm: DigestHashAlgorithm
    /// Whether the `-sess` variant was asked for (`MD5-sess`, `SHA-256-sess`).
    public var isSessionVariant: Bool
    /// The qop the client will use: `auth` when offered, else `auth-int`; `nil` for the RFC 2069
    /// form without qop.
    public var qop: String?
    /// Whether the server supports hashed user names (`userhash=true`).
    public var userhash: Bool

    /// Reads a challenge whose scheme is `Digest`.
    /// - Throws: ``WireError/Code/unsupportedDigestChallenge`` when `realm` or `nonce` is missing, the
    ///   algorithm is not MD5 or SHA-256 (with or without `-sess`), or qop offers neither `auth` nor
    ///   `auth-int`.
    public init(_ challenge: AuthChallenge) throws(WireError) {
        guard challenge.isScheme("Digest") else {
            throw WireError(.unsupportedDigestChallenge, "not a Digest challenge: \(challenge.scheme)")
        }
        guard let realm = challenge.parameter("realm"), let nonce = challenge.parameter("nonce") else {
            throw WireError(.unsupportedDigestChallenge, "a Digest challenge needs realm and nonce")
        }
        self.realm = realm
        self.nonce = nonce
        opaque = challenge.parameter("opaque")
        isStale = challenge.parameter("stale")?.lowercased() == "true"
        userhash = challenge.parameter("userhash")?.lowercased() == "true"
        var name = (challenge.parameter("algorithm") ?? "MD5").uppercased()
        isSessionVariant = name.hasSuffix("-SESS")
        if isSessionVariant { name.removeLast(5) }
        guard let algorithm = DigestHashAlgorithm(rawValue: name) else {
            throw WireError(.unsupportedDigestChallenge, "unsupported Digest algorithm \(name)")
        }
        self.algorithm = algorithm
        if let offered = challenge.parameter("qop") {
            let options = offered.split(separator: ",").map { $0.trimmingHTTPWhitespace().lowercased() }
            if options.contains("auth") {
                qop = "auth"
            } else if options.contains("auth-int") {
                qop = "auth-int"
            } else {
                throw WireError(.unsupportedDigestChallenge, "unsupported Digest qop \(offered)")
            }
        } else {
            qop = nil
        }
    }

    /// The algorithm's name as sent back (`MD5`, `SHA-256-sess`, …).
    public var algorithmName: String { algorithm.rawValue + (isSessionVariant ? "-sess" : "") }

    /// The `Authorization` value answering this challenge (RFC 7616 §3.4).
    ///
    /// Pure: hashing is `hash` (lower-case hex of the challenge's algorithm over UTF-8 text), and the
    /// client nonce and count come from the caller.
    /// - Parameters:
    ///   - user: The user name.
    ///   - password: The password.
    ///   - method: The request method (`GET`).
    ///   - uri: The request target exactly as sent on the request line.
    ///   - cnonce: A fresh client nonce (unused without qop).
    ///   - nonceCount: How many requests this nonce has served, from 1.
    ///   - hash: Lower-case hexadecimal digest of the text's UTF-8 bytes with ``algorithm``.
    public func authorization(
        user: String, password: String, method: String, uri: String, cnonce: String, nonceCount: Int,
        hash: (String) -> String
    ) -> String {
        let nc = Self.nonceCountText(nonceCount)
        var ha1 = hash("\(user):\(realm):\(password)")
        if isSessionVariant { ha1 = hash("\(ha1):\(nonce):\(cnonce)") }
        let ha2 = qop == "auth-int" ? hash("\(method):\(uri):\(hash(""))") : hash("\(method):\(uri)")
        let response: String
        if let qop {
            response = hash("\(ha1):\(nonce):\(nc):\(cnonce):\(qop):\(ha2)")
        } else {
            response = hash("\(ha1):\(nonce):\(ha2)")
        }
        var fields: [String] = []
        if userhash {
            fields.append("username=\(GrammarCharacters.quotedString(hash("\(user):\(realm)")))")
        } else if user.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }) {
            fields.append("username=\(GrammarCharacters.quotedString(user))")
        } else {
            // RFC 7616 §3.4.4: names that cannot be a quoted-string use the extended notation.
            fields.append("username*=UTF-8''\(PercentEncoding.encodeAttributeValue(user))")
        }
        fields.append("realm=\(GrammarCharacters.quotedString(realm))")
        fields.append("uri=\(GrammarCharacters.quotedString(uri))")
        fields.append("algorithm=\(algorithmName)")
        fields.append("nonce=\(GrammarCharacters.quotedString(nonce))")
        if let qop {
            fields.append("nc=\(nc)")
            fields.append("cnonce=\(GrammarCharacters.quotedString(cnonce))")
            fields.append("qop=\(qop)")
        }
        fields.append("response=\(GrammarCharacters.quotedString(response))")
        if let opaque { fields.append("opaque=\(GrammarCharacters.quotedString(opaque))") }
        if userhash { fields.append("userhash=true") }
        return "Digest " + fields.joined(separator: ", ")
    }

    /// Eight lower-case hex digits (RFC 7616 §3.4: `nc`).
    static func nonceCountText(_ count: Int) -> String {
        let hex = String(UInt32(truncatingIfNeeded: count), radix: 16)
        return String(repeating: "0", count: max(0, 8 - hex.count)) + hex
    }
}

extension PercentEncoding {
    /// RFC 8187 `value-chars`: attr-chars kept, every other UTF-8 byte percent-encoded.
    static func encodeAttributeValue(_ text: String) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in text.utf8 {
            let isAttrChar: Bool
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                isAttrChar = true
            default:
                isAttrChar = Array("!#$&+-.^_`|~".utf8).contains(byte)
            }
            if isAttrChar {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
