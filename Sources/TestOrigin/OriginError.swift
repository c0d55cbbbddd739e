import Glibc

/// An error raised by the test origin, the nginx harness or a helper process.
public struct OriginError: Error, Sendable, CustomStringConvertible {
    /// What failed, for example `"bind"` or `"nginx did not start"`.
    public var operation: String
    /// The `errno` value captured right after the failing call, when the failure was a system call.
    public var errnoValue: Int32?
    /// Extra detail (for nginx: its error log).
    public var detail: String

    public init(_ operation: String, errno errnoValue: Int32? = nil, detail: String = "") {
        self.operation = operation
        self.errnoValue = errnoValue
        self.detail = detail
    }

    /// An error for the system call `operation` that just failed, carrying the current `errno`.
    static func system(_ operation: String) -> OriginError {
        let code = errno
        return OriginError(operation, errno: code, detail: String(cString: strerror(code)))
    }

    public var description: String {
        var text = "TestOrigin: \(operation) failed"
        if let errnoValue { text += " (errno \(errnoValue))" }
        if !detail.isEmpty { text += ": \(detail)" }
        return text
    }
}
