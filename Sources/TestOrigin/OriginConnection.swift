import Foundation
import Glibc
import HTTPWire

/// The descriptor of one accepted connection, shared between its connection thread (which reads,
/// writes and eventually closes it) and the origin (which may interrupt it during shutdown).
///
/// `@unchecked Sendable`: `fd` is immutable; `isClosed` is only read or written under `lock`. The only
/// cross-thread operation, ``interrupt()``, calls `shutdown(2)` under the lock and only while the
/// descriptor is still open, and ``close(reset:)`` closes under the same lock, so a shutdown can never hit
/// a descriptor number that was closed and reused by someone else.
final class SocketHandle: @unchecked Sendable {
    let fd: Int32
    private let lock = NSLock()
    private var isClosed = false

    init(fd: Int32) { self.fd = fd }

    /// Wakes any blocked `recv`/`send` on the connection (they return 0 or `EPIPE`). Any thread.
    func interrupt() {
        lock.lock()
        defer { lock.unlock() }
        if !isClosed { Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Closes the descriptor once; with `reset`, sets `SO_LINGER {1, 0}` first so close sends an RST.
    func close(reset: Bool) {
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { return }
        isClosed = true
        if reset {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        }
        Glibc.close(fd)
    }

    var closed: Bool {
        lock.lock()
        defer { lock.unlock() }
        return isClosed
    }
}

/// One accepted client connection of a ``FaultOrigin``, handed to `.script` routes for raw control.
///
/// A connection belongs to the thread that serves it; do not share it with other threads. Writes block
/// until the kernel accepts the bytes. After a script returns, the origin closes the connection unless
/// the script set ``keepsAlive`` to `true` (then the next request on it is read and routed as usual).
public final class OriginConnection {
    /// The connection's number within its origin, from 1 in accept order.
    public let id: Int
    /// Whether the origin should keep reading requests after a script returns. Defaults to `false`.
    public var keepsAlive = false

    let handle: SocketHandle
    private let origin: OriginState
    private var pending: [UInt8] = []
    private var pendingStart = 0
    private var receiveBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    /// The reusable body buffer (256 KiB), allocated on first use.
    private var bodyBuffer: UnsafeMutableRawBufferPointer?

    static let bodyBufferSize = 256 * 1024
    static let maxRequestHeadBytes = 64 * 1024

    init(id: Int, handle: SocketHandle, origin: OriginState) {
        self.id = id
        self.handle = handle
        self.origin = origin
    }

    deinit {
        bodyBuffer?.deallocate()
    }

    /// Waits up to `seconds` for bytes the client sent after the request being answered (a request sent
    /// ahead: HTTP/1.1 pipelining) and tells whether any arrived. They stay unread for the next request.
    /// A client that closed or reset the connection (a segment worker dropping a response whose tail was
    /// stolen) sent no bytes: that is `false`.
    public func waitForPipelinedInput(seconds: Double) -> Bool {
        if pendingStart < pending.count { return true }
        var descriptor = pollfd(fd: handle.fd, events: Int16(POLLIN), revents: 0)
        guard Glibc.poll(&descriptor, 1, Int32(seconds * 1000)) > 0 else { return false }
        var byte: UInt8 = 0
        return Glibc.recv(handle.fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) > 0
    }

    /// Whether the connection has been closed or reset (by the script or the origin).
    public var isClosed: Bool { handle.closed }

    // MARK: Writing

    /// Writes all of `bytes`.
    ///
    /// - Throws: ``OriginError`` when the peer has gone (`EPIPE`, `ECONNRESET`) or the connection is closed.
    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write(raw: $0) }
    }

    /// Writes the UTF-8 bytes of `string` (use `\r\n` line ends for HTTP).
    public func write(_ string: String) throws {
        try write(Array(string.utf8))
    }

    /// Writes `bytes` in pieces of `pieceSize` bytes with a pause between pieces (a stuttering server).
    public func writeStuttered(_ bytes: [UInt8], pieceSize: Int = 1, pause seconds: Double = 0.001) throws {
        precondition(pieceSize > 0, "pieceSize must be positive")
        var start = 0
        while start < bytes.count {
            let end = min(start + pieceSize, bytes.count)
            try write(Array(bytes[start..<end]))
            start = end
            if start < bytes.count { sleep(seconds: seconds) }
        }
    }

    /// Writes ``TestPattern`` bytes for absolute offsets `offset ..< offset + count` with the given seed,
    /// through the reusable 256 KiB buffer.
    public func writePattern(offset: Int64, count: Int64, seed: UInt64) throws {
        var sent: Int64 = 0
        while sent < count {
            let length = Int(min(count - sent, Int64(Self.bodyBufferSize)))
            let window = scratch(length)
            TestPattern.fill(window, offset: offset + sent, seed: seed)
            try write(raw: UnsafeRawBufferPointer(window))
            sent += Int64(length)
        }
    }

    /// Sends a FIN (`shutdown(SHUT_WR)`): the peer sees end of stream, reading is still possible.
    public func closeWrite() {
        if !handle.closed { Glibc.shutdown(handle.fd, Int32(SHUT_WR)) }
    }

    /// Closes the connection cleanly (FIN).
    public func close() {
        handle.close(reset: false)
    }

    /// Resets the connection: waits (at most `drainTimeout` seconds, less if the origin shuts down) until
    /// the bytes already written have left the send queue, so the peer receives them, then closes with
    /// `SO_LINGER {1, 0}`, which sends an RST instead of a FIN. The peer's next read fails with
    /// `ECONNRESET`.
    ///
    /// The wait is long because an RST discards what is still queued. In a CI run under ThreadSanitizer
    /// five tests at once kept only 128,000 bytes of a `resetAfter(bytes: 1 MiB)` response and failed,
    /// as they expect the whole first MiB; inferred, not traced: their clients read nothing for longer
    /// than the earlier bound of 2 s.
    public func reset(drainTimeout: Double = 30) {
        guard !handle.closed else { return }
        waitForSendQueueToDrain(timeout: drainTimeout)
        handle.close(reset: true)
    }

    /// Sleeps for `seconds`, returning early when the origin shuts down.
    public func sleep(seconds: Double) {
        origin.sleep(seconds: seconds)
    }

    func write(raw bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let result = Glibc.send(handle.fd, base + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if result < 0 {
                if errno == EINTR { continue }
                throw OriginError.system("send")
            }
            if result == 0 { throw OriginError("send", detail: "connection closed") }
            offset += result
        }
    }

    /// A window of the reusable body buffer of `count` bytes (≤ 256 KiB).
    func scratch(_ count: Int) -> UnsafeMutableRawBufferPointer {
        precondition(count <= Self.bodyBufferSize, "scratch windows are at most 256 KiB")
        let buffer: UnsafeMutableRawBufferPointer
        if let existing = bodyBuffer {
            buffer = existing
        } else {
            buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.bodyBufferSize, alignment: 16)
            bodyBuffer = buffer
        }
        return UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
    }

    private func waitForSendQueueToDrain(timeout: Double) {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline, !origin.shuttingDown {
            var unsent: Int32 = 0
            // TIOCOUTQ (== SIOCOUTQ) on a TCP socket: bytes not yet acknowledged by the peer.
            guard ioctl(handle.fd, UInt(TIOCOUTQ), &unsent) == 0, unsent > 0 else { return }
            usleep(500)
        }
    }

    // MARK: Reading requests

    /// Reads the next request head from the connection.
    ///
    /// - Returns: The parsed head, or `nil` at a clean end of stream between requests.
    /// - Throws: ``RequestHeadError`` for a malformed or oversized head, ``OriginError`` for socket errors
    ///   or end of stream inside a head.
    func readRequestHead() throws -> ParsedRequestHead? {
        while true {
            if let end = headEnd() {
                let head = Array(pending[pendingStart..<end.headEnd])
                pendingStart = end.next
                if pendingStart == pending.count {
                    pending.removeAll(keepingCapacity: true)
                    pendingStart = 0
                }
                return try ParsedRequestHead(head)
            }
            if pending.count - pendingStart > Self.maxRequestHeadBytes {
                throw RequestHeadError(status: 431, reason: "request head larger than \(Self.maxRequestHeadBytes) bytes")
            }
            if try receiveMore() == 0 {
                if pending.count == pendingStart { return nil }
                throw OriginError("recv", detail: "connection closed inside a request head")
            }
        }
    }

    /// Discards `count` bytes of request body.
    func discard(_ count: Int64) throws {
        var remaining = count
        while remaining > 0 {
            let available = pending.count - pendingStart
            if available == 0 {
                if try receiveMore() == 0 { throw OriginError("recv", detail: "connection closed inside a request body") }
                continue
            }
            let take = Int(min(Int64(available), remaining))
            pendingStart += take
            remaining -= Int64(take)
        }
    }

    /// Finds the end of the head: CRLF CRLF, tolerating bare LF LF.
    private func headEnd() -> (headEnd: Int, next: Int)? {
        // Skip empty lines before a request line (RFC 9112 §2.2 allows at least one).
        while pendingStart < pending.count, pending[pendingStart] == 0x0D || pending[pendingStart] == 0x0A {
            pendingStart += 1
        }
        var index = pendingStart
        while index < pending.count {
            if pending[index] == 0x0A {
                if index + 1 < pending.count, pending[index + 1] == 0x0A { return (index + 1, index + 2) }
                if index + 2 < pending.count, pending[index + 1] == 0x0D, pending[index + 2] == 0x0A {
                    return (index + 1, index + 3)
                }
            }
            index += 1
        }
        return nil
    }

    private func receiveMore() throws -> Int {
        if pendingStart > 0 && pendingStart == pending.count {
            pending.removeAll(keepingCapacity: true)
            pendingStart = 0
        }
        while true {
            let result = receiveBuffer.withUnsafeMutableBytes { Glibc.recv(handle.fd, $0.baseAddress, $0.count, 0) }
            if result < 0 {
                if errno == EINTR { continue }
                throw OriginError.system("recv")
            }
            pending.append(contentsOf: receiveBuffer[0..<result])
            return result
        }
    }
}

/// A malformed request head; answered with `status` and the connection closed.
struct RequestHeadError: Error {
    var status: Int
    var reason: String
}

/// A request line plus header fields, parsed leniently but safely.
struct ParsedRequestHead {
    var method: String
    var target: String
    var version: String
    var headers: DKHTTPHeaders

    init(_ bytes: [UInt8]) throws {
        // Lines end in LF, with an optional CR before it.
        var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false).map { line -> String in
            var slice = line[...]
            if slice.last == 0x0D { slice = slice.dropLast() }
            return String(decoding: slice, as: UTF8.self)
        }
        while let last = lines.last, last.isEmpty { lines.removeLast() }
        guard let requestLine = lines.first else {
            throw RequestHeadError(status: 400, reason: "empty request")
        }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            throw RequestHeadError(status: 400, reason: "malformed request line")
        }
        method = String(parts[0])
        target = String(parts[1])
        version = String(parts[2])
        headers = DKHTTPHeaders()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
                throw RequestHeadError(status: 400, reason: "malformed header line")
            }
            let name = String(line[..<colon])
            guard !name.contains(" "), !name.contains("\t") else {
                throw RequestHeadError(status: 400, reason: "whitespace in a header name")
            }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
            headers.add(name: name, value: value)
        }
    }
}
