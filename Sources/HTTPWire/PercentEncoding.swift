extension WireError.Code {
    /// A `%` is not followed by two hexadecimal digits (RFC 3986 §2.1).
    public static let malformedPercentEncoding = WireError.Code("malformedPercentEncoding")
}

/// Percent-encoding as defined by RFC 3986 §2.1.
public enum PercentEncoding {
    /// Decodes `%HH` escapes into bytes, strictly.
    /// - Parameter text: The encoded text; bytes other than escapes are kept as they are.
    /// - Returns: The decoded bytes.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedPercentEncoding`` when a `%` is not
    ///   followed by two hexadecimal digits.
    public static func decode(_ text: String) throws(WireError) -> [UInt8] {
        let input = Array(text.utf8)
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < input.count, let high = hexValue(input[index + 1]),
                    let low = hexValue(input[index + 2])
                else {
                    throw WireError(.malformedPercentEncoding, offset: index, "'%' is not followed by two hex digits")
                }
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(byte)
                index += 1
            }
        }
        return output
    }

    /// Decodes `%HH` escapes into bytes, keeping any `%` that does not start a valid escape as it is
    /// (the WHATWG URL Standard's percent-decode).
    /// - Parameter text: The encoded text.
    /// - Returns: The decoded bytes.
    public static func decodeLeniently(_ text: String) -> [UInt8] {
        let input = Array(text.utf8)
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            if input[index] == UInt8(ascii: "%"), index + 2 < input.count,
                let high = hexValue(input[index + 1]), let low = hexValue(input[index + 2])
            {
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(input[index])
                index += 1
            }
        }
        return output
    }

    /// Percent-encodes every byte of `text`'s UTF-8 form that is not ASCII (0x80 and above), with
    /// upper-case hex digits. Everything else, including existing escapes, is kept exactly.
    /// - Parameter text: The text to encode.
    /// - Returns: Pure-ASCII text.
    public static func encodeNonASCII(_ text: String) -> String {
        encode(text.utf8) { $0 >= 0x80 }
    }

    /// Percent-encodes the bytes for which `shouldEncode` is true, with upper-case hex digits.
    /// - Parameters:
    ///   - bytes: The bytes to encode.
    ///   - shouldEncode: Whether a byte must be written as `%HH`.
    /// - Returns: The encoded text.
    public static func encode(_ bytes: some Sequence<UInt8>, where shouldEncode: (UInt8) -> Bool) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.underestimatedCount)
        for byte in bytes {
            if shouldEncode(byte) {
                output.append(UInt8(ascii: "%"))
                output.append(hexDigits[Int(byte >> 4)])
                output.append(hexDigits[Int(byte & 0x0F)])
            } else {
                output.append(byte)
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Percent-encodes everything except RFC 3986 §2.3 unreserved characters and the sub-delims
    /// (§2.2), which is what a userinfo component may carry unencoded apart from `:`.
    /// - Parameter text: The text to encode.
    /// - Returns: Text safe to place in a userinfo component.
    public static func encodeUserinfoComponent(_ text: String) -> String {
        encode(text.utf8) { !(GrammarCharacters.isUnreserved($0) || GrammarCharacters.isSubDelimiter($0)) }
    }

    private static let hexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// The value of a hexadecimal digit, or `nil`.
    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Character classes shared by the URL and header grammars in this module.
enum GrammarCharacters {
    /// A quoted-string (RFC 9110 §5.6.4) with `"` and `\` escaped, byte by byte: a `"` followed by a combining
    /// mark is one `Character` that is not `"`, so escaping by `Character` would let a value from a server
    /// (a Digest realm, a Link title) end the string early and add parameters of its own.
    static func quotedString(_ text: String) -> String {
        var output: [UInt8] = [0x22]
        for byte in text.utf8 {
            if byte == 0x22 || byte == 0x5C { output.append(0x5C) }
            output.append(byte)
        }
        output.append(0x22)
        return String(decoding: output, as: UTF8.self)
    }

    /// ALPHA (RFC 5234 Appendix B.1).
    static func isAlpha(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
    }

    /// DIGIT (RFC 5234 Appendix B.1).
    static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    /// unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~" (RFC 3986 §2.3).
    static func isUnreserved(_ byte: UInt8) -> Bool {
        isAlpha(byte) || isDigit(byte) || byte == 0x2D || byte == 0x2E || byte == 0x5F || byte == 0x7E
    }

    /// sub-delims = "!" / "$" / "&" / "'" / "(" / ")" / "*" / "+" / "," / ";" / "=" (RFC 3986 §2.2).
    static func isSubDelimiter(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x21, 0x24, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x3B, 0x3D: true
        default: false
        }
    }

    /// tchar (RFC 9110 §5.6.2).
    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        if isAlpha(byte) || isDigit(byte) { return true }
        switch byte {
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: return true
        default: return false
        }
    }

    /// A control byte that may never appear in a field value: C0 controls other than HTAB, and DEL
    /// (RFC 9110 §5.5 allows only VCHAR, SP, HTAB and obs-text).
    static func isForbiddenControl(_ byte: UInt8) -> Bool {
        (byte < 0x20 && byte != 0x09) || byte == 0x7F
    }

    /// Whether every byte of `string` is a tchar and there is at least one.
    static func isToken(_ string: some StringProtocol) -> Bool {
        !string.utf8.isEmpty && string.utf8.allSatisfy(isTokenCharacter)
    }
}

/// A forward-only cursor over the UTF-8 bytes of a header value, shared by the header grammars.
struct GrammarScanner {
    let bytes: [UInt8]
    var index = 0

    init(_ text: String) { bytes = Array(text.utf8) }

    var isAtEnd: Bool { index >= bytes.count }
    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    /// Skips optional whitespace: SP and HTAB (RFC 9110 §5.6.3).
    mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x09 { index += 1 }
    }

    /// Consumes `byte` if it is next.
    mutating func consume(_ byte: UInt8) -> Bool {
        guard current == byte else { return false }
        index += 1
        return true
    }

    /// Consumes `literal` if it is next, comparing ASCII letters case-insensitively.
    mutating func consumeCaseInsensitive(_ literal: String) -> Bool {
        let literal = Array(literal.utf8)
        guard bytes.count - index >= literal.count else { return false }
        for (offset, expected) in literal.enumerated() where asciiLower(bytes[index + offset]) != asciiLower(expected) {
            return false
        }
        index += literal.count
        return true
    }

    /// Consumes a run of bytes satisfying `predicate` and returns them as a string (possibly empty).
    mutating func consume(while predicate: (UInt8) -> Bool) -> String {
        let start = index
        while let byte = current, predicate(byte) { index += 1 }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    /// Consumes a token (RFC 9110 §5.6.2), or returns `nil` when none is next.
    mutating func token() -> String? {
        let token = consume(while: GrammarCharacters.isTokenCharacter)
        return token.isEmpty ? nil : token
    }

    /// Consumes a run of decimal digits as a non-negative `Int64`.
    /// - Returns: The value, or `nil` when no digit is next.
    /// - Throws: `code` when the value does not fit in an `Int64`: numbers are never silently wrapped.
    mutating func decimal(_ code: WireError.Code, what: String) throws(WireError) -> Int64? {
        let start = index
        var value: Int64 = 0
        while let byte = current, GrammarCharacters.isDigit(byte) {
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int64(byte - 0x30))
            guard !overflow1, !overflow2 else { throw WireError(code, offset: start, "\(what) overflows Int64") }
            value = sum
            index += 1
        }
        return index == start ? nil : value
    }

    /// Consumes a quoted-string (RFC 9110 §5.6.4) whose opening DQUOTE is next, resolving quoted-pairs.
    /// - Throws: `code` when the string is unterminated or holds a forbidden control byte.
    mutating func quotedString(_ code: WireError.Code) throws(WireError) -> String {
        let start = index
        precondition(current == 0x22, "quotedString() called without an opening DQUOTE")
        index += 1
        var output: [UInt8] = []
        while let byte = current {
            index += 1
            switch byte {
            case 0x22:
                return String(decoding: output, as: UTF8.self)
            case 0x5C:
                // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
                guard let escaped = current, !GrammarCharacters.isForbiddenControl(escaped) else {
                    throw WireError(code, offset: index, "invalid quoted-pair")
                }
                output.append(escaped)
                index += 1
            default:
                guard !GrammarCharacters.isForbiddenControl(byte) else {
                    throw WireError(code, offset: index - 1, "control byte \(byte) in quoted-string")
                }
                output.append(byte)
            }
        }
        throw WireError(code, offset: start, "unterminated quoted-string")
    }
}
