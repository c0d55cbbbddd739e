/// An error found while reading or writing HTTP/1.1 bytes or one of its header grammars.
///
/// Public errors are extensible: a struct wrapping a ``Code`` with static members, so new causes can be
/// added without breaking callers that switch over them. `offset` is the byte offset into the input at
/// which the problem was detected, when that is meaningful.
public struct WireError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The category of a wire error. Compare against the static members (`.malformedStatusLine`, …).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable, payload-free name for logs and metrics.
        public let name: String
        /// Creates a code. Codes are declared as static members next to the grammar that raises them.
        public init(_ name: String) { self.name = name }
        public var description: String { name }
    }

    /// What went wrong.
    public var code: Code
    /// Byte offset into the parsed input where the problem was detected, if known.
    public var offset: Int?
    /// A human-readable explanation that names the cause.
    public var detail: String

    /// Creates an error.
    public init(_ code: Code, offset: Int? = nil, _ detail: String) {
        self.code = code
        self.offset = offset
        self.detail = detail
    }

    /// A payload-free description for logs and metrics.
    public var shortDescription: String { code.name }

    public var description: String {
        if let offset { return "\(code.name) at byte \(offset): \(detail)" }
        return "\(code.name): \(detail)"
    }
}
