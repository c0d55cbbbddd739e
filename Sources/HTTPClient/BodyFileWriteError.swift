import Glibc

/// A failed write of a spliced body into the destination file (for example `ENOSPC`).
public struct BodyFileWriteError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The error number from `splice(2)` into the file.
    public var errorNumber: DKErrno

    /// ``errorNumber``'s raw C value.
    @available(*, deprecated, renamed: "errorNumber")
    public var errno: Int32 {
        get { errorNumber.rawValue }
        set { errorNumber = DKErrno(rawValue: newValue) }
    }

    public var description: String {
        "splice into the file failed: \(errorNumber) (errno \(errorNumber.rawValue))"
    }
}
