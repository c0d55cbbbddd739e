extension WireError.Code {
    /// A `Content-Range` value is malformed, names a unit other than `bytes`, overflows `Int64`, or
    /// describes an impossible range (last < first, or last at or past the complete length).
    public static let malformedContentRange = WireError.Code("malformedContentRange")
}

/// The `Content-Range` field for the `bytes` unit (RFC 9110 §14.4).
public enum ContentRange: Sendable, Hashable {
    /// `bytes first-last/complete` or `bytes first-last/*` (complete length unknown): the part
    /// carried by a 206 response. Offsets are zero-based and inclusive.
    case satisfied(first: Int64, last: Int64, completeLength: Int64?)
    /// `bytes */complete`: sent with 416 to give the current length.
    case unsatisfied(completeLength: Int64)

    /// Parses a `Content-Range` value.
    ///
    /// Tolerates the spellings curl accepts: the unit case-insensitive or missing, `=` or `:` after it
    /// (`bytes=0-9/10`), no space (`bytes0-9/10`), and extra OWS anywhere between parts. Strict with
    /// numbers: no overflow, last >= first, and last < complete length when it is known.
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedContentRange``.
    public init(parsing value: String) throws(WireError) {
        var scanner = GrammarScanner(value)
        let code = WireError.Code.malformedContentRange
        scanner.skipWhitespace()
        if let byte = scanner.current, GrammarCharacters.isAlpha(byte) {
            guard scanner.consumeCaseInsensitive("bytes") else {
                throw WireError(code, offset: scanner.index, "range unit is not 'bytes'")
            }
            scanner.skipWhitespace()
            if scanner.consume(0x3D) || scanner.consume(0x3A) { scanner.skipWhitespace() }
        }
        if scanner.consume(0x2A) {
            scanner.skipWhitespace()
            guard scanner.consume(0x2F) else { throw WireError(code, offset: scanner.index, "expected '/'") }
            scanner.skipWhitespace()
            guard let complete = try scanner.decimal(code, what: "complete length") else {
                throw WireError(code, offset: scanner.index, "expected complete length after '*/'")
            }
            try Self.expectEnd(&scanner)
            self = .unsatisfied(completeLength: complete)
            return
        }
        let start = scanner.index
        guard let first = try scanner.decimal(code, what: "first position") else {
            throw WireError(code, offset: scanner.index, "expected first position")
        }
        scanner.skipWhitespace()
        guard scanner.consume(0x2D) else { throw WireError(code, offset: scanner.index, "expected '-'") }
        scanner.skipWhitespace()
        guard let last = try scanner.decimal(code, what: "last position") else {
            throw WireError(code, offset: scanner.index, "expected last position")
        }
        scanner.skipWhitespace()
        guard scanner.consume(0x2F) else { throw WireError(code, offset: scanner.index, "expected '/'") }
        scanner.skipWhitespace()
        var complete: Int64?
        if !scanner.consume(0x2A) {
            guard let value = try scanner.decimal(code, what: "complete length") else {
                throw WireError(code, offset: scanner.index, "expected complete length or '*'")
            }
            complete = value
        }
        try Self.expectEnd(&scanner)
        // RFC 9110 §14.4: a range with last < first, or last >= complete-length, is invalid.
        guard first <= last else { throw WireError(code, offset: start, "reversed range \(first)-\(last)") }
        if let complete, last >= complete {
            throw WireError(code, offset: start, "last position \(last) is not below complete length \(complete)")
        }
        // Keeps `length` (last - first + 1) representable.
        guard last < Int64.max else { throw WireError(code, offset: start, "range length overflows Int64") }
        self = .satisfied(first: first, last: last, completeLength: complete)
    }

    private static func expectEnd(_ scanner: inout GrammarScanner) throws(WireError) {
        scanner.skipWhitespace()
        guard scanner.isAtEnd else {
            throw WireError(.malformedContentRange, offset: scanner.index, "unexpected bytes after the range")
        }
    }

    /// The number of bytes in a satisfied range (`last - first + 1`), or `nil` for an unsatisfied
    /// one or a range whose length is not representable.
    public var length: Int64? {
        guard case .satisfied(let first, let last, _) = self else { return nil }
        let (difference, overflow1) = last.subtractingReportingOverflow(first)
        let (length, overflow2) = difference.addingReportingOverflow(1)
        return overflow1 || overflow2 || length <= 0 ? nil : length
    }

    /// The complete length of the representation, when the server stated it.
    public var completeLength: Int64? {
        switch self {
        case .satisfied(_, _, let completeLength): completeLength
        case .unsatisfied(let completeLength): completeLength
        }
    }

    /// The canonical field value: `bytes 0-499/1234`, `bytes 0-499/*` or `bytes */1234`.
    public var headerValue: String {
        switch self {
        case .satisfied(let first, let last, let complete): "bytes \(first)-\(last)/\(complete.map(String.init) ?? "*")"
        case .unsatisfied(let complete): "bytes */\(complete)"
        }
    }
}
