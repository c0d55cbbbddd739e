import CDownloadKitSystem
import DownloadKitRuntime
import DownloadKitSession
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Why the daemon could not start.
public struct DaemonError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// Another daemon answers on the socket (or holds the state directory).
        case alreadyRunning
        /// The socket could not be created (path too long, not a socket, permissions).
        case socket
        /// The state directory could not be created or locked.
        case state
    }

    public var code: Code
    public var detail: String
    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }
    public var description: String { detail }
}

/// glibc's `malloc_trim` (<malloc.h>, not in the Glibc module): gives free heap memory back to the system.
@_silgen_name("malloc_trim")
private func malloc_trim(_ pad: Int) -> Int32

/// Wakes the server's poll loop from any thread (a non-blocking pipe; `fd` is its read end).
final class Wakeup: Sendable {
    let fd: Int32
    private let writeFD: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        // Close-on-exec from the start (pipe2), so that no process started meanwhile inherits an end.
        _ = dk_wake_pipe(&fds)
        for end in fds { UnixSocket.setNonBlocking(end) }
        fd = fds[0]
        writeFD = fds[1]
    }

    func signal() {
        var one: UInt8 = 1
        _ = write(writeFD, &one, 1)
    }

    func drain() {
        var buffer = [UInt8](repeating: 0, count: 256)
        while read(fd, &buffer, buffer.count) > 0 {}
    }

    deinit {
        close(fd)
        close(writeFD)
    }
}

/// The Unix-socket front end: one poll(2) loop on a dedicated thread owns the listener and every
/// connection's descriptor and buffers; each connection's requests run in order on one task that calls
/// the ``SessionRegistry``; replies and events come back through a mailbox.
///
/// Bounds per client: a frame above ``SessionProtocol/maxFrameBytes`` closes the connection before
/// anything is allocated for it, and a connection never buffers more than one largest frame of input
/// (the socket is not read past it); at most ``Limits/maxQueuedRequests`` decoded requests wait (then the
/// socket is not read); at most ``Limits/maxOutboundBytes`` of replies wait to be sent — a client that
/// does not read its replies past that is disconnected, and events are only loaded from the log while
/// fewer than ``Limits/eventLowWater`` bytes wait, so a slow reader costs memory, never a stall.
///
/// Bounds in all (docs/DAEMON.md "Limits"): at most ``Limits/connectionCap(descriptorLimit:)``
/// connections (one more is accepted, sent `overloaded` and closed at once); out of descriptors
/// (EMFILE/ENFILE), a reserved descriptor is freed to accept and refuse the newcomer the same way, else
/// accepting pauses — the listener never spins; at most ``Limits/maxBufferedBytes`` buffered over all
/// connections (beyond, the connection holding the most is closed); a frame (or the first frame, the
/// hello) must arrive complete within ``Limits/frameTimeout``; a connection with no subscription and
/// nothing in flight is closed after ``Limits/idleTimeout``. Buffers larger than 64 KiB are released
/// when they drain, and freed memory is handed back to the system (`malloc_trim`).
public final class ControlServer: @unchecked Sendable {
    /// Per-connection and overall bounds (the daemon's `--max-connections`, `--max-buffered-bytes`,
    /// `--frame-timeout`, `--idle-timeout`).
    public struct Limits: Sendable, Hashable {
        /// Replies waiting to be written to one connection; beyond, the client is disconnected.
        public var maxOutboundBytes = 4 << 20
        /// Events are loaded for a subscriber only while fewer bytes than this wait to be written to it.
        public var eventLowWater = 256 << 10
        /// Decoded requests waiting per connection; beyond, its socket is not read.
        public var maxQueuedRequests = 32
        /// Events loaded from the log at a time.
        public var eventBatch = 256
        /// Connections served at once (further capped by the descriptor limit, see
        /// ``connectionCap(descriptorLimit:)``).
        public var maxConnections = 128
        /// Bytes buffered over all connections (input not yet decoded plus replies not yet written);
        /// beyond, the connection holding the most is closed with `overloaded`.
        public var maxBufferedBytes = 32 << 20
        /// Seconds a frame may take from its first byte to its last, and a new connection to send its
        /// first complete frame (the hello).
        public var frameTimeout: Double = 15
        /// Seconds a connection with no subscription, no request in flight and nothing buffered may stay
        /// silent before it is closed.
        public var idleTimeout: Double = 600
        public init() {}

        /// The connection cap under a descriptor limit (soft `RLIMIT_NOFILE`): ``maxConnections``, but at
        /// most half the descriptors, so that the sessions' downloads and databases keep the other half.
        public func connectionCap(descriptorLimit: Int) -> Int {
            max(1, min(maxConnections, descriptorLimit / 2))
        }

        /// Input one connection may buffer: the largest frame and its 4-byte length.
        public static let maxInputBytes = 4 + SessionProtocol.maxFrameBytes
    }

    private enum Mail {
        case send([UInt8])
        case sendAndClose([UInt8])
        case attach(SessionHost)
        case subscribe(after: Int64)
        case batch([SessionEvent], through: Int64)
    }

    private final class Connection {
        let id: Int
        let fd: Int32
        var decoder = FrameDecoder()
        var outbound: [UInt8] = []
        var sent = 0
        var closeWhenFlushed = false
        var inbox: AsyncStream<ClientMessage>.Continuation?
        let queued = LockedValue(0)
        var host: SessionHost?
        var subscribed = false
        var cursor: Int64 = 0
        var fetching = false
        /// Monotonic seconds: accepted, last byte moved or reply queued, first byte of the frame being
        /// received (nil when none is partial), and since when it is only waiting to be closed.
        let acceptedAt: Double
        var lastActivity: Double
        var partialSince: Double?
        var closingSince: Double?
        /// Whether a complete frame has arrived (the hello, or what got the connection refused).
        var receivedFrame = false

        init(id: Int, fd: Int32, now: Double) {
            self.id = id
            self.fd = fd
            acceptedAt = now
            lastActivity = now
        }

        var waitingBytes: Int { outbound.count - sent }
        /// What this connection costs in buffers (counted against ``Limits/maxBufferedBytes``).
        var bufferedBytes: Int { decoder.bufferedBytes + waitingBytes }
        /// Input it may still buffer.
        var inputRoom: Int { Limits.maxInputBytes - decoder.bufferedBytes }
    }

    /// The socket's path.
    public let socketPath: String
    public let limits: Limits
    private let registry: SessionRegistry
    private let logger: Logger
    let wakeup: Wakeup
    private let mailbox = LockedValue<[(Int, Mail)]>([])
    private let stopRequested = LockedValue(false)
    /// How many times the poll loop woke (tests: none while nothing happens).
    let pollReturns = LockedValue(0)
    /// Set by the poll thread when its loop has ended (``stop()`` waits for it).
    private let stopped = LockedValue(false)
    private var listenFD: Int32 = -1
    // Owned by the poll thread.
    private var connections: [Int: Connection] = [:]
    private var nextConnectionID = 1
    private var connectionCap = 1
    /// A descriptor kept open to be closed when accept fails with EMFILE/ENFILE (-1 when spent).
    private var reserveFD: Int32 = -1
    /// Accepting is paused until then (monotonic seconds) when no descriptor could be freed.
    private var acceptPausedUntil: Double?
    private var lastDescriptorWarning: Double = -.infinity
    private var trimPending = false
    private var lastTrim: Double = -.infinity

    init(socketPath: String, registry: SessionRegistry, wakeup: Wakeup, limits: Limits = Limits(), logger: Logger) {
        self.socketPath = socketPath
        self.registry = registry
        self.wakeup = wakeup
        self.limits = limits
        self.logger = logger
    }

    // MARK: - Lifecycle

    /// Creates the socket (directory 0700 if created, socket 0600), replacing a stale socket file of a
    /// dead daemon, and starts the poll thread. A directory that is not this user's own or that other
    /// users can write to is refused (``UnixSocket/untrustedDirectory(of:)``).
    /// - Throws: ``DaemonError`` `alreadyRunning` when a daemon answers on the path, else `socket`.
    func start() throws(DaemonError) {
        let directory = (socketPath as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw DaemonError(.socket, "cannot create the socket directory \(directory): \(error.localizedDescription)")
        }
        // The rule every client applies before connecting: a directory others can write to would let
        // them replace the socket with their own listener.
        if let reason = UnixSocket.untrustedDirectory(of: socketPath) {
            throw DaemonError(.socket, "not listening on \(socketPath): \(reason)")
        }
        guard var address = UnixSocket.address(socketPath) else {
            throw DaemonError(.socket, "the socket path is too long for a Unix socket (max 107 bytes): \(socketPath)")
        }
        var info = stat()
        if lstat(socketPath, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw DaemonError(.socket, "\(socketPath) exists and is not a socket; not replacing it")
            }
            if case .success(let fd) = UnixSocket.connect(socketPath) {
                close(fd)
                throw DaemonError(.alreadyRunning, "another downloadkitd is already listening on \(socketPath)")
            }
            unlink(socketPath)  // stale: its daemon is gone
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DaemonError(.socket, "socket(): \(String(cString: strerror(errno)))") }
        let previousMask = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let bindError = errno
        umask(previousMask)
        guard bound == 0 else {
            close(fd)
            throw DaemonError(.socket, "cannot bind \(socketPath): \(String(cString: strerror(bindError)))")
        }
        chmod(socketPath, 0o600)
        guard listen(fd, 64) == 0 else {
            close(fd)
            throw DaemonError(.socket, "cannot listen on \(socketPath): \(String(cString: strerror(errno)))")
        }
        listenFD = fd
        var descriptors = rlimit()
        let descriptorLimit =
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &descriptors) == 0 && descriptors.rlim_cur < rlim_t(Int32.max)
            ? Int(descriptors.rlim_cur) : 1 << 20
        connectionCap = limits.connectionCap(descriptorLimit: descriptorLimit)
        reserveFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
        logger.info(
            "serving at most \(connectionCap) connections (descriptor limit \(descriptorLimit)), \(limits.maxBufferedBytes) bytes buffered in all")
        let thread = Thread { [self] in
            loop()
            stopped.withLockWakingWaiters { $0 = true }
        }
        thread.name = "downloadkitd-socket"
        thread.start()
    }

    /// Stops accepting, closes every connection and the listener, removes the socket file.
    func stop() {
        guard listenFD >= 0 else { return }
        stopRequested.withLock { $0 = true }
        wakeup.signal()
        _ = stopped.wait { $0 ? () : nil }
        unlink(socketPath)
    }

    // MARK: - The poll loop

    /// Monotonic seconds.
    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private func loop() {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while !stopRequested.withLock({ $0 }) {
            let order = Array(connections.keys)
            var now = Self.now()
            if let until = acceptPausedUntil, now >= until { acceptPausedUntil = nil }
            let listening = acceptPausedUntil == nil
            var fds = [
                pollfd(fd: listenFD, events: listening ? Int16(POLLIN) : 0, revents: 0),
                pollfd(fd: wakeup.fd, events: Int16(POLLIN), revents: 0),
            ]
            for id in order {
                guard let connection = connections[id] else { continue }
                var events: Int16 = 0
                if wantsInput(connection) { events |= Int16(POLLIN) }
                if connection.waitingBytes > 0 { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: connection.fd, events: events, revents: 0))
            }
            _ = poll(&fds, nfds_t(fds.count), pollTimeout(now: now))
            pollReturns.withLock { $0 += 1 }
            now = Self.now()
            if fds[1].revents != 0 { wakeup.drain() }
            if listening && fds[0].revents & Int16(POLLIN) != 0 { acceptAll(now: now) }
            deliverMail(now: now)
            for (index, id) in order.enumerated() {
                guard let connection = connections[id] else { continue }
                let revents = fds[index + 2].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    // A peer that hung up while its input cannot be taken would report POLLHUP forever.
                    let open = wantsInput(connection) ? read(connection, &buffer, now: now) : revents & Int16(POLLIN) != 0
                    if !open {
                        drop(connection)
                        continue
                    }
                }
                decodeFrames(connection, now: now)
            }
            enforceBufferedBytes()
            expire(now: now)
            pumpEvents()
            for connection in Array(connections.values) {
                if !flush(connection, now: now) || (connection.closeWhenFlushed && connection.waitingBytes == 0) {
                    drop(connection)
                }
            }
            if trimPending && now - lastTrim >= 1 {
                trimPending = false
                lastTrim = now
                _ = malloc_trim(0)
            }
        }
        for connection in Array(connections.values) { drop(connection) }
        close(listenFD)
        if reserveFD >= 0 { close(reserveFD) }
    }

    /// Whether to read the connection: it is not closing, has room for input and few requests waiting.
    private func wantsInput(_ connection: Connection) -> Bool {
        !connection.closeWhenFlushed && connection.inputRoom > 0
            && connection.queued.withLock({ $0 }) < limits.maxQueuedRequests
    }

    /// Milliseconds until the next deadline (a frame, a hello, an idle connection, a paused accept), at
    /// most one second.
    /// How long `poll(2)` may sleep: until the next timer of a connection, the end of an accept pause or a
    /// pending trim, else forever (-1). No periodic tick: replies, events and stop come through ``Wakeup``.
    private func pollTimeout(now: Double) -> Int32 {
        var next = Double.infinity
        if let until = acceptPausedUntil { next = min(next, until) }
        if trimPending { next = min(next, lastTrim + 1) }
        for connection in connections.values {
            if let since = connection.closingSince ?? connection.partialSince { next = min(next, since + limits.frameTimeout) }
            if !connection.receivedFrame { next = min(next, connection.acceptedAt + limits.frameTimeout) }
            if !connection.subscribed { next = min(next, connection.lastActivity + limits.idleTimeout) }
        }
        guard next.isFinite else { return -1 }
        return Int32(max(10, min(Double(Int32.max), (next - now) * 1000 + 1)))
    }

    private func acceptAll(now: Double) {
        while true {
            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else {
                if errno == EMFILE || errno == ENFILE { acceptWithoutDescriptors(now: now, error: errno) }
                return
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let credentials = UnixSocket.PeerCredentials.of(fd)
            guard let credentials, credentials.uid == geteuid() else {
                let who = credentials.map { "uid \($0.uid) (pid \($0.pid))" } ?? "an unidentifiable peer"
                logger.warning("refused a connection from \(who): the daemon serves uid \(geteuid()) only")
                refuseAtOnce(fd, SessionError(.permissionDenied, "downloadkitd serves uid \(geteuid()) only; \(who) is refused"))
                continue
            }
            guard connections.count < connectionCap else {
                logger.notice("refused a connection: \(connections.count) connections are open (the limit)")
                refuseAtOnce(
                    fd, SessionError(.overloaded, "downloadkitd serves at most \(connectionCap) connections at once; try again later"))
                continue
            }
            UnixSocket.setNonBlocking(fd)
            let connection = Connection(id: nextConnectionID, fd: fd, now: now)
            nextConnectionID += 1
            connections[connection.id] = connection
            startWorker(connection)
        }
    }

    /// accept failed for want of descriptors: frees the reserved one to take the newcomer and refuse it
    /// (`overloaded`), so the pending connection leaves the backlog; when that is not possible, stops
    /// polling the listener for 100 ms (or until a connection closes) instead of spinning on it.
    private func acceptWithoutDescriptors(now: Double, error: Int32) {
        if now - lastDescriptorWarning >= 10 {
            lastDescriptorWarning = now
            logger.warning("accept: \(String(cString: strerror(error))) with \(connections.count) connections open; refusing newcomers")
        }
        if reserveFD >= 0 {
            close(reserveFD)
            reserveFD = -1
            let fd = accept(listenFD, nil, nil)
            if fd >= 0 {
                refuseAtOnce(fd, SessionError(.overloaded, "downloadkitd is out of file descriptors; try again later"))
            }
            reserveFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
            if fd >= 0 && reserveFD >= 0 { return }
        }
        acceptPausedUntil = now + 0.1
    }

    /// Writes one error frame to a connection that gets no slot, and closes it (nothing is read).
    private func refuseAtOnce(_ fd: Int32, _ error: SessionError) {
        let frame = FrameEncoder.frame(SessionCodec.encode(ServerMessage.error(id: nil, error)))
        UnixSocket.setNonBlocking(fd)
        _ = frame.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        discardInput(fd)
        close(fd)
    }

    /// Reads what is there, at most 256 KiB a round and never more than the connection's input room;
    /// false on EOF or a hard error.
    private func read(_ connection: Connection, _ buffer: inout [UInt8], now: Double) -> Bool {
        var total = 0
        while total < 256 << 10 {
            let room = min(buffer.count, connection.inputRoom)
            guard room > 0 else { return true }
            let (count, failure) = retryingInterrupts { buffer.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, room, 0) } }
            if count > 0 {
                total += count
                connection.lastActivity = now
                connection.decoder.append(buffer[0..<count])
                continue
            }
            if count == 0 { return false }
            return failure == .wouldBlock
        }
        return true
    }

    /// Hands complete frames to the connection's worker while fewer than the limit wait.
    private func decodeFrames(_ connection: Connection, now: Double) {
        while !connection.closeWhenFlushed && connection.queued.withLock({ $0 }) < limits.maxQueuedRequests {
            switch connection.decoder.next() {
            case .needMore:
                if connection.decoder.bufferedBytes == 0 {
                    connection.partialSince = nil
                } else if connection.partialSince == nil {
                    connection.partialSince = now
                }
                return
            case .tooLarge(let declared):
                connection.receivedFrame = true
                refuse(connection, SessionError(.frameTooLarge, "a frame of \(declared) bytes is over the limit of \(SessionProtocol.maxFrameBytes)"))
            case .frame(let body):
                connection.receivedFrame = true
                connection.partialSince = nil
                do {
                    let message = try SessionCodec.decodeClient(body)
                    connection.queued.withLock { $0 += 1 }
                    connection.inbox?.yield(message)
                } catch {
                    refuse(connection, error)
                }
            }
        }
        // Complete frames wait for the worker: not the client's delay.
        connection.partialSince = nil
    }

    /// Over ``Limits/maxBufferedBytes`` in all: closes the connections holding the most until under.
    private func enforceBufferedBytes() {
        var total = connections.values.reduce(0) { $0 + $1.bufferedBytes }
        while total > limits.maxBufferedBytes {
            guard let biggest = connections.values.filter({ !$0.closeWhenFlushed }).max(by: { $0.bufferedBytes < $1.bufferedBytes }),
                biggest.bufferedBytes > 0
            else { return }
            total -= biggest.bufferedBytes
            shed(
                biggest,
                SessionError(
                    .overloaded,
                    "downloadkitd buffers at most \(limits.maxBufferedBytes) bytes for all clients and this connection held the most (\(biggest.bufferedBytes))"
                ))
        }
    }

    /// Closes connections whose frame, hello or silence took too long.
    private func expire(now: Double) {
        for connection in Array(connections.values) {
            if let since = connection.closingSince {
                if now - since > limits.frameTimeout { drop(connection) }
                continue
            }
            let seconds = { (value: Double) in value == value.rounded() ? String(Int(value)) : String(value) }
            if let since = connection.partialSince, now - since > limits.frameTimeout {
                shed(connection, SessionError(.overloaded, "a frame did not arrive complete within \(seconds(limits.frameTimeout)) s"))
            } else if !connection.receivedFrame && now - connection.acceptedAt > limits.frameTimeout {
                shed(connection, SessionError(.overloaded, "no hello within \(seconds(limits.frameTimeout)) s of connecting"))
            } else if !connection.subscribed && connection.bufferedBytes == 0 && connection.queued.withLock({ $0 }) == 0
                && now - connection.lastActivity > limits.idleTimeout
            {
                shed(connection, SessionError(.overloaded, "idle for \(seconds(limits.idleTimeout)) s without a subscription"))
            }
        }
    }

    /// Sends a connection-level error and closes once it is written.
    private func refuse(_ connection: Connection, _ error: SessionError) {
        logger.notice("connection \(connection.id): \(error)")
        enqueue(connection, FrameEncoder.frame(SessionCodec.encode(ServerMessage.error(id: nil, error))))
        closeSoon(connection)
    }

    /// Like ``refuse(_:_:)``, but what the connection buffered (input and unsent replies) is thrown away
    /// first and its memory given back.
    private func shed(_ connection: Connection, _ error: SessionError) {
        if connection.decoder.capacity > FrameDecoder.retainedCapacity || connection.outbound.capacity > FrameDecoder.retainedCapacity {
            trimPending = true
        }
        connection.decoder.discardAll()
        connection.outbound = []
        connection.sent = 0
        connection.partialSince = nil
        refuse(connection, error)
    }

    private func closeSoon(_ connection: Connection) {
        connection.closeWhenFlushed = true
        if connection.closingSince == nil { connection.closingSince = Self.now() }
        connection.inbox?.finish()
    }

    private func enqueue(_ connection: Connection, _ bytes: [UInt8]) {
        guard connection.waitingBytes + bytes.count <= limits.maxOutboundBytes else {
            logger.notice("connection \(connection.id): does not read its replies; disconnecting")
            connection.outbound = []
            connection.sent = 0
            trimPending = true
            closeSoon(connection)
            return
        }
        if connection.sent > 0 && connection.sent == connection.outbound.count {
            connection.outbound.removeAll(keepingCapacity: true)
            connection.sent = 0
        }
        connection.outbound += bytes
    }

    /// Writes what the socket takes; false on a hard error. Drained storage above 64 KiB is released.
    private func flush(_ connection: Connection, now: Double) -> Bool {
        while connection.waitingBytes > 0 {
            let (count, failure) = retryingInterrupts {
                connection.outbound.withUnsafeBytes { raw in
                    send(connection.fd, raw.baseAddress! + connection.sent, connection.waitingBytes, Int32(MSG_NOSIGNAL))
                }
            }
            if count > 0 {
                connection.sent += count
                connection.lastActivity = now
                continue
            }
            if failure == .wouldBlock { break }
            return false
        }
        if connection.waitingBytes == 0 && connection.outbound.capacity > FrameDecoder.retainedCapacity {
            connection.outbound = []
            connection.sent = 0
            trimPending = true
        } else if connection.sent > 1 << 16 {
            connection.outbound.removeFirst(connection.sent)
            connection.sent = 0
        }
        return true
    }

    /// Reads and discards up to 64 KiB of unread input (unread input would turn the close into a reset
    /// that can hide a refusal frame from the peer; bounded, so a peer that keeps writing cannot hold
    /// the loop).
    private func discardInput(_ fd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<16 {
            guard scratch.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }) > 0 else { return }
        }
    }

    private func drop(_ connection: Connection) {
        discardInput(connection.fd)
        close(connection.fd)
        connection.inbox?.finish()
        connection.inbox = nil
        if connection.decoder.capacity > FrameDecoder.retainedCapacity || connection.outbound.capacity > FrameDecoder.retainedCapacity {
            trimPending = true
        }
        connections[connection.id] = nil
        acceptPausedUntil = nil  // a descriptor is free again
    }

    // MARK: - Mail from workers and sessions

    private func post(_ connection: Int, _ mail: Mail) {
        mailbox.withLock { $0.append((connection, mail)) }
        wakeup.signal()
    }

    private func deliverMail(now: Double) {
        let items = mailbox.withLock { items in
            let taken = items
            items = []
            return taken
        }
        for (id, mail) in items {
            guard let connection = connections[id] else { continue }
            switch mail {
            case .send(let bytes):
                connection.lastActivity = now
                if !connection.closeWhenFlushed { enqueue(connection, bytes) }
            case .sendAndClose(let bytes):
                if !connection.closeWhenFlushed { enqueue(connection, bytes) }
                closeSoon(connection)
            case .attach(let host):
                connection.host = host
            case .subscribe(let after):
                connection.subscribed = true
                connection.cursor = max(after, connection.host?.acknowledged ?? 0)
            case .batch(let events, let through):
                connection.fetching = false
                for event in events where event.seq > connection.cursor {
                    enqueue(connection, FrameEncoder.frame(SessionCodec.encode(ServerMessage.event(event))))
                }
                connection.cursor = max(connection.cursor, through)
            }
        }
    }

    /// Loads more events for subscribers that are behind and have room.
    private func pumpEvents() {
        for connection in connections.values
        where connection.subscribed && !connection.fetching && !connection.closeWhenFlushed
            && connection.waitingBytes < limits.eventLowWater
        {
            guard let host = connection.host, host.lastSequence > connection.cursor else { continue }
            connection.fetching = true
            let id = connection.id
            host.fetch(after: connection.cursor, limit: limits.eventBatch) { [weak self] events, through in
                self?.post(id, .batch(events, through: through))
            }
        }
    }

    // MARK: - Per-connection worker

    private func startWorker(_ connection: Connection) {
        let (stream, continuation) = AsyncStream<ClientMessage>.makeStream()
        connection.inbox = continuation
        let id = connection.id
        let queued = connection.queued
        Task { [self] in
            var host: SessionHost?
            for await message in stream {
                await handle(message, connection: id, host: &host)
                queued.withLock { $0 -= 1 }
                wakeup.signal()
            }
        }
    }

    private func handle(_ message: ClientMessage, connection: Int, host: inout SessionHost?) async {
        func reply(_ reply: ServerMessage) { post(connection, .send(FrameEncoder.frame(SessionCodec.encode(reply)))) }
        func fail(_ error: SessionError) {
            post(connection, .sendAndClose(FrameEncoder.frame(SessionCodec.encode(ServerMessage.error(id: nil, error)))))
        }
        if case .hello(let version, let session) = message.request {
            guard host == nil else { return fail(SessionError(.notGreeted, "a second hello on one connection")) }
            guard version == SessionProtocol.version else {
                return fail(
                    SessionError(
                        .unsupportedVersion,
                        "this downloadkitd speaks protocol version \(SessionProtocol.version); the client speaks \(version)"))
            }
            do {
                let opened = try await registry.host(session)
                host = opened
                post(connection, .attach(opened))
                reply(.welcome(version: SessionProtocol.version, session: session, acknowledged: opened.acknowledged))
            } catch {
                fail(error)
            }
            return
        }
        guard let host else { return fail(SessionError(.notGreeted, "the first frame must be a hello")) }
        switch message.request {
        case .subscribe(let after):
            post(connection, .subscribe(after: after))
            reply(.ok(id: message.id, taskIDs: [], tasks: [], position: host.position))
        case .acknowledge(let upTo):
            do {
                try await host.acknowledge(upTo: upTo)
                reply(.ok(id: message.id, taskIDs: [], tasks: [], position: host.position))
            } catch {
                reply(.error(id: message.id, SessionError(.storage, "cannot record the acknowledgement: \(error)")))
            }
        default:
            reply(await SessionService.perform(message.request, id: message.id, on: host))
        }
    }
}
