extension WireError.Code {
    /// A `Content-MD5` value does not encode exactly 16 bytes.
    public static let malformedContentMD5 = WireError.Code("malformedContentMD5")
}

/// The `Content-MD5` field (RFC 1864): the base64 MD5 digest of the body. Obsolete in HTTP/1.1 but
/// still sent by some object stores; useful as an end-to-end check of a downloaded file.
public struct ContentMD5: Sendable, Hashable, CustomStringConvertible {
    /// The 16-byte MD5 digest.
    public var digest: [UInt8]

    /// Creates a value from a digest.
    /// - Parameter digest: Exactly 16 bytes; anything else is a programming error and traps.
    public init(digest: [UInt8]) {
        precondition(digest.count == 16, "an MD5 digest has 16 bytes, not \(digest.count)")
        self.digest = digest
    }

    /// Parses the base64 digest (RFC 1864 §2). Tolerates missing `==` padding and, because some
    /// servers send it, the 32-digit hexadecimal form.
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedContentMD5``.
    public init(parsing value: String) throws(WireError) {
        let text = value.trimmingHTTPWhitespace()
        let bytes = Array(text.utf8)
        if bytes.count == 32, bytes.allSatisfy({ PercentEncoding.hexValue($0) != nil }) {
            digest = stride(from: 0, to: 32, by: 2).map { index in
                (PercentEncoding.hexValue(bytes[index]) ?? 0) << 4 | (PercentEncoding.hexValue(bytes[index + 1]) ?? 0)
            }
            return
        }
        let decoded: [UInt8]
        do {
            decoded = try Base64.decode(bytes.count == 22 ? text + "==" : text)
        } catch {
            throw WireError(.malformedContentMD5, offset: error.offset, "not base64: \(error.detail)")
        }
        guard decoded.count == 16 else {
            throw WireError(.malformedContentMD5, offset: 0, "digest has \(decoded.count) bytes, not 16")
        }
        digest = decoded
    }

    /// The field value: the digest in base64.
    public var headerValue: String { Base64.encode(digest) }

    /// The digest as 32 lower-case hexadecimal digits (as `md5sum` prints it).
    public var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: digest.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
    }

    public var description: String { hexString }
}
