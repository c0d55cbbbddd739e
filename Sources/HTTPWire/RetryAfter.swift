extension WireError.Code {
    /// A `Retry-After` value is neither a non-negative number of seconds nor an HTTP-date.
    public static let malformedRetryAfter = WireError.Code("malformedRetryAfter")
}

/// The `Retry-After` field (RFC 9110 §10.2.3): a delay in seconds or a date.
public enum RetryAfter: Sendable, Hashable {
    /// `delay-seconds`: wait this many seconds.
    case seconds(Int64)
    /// An HTTP-date: wait until then.
    case date(HTTPDate)

    /// Parses `Retry-After = HTTP-date / delay-seconds`.
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedRetryAfter`` for anything else,
    ///   including a negative, fractional or overflowing number.
    public init(parsing value: String) throws(WireError) {
        let text = value.trimmingHTTPWhitespace()
        var scanner = GrammarScanner(text)
        if let seconds = try scanner.decimal(.malformedRetryAfter, what: "delay-seconds") {
            guard scanner.isAtEnd else {
                throw WireError(.malformedRetryAfter, offset: scanner.index, "unexpected bytes after delay-seconds")
            }
            self = .seconds(seconds)
            return
        }
        do {
            self = .date(try HTTPDate(parsing: text))
        } catch {
            throw WireError(.malformedRetryAfter, offset: error.offset, "neither delay-seconds nor an HTTP-date")
        }
    }

    /// Seconds to wait from `now`; never negative (a date in the past means retry at once).
    /// - Parameter now: The current time in seconds since 1970.
    public func delay(fromSecondsSince1970 now: Int64) -> Int64 {
        switch self {
        case .seconds(let seconds):
            return max(0, seconds)
        case .date(let date):
            let (difference, overflow) = date.secondsSince1970.subtractingReportingOverflow(now)
            if overflow { return date.secondsSince1970 > now ? Int64.max : 0 }
            return max(0, difference)
        }
    }

    /// The field value: the number of seconds, or an IMF-fixdate.
    public var headerValue: String {
        switch self {
        case .seconds(let seconds): String(seconds)
        case .date(let date): date.headerValue
        }
    }
}
