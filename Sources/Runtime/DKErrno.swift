import Glibc

/// A POSIX error number (`errno`), with Swift names for the values this module reacts to.
///
/// The C name of each constant is given in its doc comment. `EINTR` is retried inside the syscall
/// wrappers (``retryingEINTR(_:_:)``, the one place that retries it) and the socket wrappers report
/// `EAGAIN`/`EWOULDBLOCK` as "would block" rather than as an error, so callers only ever see errors
/// that mean something.
///
/// `Codable` as its raw C value (a bare number), so a stored or sent error number keeps the form an
/// `Int32` had.
public struct DKErrno: Error, RawRepresentable, Hashable, Codable, Sendable, CustomStringConvertible {
    /// The raw C value.
    public var rawValue: Int32

    /// Creates an error number from its raw C value.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`. Read it immediately after the failing call, with
    /// nothing in between that could allocate or release objects (which may overwrite `errno`).
    @inline(__always)
    package static var current: DKErrno { DKErrno(rawValue: Glibc.errno) }

    /// `EINTR`: a signal interrupted the call before it did anything; retried by the wrappers.
    public static let interrupted = DKErrno(rawValue: EINTR)
    /// `EAGAIN` / `EWOULDBLOCK`: the non-blocking call would have to wait.
    public static let wouldBlock = DKErrno(rawValue: EAGAIN)
    /// `EINPROGRESS`: a non-blocking `connect(2)` has started and will finish later.
    public static let inProgress = DKErrno(rawValue: EINPROGRESS)
    /// `ECONNREFUSED`: nothing listens on the remote port.
    public static let connectionRefused = DKErrno(rawValue: ECONNREFUSED)
    /// `ECONNRESET`: the peer reset the connection.
    public static let connectionReset = DKErrno(rawValue: ECONNRESET)
    /// `ECONNABORTED`: the connection was aborted locally.
    public static let connectionAborted = DKErrno(rawValue: ECONNABORTED)
    /// `EPIPE`: writing to a connection whose peer has closed it.
    public static let brokenPipe = DKErrno(rawValue: EPIPE)
    /// `ETIMEDOUT`: the kernel gave up on the connection.
    public static let timedOut = DKErrno(rawValue: ETIMEDOUT)
    /// `ENETUNREACH`: no route to the network.
    public static let networkUnreachable = DKErrno(rawValue: ENETUNREACH)
    /// `ENETDOWN`: the network is down.
    public static let networkDown = DKErrno(rawValue: ENETDOWN)
    /// `EHOSTUNREACH`: no route to the host.
    public static let hostUnreachable = DKErrno(rawValue: EHOSTUNREACH)
    /// `EHOSTDOWN`: the host is down.
    public static let hostDown = DKErrno(rawValue: EHOSTDOWN)
    /// `EADDRNOTAVAIL`: no local address or port is available for the connection.
    public static let addressNotAvailable = DKErrno(rawValue: EADDRNOTAVAIL)
    /// `ENOTCONN`: the socket is not connected.
    public static let notConnected = DKErrno(rawValue: ENOTCONN)

    /// `ENOENT`: no such file or directory.
    public static let noSuchFile = DKErrno(rawValue: ENOENT)
    /// `EEXIST`: the file exists.
    public static let fileExists = DKErrno(rawValue: EEXIST)
    /// `EACCES`: the permissions do not allow it.
    public static let permissionDenied = DKErrno(rawValue: EACCES)
    /// `EPERM`: the operation is not permitted.
    public static let notPermitted = DKErrno(rawValue: EPERM)
    /// `EIO`: an input/output error (also what a write that wrote nothing is reported as).
    public static let ioError = DKErrno(rawValue: EIO)
    /// `ENOSPC`: no space left on the device.
    public static let noSpace = DKErrno(rawValue: ENOSPC)
    /// `EDQUOT`: the user's disk quota is exceeded.
    public static let quotaExceeded = DKErrno(rawValue: EDQUOT)

    /// Whether the disk (or the user's quota on it) is full: `ENOSPC` or `EDQUOT`.
    public var isDiskFull: Bool { self == .noSpace || self == .quotaExceeded }

    /// Whether this error means a connection attempt or an established connection failed for a
    /// reason that may go away on retry (refused, unreachable, reset, timed out).
    public var isTransientNetworkFailure: Bool {
        switch self {
        case .connectionRefused, .connectionReset, .connectionAborted, .brokenPipe, .timedOut,
            .networkUnreachable, .networkDown, .hostUnreachable, .hostDown, .addressNotAvailable,
            .notConnected:
            return true
        default:
            return false
        }
    }

    /// The C library's message for this error (`strerror`), for example "Connection refused".
    public var description: String {
        // glibc's strerror returns a static string for every known error number, so this is safe to
        // call from several threads at once.
        guard let message = strerror(rawValue) else { return "errno \(rawValue)" }
        return String(cString: message)
    }
}
