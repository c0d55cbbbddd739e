import Glibc

/// The outcome of a non-blocking system call that transfers bytes.
enum SyscallResult: Equatable {
    /// The call transferred this many bytes (0 from a read means end of stream).
    case processed(Int)
    /// The call would block (`EAGAIN`/`EWOULDBLOCK`); wait with `poll(2)` and try again.
    case wouldBlock
    /// The call failed with this error (never `EINTR`, which is retried).
    case failed(DKErrno)
}

/// Thin wrappers over the socket system calls this module uses, on non-blocking descriptors.
///
/// Each wrapper retries `EINTR`, reports `EAGAIN` as ``SyscallResult/wouldBlock`` and captures
/// `errno` immediately after the call. Descriptor ownership lives in ``Connection``; these functions
/// never close anything except in ``makeStreamSocket(family:)`` failure paths.
enum Socket {
    /// The events a caller waits for with ``poll(_:for:deadline:)``.
    struct Events: OptionSet, Sendable {
        let rawValue: Int16
        /// `POLLIN`: bytes (or EOF) can be read.
        static let readable = Events(rawValue: Int16(POLLIN))
        /// `POLLOUT`: bytes can be written (or a non-blocking connect finished).
        static let writable = Events(rawValue: Int16(POLLOUT))
    }

    /// Creates a non-blocking, close-on-exec TCP socket. Wraps `socket(2)` with `SOCK_NONBLOCK |
    /// SOCK_CLOEXEC`, then sets `TCP_NODELAY` (requests are written in one piece; Nagle would only
    /// delay them).
    static func makeStreamSocket(family: Int32) throws(TransportError) -> Int32 {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let (fd, error) = retryingInterrupts { socket(family, type, Int32(IPPROTO_TCP)) }
        if let error {
            throw TransportError(
                .systemCall, errorNumber: error, operation: "socket", detail: "could not create a socket: \(error)")
        }
        var one: Int32 = 1
        // Failure to set TCP_NODELAY only costs latency; it is not worth failing the connection.
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    /// Starts a non-blocking `connect(2)`.
    /// - Returns: `nil` when connected at once or when the connection is in progress (finish with
    ///   ``poll(_:for:deadline:)`` for `.writable` then ``pendingError(_:)``), else the error.
    static func startConnect(_ fd: Int32, to address: SocketAddress) -> DKErrno? {
        let (_, error) = address.withSockAddr { pointer, length in
            retryingInterrupts { Glibc.connect(fd, pointer, length) }
        }
        // EINTR during connect leaves the connection in progress (it is not restartable); the
        // wrapper's retry then reports EALREADY, which means the same.
        guard let error, error != .inProgress, error.rawValue != EALREADY else { return nil }
        return error
    }

    /// Reads and clears the socket's pending error (`getsockopt(SO_ERROR)`), the outcome of a
    /// non-blocking connect. Returns `nil` when there is none.
    static func pendingError(_ fd: Int32) -> DKErrno? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) != 0 { return DKErrno.current }
        return value == 0 ? nil : DKErrno(rawValue: value)
    }

    /// Waits until `fd` is ready for `events`, the deadline passes, or the descriptor is shut down.
    /// Wraps `poll(2)`; retries `EINTR` with the remaining time.
    /// - Returns: The returned events (`POLLHUP`/`POLLERR` included; the next I/O call reports the
    ///   actual error), or `nil` when the deadline passed first.
    static func poll(_ fd: Int32, for events: Events, deadline: Deadline) -> Result<Int16?, DKErrno> {
        var entry = pollfd(fd: fd, events: events.rawValue, revents: 0)
        while true {
            // Each retry after EINTR waits only for the time left.
            let (count, error) = retryingInterrupts { Glibc.poll(&entry, 1, deadline.remainingMilliseconds) }
            if let error { return .failure(error) }
            if count > 0 { return .success(entry.revents) }
            // poll may wake up to a millisecond early on some kernels; only report a timeout once the
            // deadline really passed.
            if deadline.hasPassed { return .success(nil) }
        }
    }

    /// Whether `fd` has input or an end-of-stream/error condition right now (`poll` with a zero
    /// timeout).
    static func isReadableNow(_ fd: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let (count, error) = retryingInterrupts { Glibc.poll(&entry, 1, 0) }
        return error != nil || (count > 0 && entry.revents != 0)
    }

    /// Reads up to `buffer.count` bytes. Wraps `recv(2)`.
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> SyscallResult {
        let (count, error) = retryingInterrupts { recv(fd, buffer.baseAddress, buffer.count, 0) }
        if let error { return error == .wouldBlock ? .wouldBlock : .failed(error) }
        return .processed(count)
    }

    /// Writes up to `bytes.count` bytes. Wraps `send(2)` with `MSG_NOSIGNAL`, so a closed peer yields
    /// `EPIPE` rather than killing the process with `SIGPIPE`.
    static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> SyscallResult {
        let (count, error) = retryingInterrupts { Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
        if let error { return error == .wouldBlock ? .wouldBlock : .failed(error) }
        return .processed(count)
    }

    /// The local port the socket is bound to (`getsockname`), or 0 if unknown.
    static func localPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard status == 0 else { return 0 }
        return withUnsafePointer(to: storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress($0, length: length).port }
        }
    }
}
