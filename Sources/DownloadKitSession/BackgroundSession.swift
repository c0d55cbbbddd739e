import CDownloadKitSystem
import DownloadKitRuntime
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A client of `downloadkitd`: the Linux counterpart of a background `URLSession`.
///
/// Transfers handed to the daemon go on after this process exits. Events that happen while no client
/// of the identifier is connected are kept by the daemon and delivered, in order, by ``events`` when a
/// client with the same identifier connects; ``acknowledge(upTo:)`` marks them handled and they are
/// never delivered again. When the daemon restarts, the session reconnects by itself and ``events``
/// goes on where it was (no event is yielded twice by one `BackgroundSession`).
///
/// ```swift
/// let session = BackgroundSession(identifier: "com.example.backups")
/// let id = try await session.enqueue(SessionTaskRequest(url: "https://example.com/a.iso", file: "/data/a.iso"))
/// for await event in session.events {
///     if event.kind == .finished { print(event.task, event.path ?? "", event.checksum ?? "") }
///     try await session.acknowledge(upTo: event.seq)
/// }
/// ```
///
/// Connecting starts nothing: without a daemon the calls throw ``SessionError`` `daemonUnavailable`
/// naming the socket. All I/O runs on one dedicated thread per session, never on the cooperative pool;
/// call ``close()`` when done with the session (the thread keeps it alive until then).
public final class BackgroundSession: Sendable {
    /// The session identifier (`A-Z a-z 0-9 . _ -`, at most 128 characters).
    public let identifier: String
    /// The daemon's socket.
    public let socketPath: String

    private let state = LockedValue(ClientState())
    /// How many times the I/O thread woke from a wait (tests: none while the session is idle; it sleeps
    /// until a request, ``close()`` or the daemon's bytes wake it).
    let ioWakeUps = LockedValue(0)
    /// How many times a wait for a daemon this session started ended (tests: once, not every 20 ms).
    let launchWakeUps = LockedValue(0)
    private let wakeFDs: (read: Int32, write: Int32)

    /// How to start the daemon when none answers; nil (the default): never start one.
    public let launch: DaemonLaunch?

    /// A session object; nothing connects until the first call.
    /// - Parameters:
    ///   - socketPath: Default ``UnixSocket/defaultPath``.
    ///   - launch: Allows the session to start `downloadkitd` when no daemon answers (once per session
    ///     object; the daemon outlives this process).
    public init(identifier: String, socketPath: String? = nil, launch: DaemonLaunch? = nil) {
        self.identifier = identifier
        self.socketPath = socketPath ?? UnixSocket.defaultPath
        self.launch = launch
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                UnixSocket.setNonBlocking(fd)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            }
        } else {
            fds = [-1, -1]
        }
        wakeFDs = (fds[0], fds[1])
    }

    deinit {
        close()
        // Only here: a descriptor closed while another thread may still call wake() could by then
        // belong to another socket, and the wake byte would corrupt that stream.
        Glibc.close(wakeFDs.read)
        Glibc.close(wakeFDs.write)
    }

    // MARK: - Public API

    /// Connects (if not connected) and says hello.
    /// - Throws: ``SessionError``: `daemonUnavailable` naming the socket, `unsupportedVersion`,
    ///   `invalidIdentifier`, `permissionDenied` (the daemon refused this uid, or the socket's directory
    ///   or its listener is not this user's — then nothing was sent), `closed`.
    public func connect() async throws(SessionError) {
        guard SessionProtocol.isValidIdentifier(identifier) else {
            throw SessionError(.invalidIdentifier, "invalid session identifier \(identifier.debugDescription): use 1–128 of A-Z a-z 0-9 . _ -")
        }
        let result: Result<Void, SessionError> = await withCheckedContinuation { continuation in
            let immediate: Result<Void, SessionError>? = state.withLock { state in
                if state.isClosed { return .failure(SessionError(.closed, "the session was closed")) }
                if state.isConnected { return .success(()) }
                state.connectWaiters.append { continuation.resume(returning: $0) }
                startThreadIfNeeded(&state)
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
            wake()
        }
        try result.get()
    }

    /// Adds tasks; returns their ids in order (a URL or file id already in the session gives its existing id).
    public func enqueue(_ requests: [SessionTaskRequest]) async throws(SessionError) -> [String] {
        guard case .ok(_, let ids, _, _) = try await request(.enqueue(requests)) else { return [] }
        return ids
    }

    /// Adds one task; returns its id.
    public func enqueue(_ request: SessionTaskRequest) async throws(SessionError) -> String {
        let ids = try await enqueue([request])
        guard let id = ids.first else { throw SessionError(.malformedMessage, "the daemon returned no task id") }
        return id
    }

    /// Pauses tasks (their bytes are kept).
    public func pause(_ taskIDs: [String]) async throws(SessionError) { _ = try await request(.pause(taskIDs)) }
    /// Resumes paused, failed or cancelled tasks.
    public func resume(_ taskIDs: [String]) async throws(SessionError) { _ = try await request(.resume(taskIDs)) }
    /// Cancels tasks (their partial data is deleted; the tasks stay, cancelled).
    public func cancel(_ taskIDs: [String]) async throws(SessionError) { _ = try await request(.cancel(taskIDs)) }
    /// Removes tasks, and their finished files when `deletingFiles`.
    public func remove(_ taskIDs: [String], deletingFiles: Bool = false) async throws(SessionError) {
        _ = try await request(.remove(taskIDs, deletingFiles: deletingFiles))
    }
    /// Gives a task a new URL (expiring signed URLs); it keeps its id and bytes.
    public func refreshURL(taskID: String, newURL: String) async throws(SessionError) {
        _ = try await request(.refreshURL(task: taskID, url: newURL))
    }

    /// Every task of the session.
    public func list() async throws(SessionError) -> [SessionTaskInfo] {
        try await status().tasks
    }

    /// Every task and how far the event log is written and acknowledged; every event of the transitions
    /// the tasks show is included in `position.lastSequence`.
    public func status() async throws(SessionError) -> (tasks: [SessionTaskInfo], position: SessionPosition) {
        guard case .ok(_, _, let tasks, let position) = try await request(.list) else {
            return ([], SessionPosition(lastSequence: 0, acknowledged: 0))
        }
        return (tasks, position)
    }

    /// Marks every event up to `seq` handled: the daemon never delivers them again to anyone.
    public func acknowledge(upTo seq: Int64) async throws(SessionError) {
        _ = try await request(.acknowledge(upTo: seq))
    }

    /// The session's events: first those not acknowledged yet, in order, then live ones; it reconnects
    /// by itself when the daemon restarts. Ends on ``close()`` or when the daemon refuses the session
    /// (``lastError`` says why). A new access replaces (ends) the previous sequence.
    public var events: AsyncStream<SessionEvent> {
        let (stream, continuation) = AsyncStream<SessionEvent>.makeStream()
        let previous: AsyncStream<SessionEvent>.Continuation? = state.withLock { state in
            if state.isClosed {
                continuation.finish()
                return nil
            }
            let previous = state.eventContinuation
            state.eventContinuation = continuation
            state.wantsEvents = true
            state.reconnects = true
            if state.isConnected {
                state.enqueue(.subscribe(after: state.lastDelivered), reply: nil)
            }
            startThreadIfNeeded(&state)
            return previous
        }
        previous?.finish()
        wake()
        return stream
    }

    /// The error that ended the connection for good (refusal, unsupported version), if any.
    public var lastError: SessionError? { state.withLock { $0.fatalError } }

    /// The sequence number of the last event yielded by ``events`` (0 before any).
    public var lastDeliveredSequence: Int64 { state.withLock { $0.lastDelivered } }

    /// Disconnects for good: outstanding requests fail with `closed`, ``events`` ends.
    public func close() {
        let finished = state.withLock { state -> (waiters: [Reply], continuation: AsyncStream<SessionEvent>.Continuation?, connect: [(Result<Void, SessionError>) -> Void])? in
            guard !state.isClosed else { return nil }
            state.isClosed = true
            let waiters = Array(state.pending.values)
            state.pending = [:]
            let connect = state.connectWaiters
            state.connectWaiters = []
            let continuation = state.eventContinuation
            state.eventContinuation = nil
            return (waiters, continuation, connect)
        }
        wake()
        guard let finished else { return }
        let error = SessionError(.closed, "the session was closed")
        for waiter in finished.waiters { waiter(.failure(error)) }
        for waiter in finished.connect { waiter(.failure(error)) }
        finished.continuation?.finish()
    }

    // MARK: - Requests

    private typealias Reply = @Sendable (Result<ServerMessage, SessionError>) -> Void

    private func request(_ request: ClientRequest) async throws(SessionError) -> ServerMessage {
        try await connect()
        let result: Result<ServerMessage, SessionError> = await withCheckedContinuation { continuation in
            let refused: SessionError? = state.withLock { state in
                if state.isClosed { return SessionError(.closed, "the session was closed") }
                guard state.isConnected else {
                    return SessionError(.disconnected, "the connection to the daemon at \(socketPath) was lost")
                }
                state.enqueue(request, reply: { continuation.resume(returning: $0) })
                return nil
            }
            if let refused { continuation.resume(returning: .failure(refused)) }
            wake()
        }
        let message = try result.get()
        if case .error(_, let error) = message { throw error }
        return message
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeFDs.write, &byte, 1)
    }

    private func startThreadIfNeeded(_ state: inout ClientState) {
        guard !state.threadStarted else { return }
        state.threadStarted = true
        let thread = Thread { [weak self] in self?.runLoop() }
        thread.name = "downloadkit-session"
        thread.start()
    }

    // MARK: - The I/O thread

    /// Connects, greets, then moves frames until the connection ends; reconnects while events are wanted.
    private func runLoop() {
        var backoff = 0.05
        while true {
            let (closed, wanted) = state.withLock { ($0.isClosed, !$0.connectWaiters.isEmpty || $0.reconnects) }
            if closed { break }
            if !wanted {
                waitForWake(timeout: nil)
                continue
            }
            switch handshake() {
            case .success(let fd):
                backoff = 0.05
                serve(fd)
                Glibc.close(fd)
                disconnected(SessionError(.disconnected, "the connection to the daemon at \(socketPath) was lost"))
            case .failure(let error):
                let fatal = [.unsupportedVersion, .invalidIdentifier, .permissionDenied].contains(error.code)
                let (waiters, continuation) = state.withLock { state in
                    let waiters = state.connectWaiters
                    state.connectWaiters = []
                    var continuation: AsyncStream<SessionEvent>.Continuation?
                    if fatal {
                        state.fatalError = error
                        state.reconnects = false
                        continuation = state.eventContinuation
                        state.eventContinuation = nil
                    }
                    return (waiters, continuation)
                }
                for waiter in waiters { waiter(.failure(error)) }
                continuation?.finish()
                waitForWake(timeout: backoff)
                backoff = min(1, backoff * 2)
            }
        }
    }

    /// Sleeps until ``wake()`` (a request, ``close()``) or `timeout` seconds (nil: no timeout).
    private func waitForWake(timeout: Double?) {
        var pfd = pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0)
        _ = poll(&pfd, 1, timeout.map { Int32($0 * 1000) } ?? -1)
        ioWakeUps.withLock { $0 += 1 }
        drainWake()
    }

    private func drainWake() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeFDs.read, &buffer, buffer.count) > 0 {}
    }

    /// Connects and exchanges hello/welcome (bounded by 10 s); the descriptor is non-blocking on success.
    private func handshake() -> Result<Int32, SessionError> {
        let fd: Int32
        switch connectOrLaunch() {
        case .success(let connected): fd = connected
        case .failure(let error): return .failure(error)
        }
        UnixSocket.setNonBlocking(fd)
        let hello = FrameEncoder.frame(SessionCodec.encode(ClientMessage(id: 0, .hello(version: SessionProtocol.version, session: identifier))))
        var decoder = FrameDecoder()
        var outbound = hello[...]
        let deadline = Deadline.after(seconds: 10)
        while !deadline.hasPassed {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN) | (outbound.isEmpty ? 0 : Int16(POLLOUT)), revents: 0)
            _ = poll(&pfd, 1, deadline.remainingMilliseconds)
            if !outbound.isEmpty {
                let sent = outbound.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent > 0 { outbound = outbound.dropFirst(sent) }
            }
            // Frames that arrived with the EOF still count (a refusal is sent, then the daemon closes).
            let open = receive(fd, into: &decoder)
            switch decoder.next() {
            case .needMore:
                if open { continue }
                Glibc.close(fd)
                return .failure(SessionError(.daemonUnavailable, "the daemon at \(socketPath) closed the connection without an answer"))
            case .tooLarge(let declared):
                Glibc.close(fd)
                return .failure(SessionError(.frameTooLarge, "the daemon at \(socketPath) sent a \(declared)-byte frame"))
            case .frame(let body):
                let message: ServerMessage
                do {
                    message = try SessionCodec.decodeServer(body)
                } catch {
                    Glibc.close(fd)
                    return .failure(error)
                }
                switch message {
                case .welcome(let version, _, let acknowledged) where version == SessionProtocol.version:
                    connected(fd, acknowledged: acknowledged, leftover: decoder)
                    return .success(fd)
                case .error(_, let error):
                    Glibc.close(fd)
                    return .failure(error)
                default:
                    Glibc.close(fd)
                    return .failure(SessionError(.unsupportedVersion, "the daemon at \(socketPath) answered with an unexpected frame"))
                }
            }
        }
        Glibc.close(fd)
        return .failure(SessionError(.daemonUnavailable, "the daemon at \(socketPath) did not answer the hello"))
    }

    /// Connects; when nothing answers and ``launch`` allows it (and it was not tried yet), starts the
    /// daemon and waits for its socket.
    ///
    /// Every connection goes through ``UnixSocket/connectToDaemon(_:)``: a socket whose directory or
    /// listener is not this user's is refused (`permissionDenied`, naming the path and the uid) before
    /// anything — the hello with the identifier, a request with its headers — is written to it.
    private func connectOrLaunch() -> Result<Int32, SessionError> {
        var failure: UnixSocket.DKErrno
        switch UnixSocket.connectToDaemon(socketPath) {
        case .success(let fd): return .success(fd)
        case .failure(.untrusted(let reason)): return .failure(SessionError(.permissionDenied, reason))
        case .failure(.unreachable(let error)): failure = error
        }
        let unavailable = SessionError(.daemonUnavailable, "no daemon answers at \(socketPath) (\(failure))")
        guard let launch, [ENOENT, ECONNREFUSED].contains(failure.code),
            state.withLock({ state in
                defer { state.launched = true }
                return !state.launched
            })
        else { return .failure(unavailable) }
        let started: (pid: pid_t, readiness: Int32)
        do {
            started = try launch.spawn(socketPath: socketPath)
        } catch {
            return .failure(error)
        }
        defer { Glibc.close(started.readiness) }
        // Sleeps until the daemon says it listens (a byte on its readiness pipe) or stops (end of file), or the
        // timeout passes; then connects once. No polling of the socket meanwhile.
        let deadline = Deadline.after(seconds: launch.timeout)
        var readiness = pollfd(fd: started.readiness, events: Int16(POLLIN), revents: 0)
        var answered = false
        while !answered && !deadline.hasPassed {
            let (count, error) = retryingInterrupts { poll(&readiness, 1, deadline.remainingMilliseconds) }
            answered = count > 0 || error != nil
        }
        launchWakeUps.withLock { $0 += 1 }
        switch UnixSocket.connectToDaemon(socketPath) {
        case .success(let fd): return .success(fd)
        case .failure(.untrusted(let reason)): return .failure(SessionError(.permissionDenied, reason))
        case .failure(.unreachable(let error)): failure = error
        }
        // End of file on the readiness pipe without the byte: the daemon is ending. Its exit is waited for (the
        // pipe closes before the process can be reaped), so one killed by a signal is not reported as exited.
        var byte: UInt8 = 0
        let saidListening = answered && retryingInterrupts { Glibc.read(started.readiness, &byte, 1) }.result == 1
        if let ended = Self.exitStatus(of: started.pid, waiting: answered && !saidListening, until: deadline) {
            return .failure(
                SessionError(.daemonUnavailable, "the daemon started for \(socketPath) \(ended) (log: \(launch.logPath))"))
        }
        guard answered else {
            return .failure(SessionError(.daemonUnavailable, "the daemon started for \(socketPath) did not answer within \(launch.timeout) s (\(failure))"))
        }
        return .failure(
            SessionError(
                .daemonUnavailable,
                "the daemon started for \(socketPath) stopped before it listened (\(failure); log: \(launch.logPath))"))
    }

    /// How the started daemon `pid` ended, reaping it; nil while it runs. With `waiting`, sleeps (bounded by
    /// `deadline`) until it ends: a pidfd (pidfd_open(2), Linux 5.3) becomes readable when the process has
    /// ended, so no polling.
    static func exitStatus(of pid: pid_t, waiting: Bool, until deadline: Deadline) -> WaitStatus? {
        if waiting {
            let pidfd = dk_pidfd_open(pid)
            if pidfd >= 0 {
                defer { Glibc.close(pidfd) }
                var ended = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
                _ = retryingInterrupts { poll(&ended, 1, deadline.remainingMilliseconds) }
            }
        }
        var status: Int32 = 0
        guard retryingInterrupts({ waitpid(pid, &status, WNOHANG) }).result == pid else { return nil }
        return WaitStatus(status)
    }

    /// Reads what is available; false on EOF or a hard error.
    private func receive(_ fd: Int32, into decoder: inout FrameDecoder) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                decoder.append(buffer[0..<count])
                if count < buffer.count { return true }
                continue
            }
            if count == 0 { return false }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
        }
    }

    private func connected(_ fd: Int32, acknowledged: Int64, leftover: FrameDecoder) {
        let waiters = state.withLock { state in
            state.isConnected = true
            state.decoder = leftover
            state.reconnects = true
            if state.wantsEvents {
                state.enqueue(.subscribe(after: max(state.lastDelivered, acknowledged)), reply: nil)
            }
            let waiters = state.connectWaiters
            state.connectWaiters = []
            return waiters
        }
        for waiter in waiters { waiter(.success(())) }
    }

    private func disconnected(_ error: SessionError) {
        let pending = state.withLock { state in
            state.isConnected = false
            state.outbox = []
            let pending = Array(state.pending.values)
            state.pending = [:]
            return pending
        }
        for reply in pending { reply(.failure(error)) }
    }

    /// Moves frames both ways until EOF, an error or ``close()``.
    private func serve(_ fd: Int32) {
        var outbound: [UInt8] = []
        var decoder = state.withLock { $0.decoder }
        while true {
            let closed: Bool = state.withLock { state in
                for frame in state.outbox { outbound += frame }
                state.outbox = []
                return state.isClosed
            }
            if closed { return }
            if !handleFrames(&decoder) { return }
            var fds = [
                pollfd(fd: fd, events: Int16(POLLIN) | (outbound.isEmpty ? 0 : Int16(POLLOUT)), revents: 0),
                pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0),
            ]
            // No timeout: requests and close() write the wake pipe, the daemon's bytes wake the socket.
            _ = poll(&fds, 2, -1)
            ioWakeUps.withLock { $0 += 1 }
            drainWake()
            if !outbound.isEmpty {
                let sent = outbound.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent > 0 {
                    outbound.removeFirst(sent)
                } else if sent < 0 && errno != EAGAIN && errno != EINTR {
                    return
                }
            }
            if fds[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                if !receive(fd, into: &decoder) { _ = handleFrames(&decoder); return }
            }
        }
    }

    /// Dispatches complete frames; false when the stream is unusable.
    private func handleFrames(_ decoder: inout FrameDecoder) -> Bool {
        while true {
            switch decoder.next() {
            case .needMore: return true
            case .tooLarge: return false
            case .frame(let body):
                guard let message = try? SessionCodec.decodeServer(body) else { return false }
                dispatch(message)
            }
        }
    }

    private func dispatch(_ message: ServerMessage) {
        switch message {
        case .event(let event):
            let continuation: AsyncStream<SessionEvent>.Continuation? = state.withLock { state in
                guard event.seq > state.lastDelivered else { return nil }
                state.lastDelivered = event.seq
                return state.eventContinuation
            }
            continuation?.yield(event)
        case .ok(let id, _, _, _):
            let reply = state.withLock { $0.pending.removeValue(forKey: id) }
            reply?(.success(message))
        case .error(let id?, _):
            let reply = state.withLock { $0.pending.removeValue(forKey: id) }
            reply?(.success(message))
        case .error(nil, let error):
            state.withLock { state in
                if [.unsupportedVersion, .permissionDenied].contains(error.code) { state.fatalError = error }
            }
        case .welcome:
            break
        }
    }
}

/// What the session's thread and its callers share (under ``SessionLock``).
private struct ClientState {
    var isClosed = false
    var isConnected = false
    var threadStarted = false
    var launched = false
    var reconnects = false
    var wantsEvents = false
    var lastDelivered: Int64 = 0
    var nextID = 1
    var outbox: [[UInt8]] = []
    var pending: [Int: @Sendable (Result<ServerMessage, SessionError>) -> Void] = [:]
    var connectWaiters: [(Result<Void, SessionError>) -> Void] = []
    var eventContinuation: AsyncStream<SessionEvent>.Continuation?
    var fatalError: SessionError?
    var decoder = FrameDecoder()

    mutating func enqueue(_ request: ClientRequest, reply: (@Sendable (Result<ServerMessage, SessionError>) -> Void)?) {
        let id = nextID
        nextID += 1
        if let reply { pending[id] = reply }
        outbox.append(FrameEncoder.frame(SessionCodec.encode(ClientMessage(id: id, request))))
    }
}
