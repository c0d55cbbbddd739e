extension WireError.Code {
    /// A `Range` field value is not `bytes=` followed by a list of byte ranges (RFC 9110 §14.2), or a
    /// number in it overflows, or a range is reversed.
    public static let malformedRangeHeader = WireError.Code("malformedRangeHeader")
}

/// One byte range of a `Range` request (RFC 9110 §14.1.2). Offsets are zero-based and inclusive.
public enum ByteRangeSpec: Sendable, Hashable {
    /// `first-last`: bytes `first` through `last`, inclusive.
    case closed(first: Int64, last: Int64)
    /// `first-`: from `first` to the end of the representation.
    case from(Int64)
    /// `-length`: the last `length` bytes.
    case suffix(length: Int64)

    /// The range as written in a `Range` value, without the unit: `0-499`, `500-`, `-500`.
    public var headerValue: String {
        switch self {
        case .closed(let first, let last): "\(first)-\(last)"
        case .from(let first): "\(first)-"
        case .suffix(let length): "-\(length)"
        }
    }

    /// Whether the numbers are sane: non-negative, and `first <= last` for a closed range.
    public var isValid: Bool {
        switch self {
        case .closed(let first, let last): first >= 0 && first <= last
        case .from(let first): first >= 0
        case .suffix(let length): length >= 0
        }
    }

    /// The bytes this range selects from a representation of `completeLength` bytes, or `nil` when it
    /// is unsatisfiable (RFC 9110 §14.1.2: a first position at or past the end, or a zero suffix).
    /// A last position past the end is clamped to the end.
    /// - Parameter completeLength: The representation's length in bytes.
    /// - Returns: The inclusive range of offsets selected.
    public func bounds(forCompleteLength completeLength: Int64) -> ClosedRange<Int64>? {
        guard completeLength > 0, isValid else { return nil }
        switch self {
        case .closed(let first, let last):
            guard first < completeLength else { return nil }
            return first...min(last, completeLength - 1)
        case .from(let first):
            guard first < completeLength else { return nil }
            return first...(completeLength - 1)
        case .suffix(let length):
            guard length > 0 else { return nil }
            return max(0, completeLength - length)...(completeLength - 1)
        }
    }
}

/// The `Range` request field for the `bytes` unit (RFC 9110 §14.2): `bytes=0-499`, `bytes=500-`,
/// `bytes=-500`, `bytes=0-1,5-9`.
public struct RangeHeader: Sendable, Hashable {
    /// The requested ranges, in order; never empty.
    public var ranges: [ByteRangeSpec]

    /// Creates a `Range` value.
    /// - Parameter ranges: At least one range, each ``ByteRangeSpec/isValid``. Anything else is a
    ///   programming error and traps.
    public init(ranges: [ByteRangeSpec]) {
        precondition(!ranges.isEmpty && ranges.allSatisfy(\.isValid), "invalid byte ranges \(ranges)")
        self.ranges = ranges
    }

    /// Parses a `Range` value.
    ///
    /// `ranges-specifier = range-unit "=" range-set` with the unit `bytes` case-insensitively, OWS
    /// around `=` and list elements, and empty list elements ignored (RFC 9110 §5.6.1).
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedRangeHeader`` for another unit,
    ///   bad syntax, a reversed range (`5-1`) or a number that overflows `Int64`.
    public init(parsing value: String) throws(WireError) {
        var scanner = GrammarScanner(value)
        let code = WireError.Code.malformedRangeHeader
        scanner.skipWhitespace()
        guard scanner.consumeCaseInsensitive("bytes") else {
            throw WireError(code, offset: scanner.index, "range unit is not 'bytes'")
        }
        scanner.skipWhitespace()
        guard scanner.consume(0x3D) else { throw WireError(code, offset: scanner.index, "expected '='") }
        var ranges: [ByteRangeSpec] = []
        while true {
            scanner.skipWhitespace()
            if scanner.isAtEnd { break }
            if scanner.consume(0x2C) { continue }
            let start = scanner.index
            let first = try scanner.decimal(code, what: "range start")
            guard scanner.consume(0x2D) else { throw WireError(code, offset: scanner.index, "expected '-'") }
            let last = try scanner.decimal(code, what: "range end")
            switch (first, last) {
            case (let first?, let last?):
                guard first <= last else {
                    throw WireError(code, offset: start, "reversed range \(first)-\(last)")
                }
                ranges.append(.closed(first: first, last: last))
            case (let first?, nil):
                ranges.append(.from(first))
            case (nil, let length?):
                ranges.append(.suffix(length: length))
            case (nil, nil):
                throw WireError(code, offset: start, "'-' without numbers")
            }
            scanner.skipWhitespace()
            guard scanner.isAtEnd || scanner.consume(0x2C) else {
                throw WireError(code, offset: scanner.index, "expected ',' between ranges")
            }
        }
        guard !ranges.isEmpty else { throw WireError(code, offset: scanner.index, "no ranges") }
        self.ranges = ranges
    }

    /// The field value: `bytes=` and the ranges joined by commas.
    public var headerValue: String {
        "bytes=" + ranges.map(\.headerValue).joined(separator: ",")
    }
}
