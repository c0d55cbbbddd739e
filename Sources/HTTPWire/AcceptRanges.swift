extension WireError.Code {
    /// An `Accept-Ranges` value holds something other than a comma-separated list of tokens.
    public static let malformedAcceptRanges = WireError.Code("malformedAcceptRanges")
}

/// The `Accept-Ranges` field (RFC 9110 §14.3): the range units a server supports, or `none`.
public struct AcceptRanges: Sendable, Hashable {
    /// The units as given, in order (for example `["bytes"]` or `["none"]`).
    public var units: [String]

    /// Creates a value from units.
    public init(units: [String]) { self.units = units }

    /// Parses `Accept-Ranges = 1#range-unit`. Empty list elements are ignored and an empty value
    /// yields no units (RFC 9110 §5.6.1 asks recipients to tolerate empty elements).
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedAcceptRanges`` when an element is
    ///   not a token.
    public init(parsing value: String) throws(WireError) {
        var scanner = GrammarScanner(value)
        var units: [String] = []
        while true {
            scanner.skipWhitespace()
            if scanner.isAtEnd { break }
            if scanner.consume(0x2C) { continue }
            guard let unit = scanner.token() else {
                throw WireError(.malformedAcceptRanges, offset: scanner.index, "range unit is not a token")
            }
            units.append(unit)
            scanner.skipWhitespace()
            guard scanner.isAtEnd || scanner.consume(0x2C) else {
                throw WireError(.malformedAcceptRanges, offset: scanner.index, "expected ',' between units")
            }
        }
        self.units = units
    }

    /// Whether `bytes` is among the units (case-insensitively, RFC 9110 §14.1).
    public var acceptsBytes: Bool { units.contains { DKHTTPHeaders.namesEqual($0, "bytes") } }

    /// Whether the server says it supports no ranges: the only unit is `none`.
    public var isNone: Bool {
        !units.isEmpty && units.allSatisfy { DKHTTPHeaders.namesEqual($0, "none") }
    }

    /// The field value: units joined by `", "`.
    public var headerValue: String { units.joined(separator: ", ") }
}
