extension WireError.Code {
    /// An `ETag` value is empty, unterminated, or holds a control byte such as CR, LF or NUL.
    public static let malformedETag = WireError.Code("malformedETag")
}

/// An entity tag, the `ETag` validator (RFC 9110 §8.8.3).
public struct EntityTag: Sendable, Hashable, CustomStringConvertible {
    /// The opaque tag, without quotes and without the `W/` prefix.
    public var opaque: String
    /// Whether the tag is weak (`W/"…"`): only semantically, not byte-for-byte, equivalent.
    public var isWeak: Bool

    /// Creates a tag.
    /// - Parameters:
    ///   - opaque: The tag without quotes; it must not contain `"` or control bytes.
    ///   - isWeak: Whether the tag is weak.
    public init(opaque: String, isWeak: Bool = false) {
        self.opaque = opaque
        self.isWeak = isWeak
    }

    /// Parses an `ETag` value: `entity-tag = [ weak ] opaque-tag` (RFC 9110 §8.8.3).
    ///
    /// Tolerant of sloppy servers: a lower-case `w/`, spaces inside the quotes, and an unquoted tag
    /// (`ETag: abc123`, taken as the opaque part) are accepted. Control bytes (CR, LF, NUL, …) are
    /// always refused.
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedETag``.
    public init(parsing value: String) throws(WireError) {
        var scanner = GrammarScanner(value)
        let code = WireError.Code.malformedETag
        if let index = scanner.bytes.firstIndex(where: GrammarCharacters.isForbiddenControl) {
            throw WireError(code, offset: index, "control byte \(scanner.bytes[index]) in entity tag")
        }
        scanner.skipWhitespace()
        isWeak = scanner.consumeCaseInsensitive("W/")
        let start = scanner.index
        if scanner.consume(0x22) {
            // etagc = %x21 / %x23-7E / obs-text; SP and HTAB tolerated.
            opaque = scanner.consume { $0 != 0x22 }
            guard scanner.consume(0x22) else { throw WireError(code, offset: start, "unterminated entity tag") }
        } else {
            opaque = scanner.consume { $0 != 0x22 && $0 != 0x20 && $0 != 0x09 }
            guard !opaque.isEmpty else { throw WireError(code, offset: start, "empty entity tag") }
        }
        scanner.skipWhitespace()
        guard scanner.isAtEnd else {
            throw WireError(code, offset: scanner.index, "unexpected bytes after the entity tag")
        }
    }

    /// The field value: `"opaque"` or `W/"opaque"`.
    public var headerValue: String { (isWeak ? "W/" : "") + "\"" + opaque + "\"" }

    public var description: String { headerValue }

    /// Strong comparison (RFC 9110 §8.8.3.2): both tags strong and their opaque parts identical.
    /// Required for `If-Range` and for resuming a download.
    public func strongMatches(_ other: EntityTag) -> Bool {
        !isWeak && !other.isWeak && opaque == other.opaque
    }

    /// Weak comparison (RFC 9110 §8.8.3.2): opaque parts identical, weakness ignored.
    public func weakMatches(_ other: EntityTag) -> Bool { opaque == other.opaque }
}
