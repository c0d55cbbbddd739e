import Glibc

/// A system call that failed: which call, and its error number. What ``retryingEINTR(_:_:)`` throws.
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The C name of the call, for example `"open"`.
    public var call: String
    /// Its error number (never `EINTR`, which is retried).
    public var errno: DKErrno

    /// Creates the error for `call` failing with `errno`.
    public init(_ call: String, errno: DKErrno) {
        self.call = call
        self.errno = errno
    }

    /// For example "open: No such file or directory (errno 2)".
    public var description: String { "\(call): \(errno) (errno \(errno.rawValue))" }
}

/// Calls `body` until it does not fail with `EINTR`, returning its result and the `errno` captured
/// immediately after a `-1` return: the one place that retries an interrupted call (a signal arrived
/// before the call had any effect, POSIX). Use it for calls that return `-1` on failure; `close(2)` is
/// never retried (on Linux the descriptor is gone either way, and a retry could close a reused number).
@inline(__always)
package func retryingInterrupts<Result: BinaryInteger>(_ body: () -> Result) -> (result: Result, errno: DKErrno?) {
    while true {
        let result = body()
        if result != -1 { return (result, nil) }
        let error = DKErrno.current
        if error == .interrupted { continue }
        return (result, error)
    }
}

/// Calls `body` (a system call named `call`) until it does not fail with `EINTR`; throws the typed error
/// naming the call when it fails otherwise.
@inline(__always)
package func retryingEINTR<Result: BinaryInteger>(
    _ call: @autoclosure () -> String, _ body: () -> Result
) throws(SystemCallError) -> Result {
    let (result, error) = retryingInterrupts(body)
    if let error { throw SystemCallError(call(), errno: error) }
    return result
}
