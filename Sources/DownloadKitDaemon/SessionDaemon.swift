import Dispatch
import DownloadKit
import DownloadKitManager
import DownloadKitRuntime
import DownloadKitSession
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `downloadkitd`: owns a `DownloadManager` per session identifier and serves the session protocol on
/// a Unix socket (docs/DAEMON.md). Runs in the foreground until SIGTERM or SIGINT, then checkpoints every
/// transfer and returns.
public final class SessionDaemon: Sendable {
    /// What the daemon is started with.
    public struct Options: Sendable {
        /// The directory holding `<identifier>/` per session.
        public var stateRoot: String
        /// The control socket.
        public var socketPath: String
        /// Settings of every session's manager (`startsRestoredTasks` is always on).
        public var configuration: DownloadManagerConfiguration
        /// Bounds of the control socket's clients (connections, buffers, timeouts).
        public var limits: ControlServer.Limits

        public init(
            stateRoot: String? = nil, socketPath: String? = nil, configuration: DownloadManagerConfiguration = .init(),
            limits: ControlServer.Limits = .init()
        ) {
            self.stateRoot = stateRoot ?? Self.defaultStateRoot
            self.socketPath = socketPath ?? UnixSocket.defaultPath
            self.configuration = configuration
            self.limits = limits
        }

        /// `$XDG_STATE_HOME/downloadkit/sessions`, else `~/.local/state/downloadkit/sessions`.
        public static var defaultStateRoot: String {
            let environment = ProcessInfo.processInfo.environment
            if let xdg = environment["XDG_STATE_HOME"], xdg.hasPrefix("/") { return xdg + "/downloadkit/sessions" }
            let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
            return home + "/.local/state/downloadkit/sessions"
        }
    }

    public let options: Options
    private let logger: Logger

    public init(options: Options, logger: Logger = Logger(label: "downloadkitd")) {
        self.options = options
        self.logger = logger
    }

    /// Runs until SIGTERM or SIGINT (or `stopSignal` fires), then stops accepting, checkpoints every
    /// transfer and returns.
    /// - Parameter ready: Called once the socket accepts connections.
    /// - Throws: ``DaemonError`` when the state directory or the socket cannot be set up.
    /// - Parameter frontEnd: Starts another front end over the sessions (the CLI's aria2 JSON-RPC
    ///   listener) once they are open; returns how to stop it, which runs before the sessions close.
    public func run(
        ready: @Sendable () -> Void = {},
        frontEnd: (@Sendable (SessionRegistry) async throws -> (@Sendable () async -> Void)?)? = nil
    ) async throws(DaemonError) {
        let lock = try lockStateRoot()
        defer { close(lock) }
        let wakeup = Wakeup()
        let registry = SessionRegistry(
            stateRoot: options.stateRoot, configuration: options.configuration, logger: logger,
            onAppend: { wakeup.signal() })
        let server = ControlServer(
            socketPath: options.socketPath, registry: registry, wakeup: wakeup, limits: options.limits, logger: logger)
        let signals = SignalWaiter()
        try server.start()
        // A session that started this daemon waits for this, not for the socket to appear.
        DaemonLaunch.announceReady()
        logger.info("downloadkitd listening on \(options.socketPath), state in \(options.stateRoot)")
        await registry.openExisting()
        var stopFrontEnd: (@Sendable () async -> Void)?
        if let frontEnd {
            do {
                stopFrontEnd = try await frontEnd(registry)
            } catch {
                server.stop()
                await registry.closeAll()
                throw DaemonError(.state, "cannot start the front end: \(error)")
            }
        }
        ready()
        await signals.wait()
        logger.info("downloadkitd stopping: checkpointing every transfer")
        await stopFrontEnd?()
        server.stop()
        await registry.closeAll()
        logger.info("downloadkitd stopped")
    }

    /// Creates the state root (0700) and takes `daemon.lock` in it: one daemon per state directory.
    private func lockStateRoot() throws(DaemonError) -> Int32 {
        let root = options.stateRoot
        do {
            try FileManager.default.createDirectory(
                atPath: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw DaemonError(.state, "cannot create the state directory \(root): \(error.localizedDescription)")
        }
        let fd = open(root + "/daemon.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw DaemonError(.state, "cannot open \(root)/daemon.lock: \(String(cString: strerror(errno)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw DaemonError(.alreadyRunning, "another downloadkitd uses the state directory \(root)")
        }
        let pid = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = pid.withCString { pwrite(fd, $0, strlen($0), 0) }
        return fd
    }
}

/// Waits for SIGTERM or SIGINT (dispatch signal sources; the default actions are ignored meanwhile).
final class SignalWaiter: Sendable {
    private let state = LockedValue<(fired: Bool, waiters: [CheckedContinuation<Void, Never>], sources: [any DispatchSourceSignal])>(
        (false, [], []))

    init() {
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.fire() }
            source.resume()
            sources.append(source)
        }
        state.withLock { $0.sources = sources }
    }

    private func fire() {
        let waiters = state.withLock { state in
            state.fired = true
            let waiters = state.waiters
            state.waiters = []
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let fired = state.withLock { state in
                if !state.fired { state.waiters.append(continuation) }
                return state.fired
            }
            if fired { continuation.resume() }
        }
    }
}

extension SessionDaemon {
    /// The daemon's command-line entry (`downloadkitd`, `downloadkit daemon`): logs through swift-log to
    /// stderr, runs until SIGTERM/SIGINT and returns the exit status (0 after a clean shutdown; 1 with an
    /// `error:` line when it cannot start).
    public static func main(
        stateRoot: String?, socketPath: String?, maxConcurrent: Int?, limits: ControlServer.Limits = .init(),
        frontEnd: (@Sendable (SessionRegistry) async throws -> (@Sendable () async -> Void)?)? = nil
    ) async -> Int32 {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .info
            return handler
        }
        var configuration = DownloadManagerConfiguration()
        if let maxConcurrent { configuration.maxConcurrentDownloads = max(1, maxConcurrent) }
        let options = Options(
            stateRoot: stateRoot.map(absolutePath), socketPath: socketPath.map(absolutePath), configuration: configuration,
            limits: limits)
        do {
            try await SessionDaemon(options: options).run(frontEnd: frontEnd)
            return 0
        } catch {
            FileHandle.standardError.write(Data("error: \(error.detail)\n".utf8))
            return 1
        }
    }

    /// `path` made absolute against the current directory.
    public static func absolutePath(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }
}
