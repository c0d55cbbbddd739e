import DownloadKitSession
import Foundation
import HTTPClient
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

/// Wakes the server's poll loop from any thread (a non-blocking pipe; `fd` is its read end).
final class Wakeup: Sendable {
    let fd: Int32
    private let writeFD: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        _ = pipe(&fds)
        for end in fds {
            UnixSocket.setNonBlocking(end)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
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

/// `struct ucred` from <sys/socket.h> (Glibc's module leaves it out without _GNU_SOURCE).
struct PeerCredentials {
    var pid: pid_t = 0
    var uid: uid_t = 0
    var gid: gid_t = 0

    /// The connected peer's credentials (SO_PEERCRED), or nil when the kernel does not say.
    static func of(_ fd: Int32) -> PeerCredentials? {
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
            length == socklen_t(MemoryLayout<PeerCredentials>.size)
        else { return nil }
        return credentials
    }
}

/// The Unix-socket front end: one poll(2) loop on a dedicated thread owns the listener and every
/// connection's descriptor and buffers; each connection's requests run in order on one task that calls
/// the ``SessionRegistry``; replies and events come back through a mailbox.
///
/// Bounds per client: a frame above ``SessionProtocol/maxFrameBytes`` closes the connection before
/// anything is allocated for it; at most ``Limits/maxQueuedRequests`` decoded requests wait (then the
/// socket is not read); at most ``Limits/maxOutboundBytes`` of replies wait to be sent — a client that
/// does not read its replies past that is disconnected, and events are only loaded from the log while
/// fewer than ``Limits/eventLowWater`` bytes wait, so a slow reader costs memory, never a stall.
public final class ControlServer: @unchecked Sendable {
    /// Per-connection bounds.
    public struct Limits: Sendable {
        public var maxOutboundBytes = 4 << 20
        public var eventLowWater = 256 << 10
        public var maxQueuedRequests = 32
        public var eventBatch = 256
        public init() {}
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

        init(id: Int, fd: Int32) {
            self.id = id
            self.fd = fd
        }

        var waitingBytes: Int { outbound.count - sent }
    }

    /// The socket's path.
    public let socketPath: String
    public let limits: Limits
    private let registry: SessionRegistry
    private let logger: Logger
    let wakeup: Wakeup
    private let mailbox = LockedValue<[(Int, Mail)]>([])
    private let stopRequested = LockedValue(false)
    private let stopped = DispatchSemaphore(value: 0)
    private var listenFD: Int32 = -1
    // Owned by the poll thread.
    private var connections: [Int: Connection] = [:]
    private var nextConnectionID = 1

    init(socketPath: String, registry: SessionRegistry, wakeup: Wakeup, limits: Limits = Limits(), logger: Logger) {
        self.socketPath = socketPath
        self.registry = registry
        self.wakeup = wakeup
        self.limits = limits
        self.logger = logger
    }

    // MARK: - Lifecycle

    /// Creates the socket (directory 0700 if created, socket 0600), replacing a stale socket file of a
    /// dead daemon, and starts the poll thread.
    /// - Throws: ``DaemonError`` `alreadyRunning` when a daemon answers on the path, else `socket`.
    func start() throws(DaemonError) {
        let directory = (socketPath as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw DaemonError(.socket, "cannot create the socket directory \(directory): \(error.localizedDescription)")
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
        let thread = Thread { [self] in
            loop()
            stopped.signal()
        }
        thread.name = "downloadkitd-socket"
        thread.start()
    }

    /// Stops accepting, closes every connection and the listener, removes the socket file.
    func stop() {
        guard listenFD >= 0 else { return }
        stopRequested.withLock { $0 = true }
        wakeup.signal()
        stopped.wait()
        unlink(socketPath)
    }

    // MARK: - The poll loop

    private func loop() {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while !stopRequested.withLock({ $0 }) {
            let order = Array(connections.keys)
            var fds = [pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeup.fd, events: Int16(POLLIN), revents: 0)]
            for id in order {
                guard let connection = connections[id] else { continue }
                var events: Int16 = 0
                if !connection.closeWhenFlushed && connection.queued.withLock({ $0 }) < limits.maxQueuedRequests {
                    events |= Int16(POLLIN)
                }
                if connection.waitingBytes > 0 { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: connection.fd, events: events, revents: 0))
            }
            _ = poll(&fds, nfds_t(fds.count), 1000)
            if fds[1].revents != 0 { wakeup.drain() }
            if fds[0].revents & Int16(POLLIN) != 0 { acceptAll() }
            deliverMail()
            for (index, id) in order.enumerated() {
                guard let connection = connections[id] else { continue }
                let revents = fds[index + 2].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    if !read(connection, &buffer) {
                        drop(connection)
                        continue
                    }
                }
                decodeFrames(connection)
            }
            pumpEvents()
            for connection in Array(connections.values) {
                if !flush(connection) || (connection.closeWhenFlushed && connection.waitingBytes == 0) {
                    drop(connection)
                }
            }
        }
        for connection in Array(connections.values) { drop(connection) }
        close(listenFD)
    }

    private func acceptAll() {
        while true {
            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else { return }
            UnixSocket.setNonBlocking(fd)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let connection = Connection(id: nextConnectionID, fd: fd)
            nextConnectionID += 1
            connections[connection.id] = connection
            let credentials = PeerCredentials.of(fd)
            guard let credentials, credentials.uid == geteuid() else {
                let who = credentials.map { "uid \($0.uid) (pid \($0.pid))" } ?? "an unidentifiable peer"
                logger.warning("refused a connection from \(who): the daemon serves uid \(geteuid()) only")
                let error = SessionError(.permissionDenied, "downloadkitd serves uid \(geteuid()) only; \(who) is refused")
                enqueue(connection, FrameEncoder.frame(SessionCodec.encode(ServerMessage.error(id: nil, error))))
                connection.closeWhenFlushed = true
                continue
            }
            startWorker(connection)
        }
    }

    /// Reads what is there (at most 256 KiB a round); false on EOF or a hard error.
    private func read(_ connection: Connection, _ buffer: inout [UInt8]) -> Bool {
        var total = 0
        while total < 256 << 10 {
            let count = buffer.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                total += count
                if !connection.closeWhenFlushed { connection.decoder.append(buffer[0..<count]) }
                continue
            }
            if count == 0 { return false }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
        }
        return true
    }

    /// Hands complete frames to the connection's worker while fewer than the limit wait.
    private func decodeFrames(_ connection: Connection) {
        while !connection.closeWhenFlushed && connection.queued.withLock({ $0 }) < limits.maxQueuedRequests {
            switch connection.decoder.next() {
            case .needMore:
                return
            case .tooLarge(let declared):
                refuse(connection, SessionError(.frameTooLarge, "a frame of \(declared) bytes is over the limit of \(SessionProtocol.maxFrameBytes)"))
            case .frame(let body):
                do {
                    let message = try SessionCodec.decodeClient(body)
                    connection.queued.withLock { $0 += 1 }
                    connection.inbox?.yield(message)
                } catch {
                    refuse(connection, error)
                }
            }
        }
    }

    /// Sends a connection-level error and closes once it is written.
    private func refuse(_ connection: Connection, _ error: SessionError) {
        logger.notice("connection \(connection.id): \(error)")
        enqueue(connection, FrameEncoder.frame(SessionCodec.encode(ServerMessage.error(id: nil, error))))
        connection.closeWhenFlushed = true
        connection.inbox?.finish()
    }

    private func enqueue(_ connection: Connection, _ bytes: [UInt8]) {
        guard connection.waitingBytes + bytes.count <= limits.maxOutboundBytes else {
            logger.notice("connection \(connection.id): does not read its replies; disconnecting")
            connection.outbound = []
            connection.sent = 0
            connection.closeWhenFlushed = true
            connection.inbox?.finish()
            return
        }
        if connection.sent > 0 && connection.sent == connection.outbound.count {
            connection.outbound.removeAll(keepingCapacity: true)
            connection.sent = 0
        }
        connection.outbound += bytes
    }

    /// Writes what the socket takes; false on a hard error.
    private func flush(_ connection: Connection) -> Bool {
        while connection.waitingBytes > 0 {
            let count = connection.outbound.withUnsafeBytes { raw in
                send(connection.fd, raw.baseAddress! + connection.sent, connection.waitingBytes, Int32(MSG_NOSIGNAL))
            }
            if count > 0 {
                connection.sent += count
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { break }
            return false
        }
        if connection.sent > 1 << 16 {
            connection.outbound.removeFirst(connection.sent)
            connection.sent = 0
        }
        return true
    }

    private func drop(_ connection: Connection) {
        // Unread input would turn the close into a reset that can hide a refusal frame from the peer.
        var scratch = [UInt8](repeating: 0, count: 4096)
        while scratch.withUnsafeMutableBytes({ recv(connection.fd, $0.baseAddress, $0.count, 0) }) > 0 {}
        close(connection.fd)
        connection.inbox?.finish()
        connection.inbox = nil
        connections[connection.id] = nil
    }

    // MARK: - Mail from workers and sessions

    private func post(_ connection: Int, _ mail: Mail) {
        mailbox.withLock { $0.append((connection, mail)) }
        wakeup.signal()
    }

    private func deliverMail() {
        let items = mailbox.withLock { items in
            let taken = items
            items = []
            return taken
        }
        for (id, mail) in items {
            guard let connection = connections[id] else { continue }
            switch mail {
            case .send(let bytes):
                if !connection.closeWhenFlushed { enqueue(connection, bytes) }
            case .sendAndClose(let bytes):
                if !connection.closeWhenFlushed { enqueue(connection, bytes) }
                connection.closeWhenFlushed = true
                connection.inbox?.finish()
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
