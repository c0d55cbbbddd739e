import Glibc

/// A failed write of a spliced body into the destination file (for example `ENOSPC`).
public struct BodyFileWriteError: Error, Hashable, Sendable, CustomStringConvertible {
    /// `errno` from `splice(2)` into the file.
    public var errno: Int32

    /// ``errno`` typed.
    public var errorNumber: DKErrno { DKErrno(rawValue: errno) }

    public var description: String {
        "splice into the file failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}
