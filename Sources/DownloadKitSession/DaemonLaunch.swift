import DownloadKitRuntime
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

    /// The environment variable that hands a started daemon the write end of its readiness pipe (always
    /// descriptor 3): the daemon writes one byte there once its socket accepts connections
    /// (``announceReady()``); the pipe's end of file without that byte means it stopped first.
    package static let readinessVariable = "DOWNLOADKIT_READY_FD"

    /// The descriptor a started daemon finds its readiness pipe on.
    static let readinessDescriptor: Int32 = 3

    /// Starts the daemon in its own session (it outlives this process), detached from this process's
    /// standard streams, with an empty signal mask, and with the write end of a readiness pipe
    /// (``readinessVariable``).
    /// - Returns: Its pid and the read end of its readiness pipe (close-on-exec; the caller closes it).
    /// - Throws: ``SessionError`` `daemonUnavailable` when it cannot be started.
    func spawn(socketPath: String) throws(SessionError) -> (pid: pid_t, readiness: Int32) {
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
        // Both ends close-on-exec here (pipe2 is not visible to Swift; a program spawning on another thread
        // in between could keep a copy of the write end, which only delays the end of file of a failed start
        // to the timeout); the child gets the write end as descriptor 3 (dup2 clears the flag), from a number
        // above it so dup2 never meets itself.
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            throw SessionError(.daemonUnavailable, "cannot start \(executable): pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let readEnd = ends[0]
        var writeEnd = ends[1]
        if writeEnd <= Self.readinessDescriptor {
            let moved = fcntl(writeEnd, F_DUPFD_CLOEXEC, Self.readinessDescriptor + 1)
            Glibc.close(writeEnd)
            writeEnd = moved
        }
        defer { Glibc.close(writeEnd) }
        guard writeEnd >= 0 else {
            Glibc.close(readEnd)
            throw SessionError(.daemonUnavailable, "cannot start \(executable): no descriptor for its readiness pipe")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, Self.readinessDescriptor)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var environment: [UnsafeMutablePointer<CChar>?] = [strdup("\(Self.readinessVariable)=\(Self.readinessDescriptor)")]
        var entry = environ
        while let variable = entry.pointee {
            if !String(cString: variable).hasPrefix(Self.readinessVariable + "=") { environment.append(strdup(variable)) }
            entry += 1
        }
        environment.append(nil)
        defer { for pointer in environment { free(pointer) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, environment)
        guard result == 0 else {
            Glibc.close(readEnd)
            throw SessionError(
                .daemonUnavailable, "cannot start \(executable): \(String(cString: strerror(result)))")
        }
        return (pid, readEnd)
    }

    /// Called by the daemon once its socket accepts connections: writes the readiness byte to the pipe a
    /// launching session handed it (``readinessVariable``), closes it and removes the variable, so nothing
    /// the daemon starts inherits either. Does nothing when the daemon was not started by a session, or
    /// when the descriptor named is not a pipe.
    package static func announceReady() {
        guard let value = getenv(readinessVariable) else { return }
        let text = String(cString: value)
        unsetenv(readinessVariable)
        var info = stat()
        guard let fd = Int32(text), fd > 2, fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFIFO else { return }
        var byte: UInt8 = 1
        _ = retryingInterrupts { write(fd, &byte, 1) }
        Glibc.close(fd)
    }
}
