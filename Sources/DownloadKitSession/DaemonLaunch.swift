import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How a ``BackgroundSession`` may start `downloadkitd` when none answers (opt-in; by default a session
/// starts nothing).
public struct DaemonLaunch: Sendable, Hashable {
    /// The daemon executable: `downloadkitd`, or `downloadkit` with `daemon` as the first argument.
    public var executable: String
    /// Its arguments; the session adds `--socket <its socket path>` when they name no socket.
    public var arguments: [String]
    /// Where the daemon's log (stderr) goes; default `/dev/null`.
    public var logPath: String
    /// How long to wait for the started daemon's socket, seconds.
    public var timeout: Double

    public init(executable: String, arguments: [String] = [], logPath: String = "/dev/null", timeout: Double = 10) {
        self.executable = executable
        self.arguments = arguments
        self.logPath = logPath
        self.timeout = timeout
    }

    /// Starts the daemon in its own session (it outlives this process), detached from this process's
    /// standard streams, with an empty signal mask.
    /// - Returns: Its pid.
    /// - Throws: ``SessionError`` `daemonUnavailable` when it cannot be started.
    func spawn(socketPath: String) throws(SessionError) -> pid_t {
        var arguments = self.arguments
        if !arguments.contains("--socket") { arguments += ["--socket", socketPath] }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        var defaults = sigset_t()
        sigfillset(&defaults)
        sigdelset(&defaults, SIGKILL)
        sigdelset(&defaults, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        let setsid: Int32 = 0x80  // POSIX_SPAWN_SETSID (glibc ≥ 2.26; hidden from Swift without _GNU_SOURCE)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | setsid))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        guard result == 0 else {
            throw SessionError(
                .daemonUnavailable, "cannot start \(executable): \(String(cString: strerror(result)))")
        }
        return pid
    }
}
