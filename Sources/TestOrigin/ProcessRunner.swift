import Foundation
@_exported import struct DownloadKitRuntime.WaitStatus
import Glibc

/// Runs helper programs (openssl, nginx -t) and finds executables.
public enum ProcessRunner {
    /// The outcome of a finished process.
    public struct Result: Sendable {
        /// The exit status (or the terminating signal number when `terminatedBySignal`).
        public var status: Int32
        /// Whether the process ended because of a signal.
        public var terminatedBySignal: Bool
        /// Standard output and standard error, interleaved, decoded as UTF-8 (lossy).
        public var output: String
        /// Whether the process exited normally with status 0.
        public var succeeded: Bool { !terminatedBySignal && status == 0 }
    }

    /// Runs `executable` with `arguments` to completion and captures its combined output.
    ///
    /// Started with ``spawnProcess(_:_:standardOutput:standardError:environment:currentDirectory:)`` (every other
    /// descriptor closed, signals at their defaults), its output going to a private file rather than a pipe, and
    /// waited for at most `timeout` seconds. With `Foundation.Process` and a pipe, a reader waited for the pipe's
    /// end, which came only when every process holding its write end had gone — a descendant the program left
    /// behind, or a child another test started at that instant (Foundation's pipe ends are inherited) — and
    /// with no bound a test stuck there held the whole run until CI's own limit ended it without a word.
    ///
    /// - Parameters:
    ///   - executable: An absolute path, or a bare name looked up with ``findExecutable(_:)``.
    ///   - arguments: The arguments, without the program name.
    ///   - currentDirectory: The working directory, or `nil` to inherit.
    ///   - timeout: How long the program may run; past it, it is killed (SIGKILL) and the call throws.
    /// - Throws: ``OriginError`` when the program cannot be found or launched, or ran past `timeout`. A non-zero
    ///   exit status is not an error; inspect ``Result/succeeded``.
    @discardableResult
    public static func run(
        _ executable: String, _ arguments: [String], currentDirectory: String? = nil, timeout: Double = 300
    ) throws -> Result {
        guard let path = executable.hasPrefix("/") ? executable : findExecutable(executable) else {
            throw OriginError("finding \(executable)", detail: "not found in PATH, /usr/sbin, /usr/local/sbin or /sbin")
        }
        let outputPath = FileManager.default.temporaryDirectory
            .appendingPathComponent("processrunner-\(getpid())-\(UUID().uuidString).out").path
        defer { unlink(outputPath) }
        let child = try ChildProcess(path, arguments, outputPath: outputPath, currentDirectory: currentDirectory)
        guard let status = child.waitForExit(timeout: timeout) else {
            child.send(SIGKILL)
            _ = child.waitForExit(timeout: 30)
            let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            throw OriginError(
                "running \(path) \(arguments.prefix(3).joined(separator: " "))",
                detail: "still running after \(Int(timeout)) s, killed; its output: \(output.suffix(500))")
        }
        let data = FileManager.default.contents(atPath: outputPath) ?? Data()
        let exit = WaitStatus(status)
        return Result(
            status: exit.signal ?? exit.exitCode,
            terminatedBySignal: exit.signal != nil,
            output: String(decoding: data, as: UTF8.self)
        )
    }

    /// The absolute path of an executable named `name`, searching `PATH` and then the sbin directories
    /// (which are often missing from a non-root `PATH`, and are where nginx lives).
    public static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]
        for directory in directories where !directory.isEmpty {
            let candidate = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}

/// A child process started with `posix_spawn`, with every signal unblocked and at its default action.
///
/// Foundation's `Process` passes the parent thread's signal mask to the child; test runners run on
/// threads that block most signals, so a server started that way never sees `SIGTERM` (nginx would only
/// stop on `SIGKILL`). Spawning with `POSIX_SPAWN_SETSIGMASK` (empty mask) and `POSIX_SPAWN_SETSIGDEF`
/// gives the child a clean slate.
///
/// `@unchecked Sendable`: `pid` is immutable; `exitStatus` is only read or written under `lock`, and
/// only this object reaps the child (`waitpid` on its own pid).
public final class ChildProcess: @unchecked Sendable {
    /// The child's process id.
    public let pid: pid_t
    private let lock = NSLock()
    private var exitStatus: Int32?

    /// Starts `executable` with `arguments`; standard output and standard error go to `outputPath`
    /// (created or truncated), standard input is `/dev/null`.
    ///
    /// - Throws: ``OriginError`` when `posix_spawn` fails (for example, a missing executable).
    public init(_ executable: String, _ arguments: [String], outputPath: String, currentDirectory: String? = nil) throws {
        let child = try spawnProcess(
            executable, arguments, standardOutput: outputPath, standardError: nil, currentDirectory: currentDirectory)
        guard child.result == 0 else {
            throw OriginError(
                "posix_spawn \(executable)", errno: child.result, detail: String(cString: strerror(child.result)))
        }
        pid = child.pid
    }

    deinit {
        if isRunning {
            kill(pid, SIGKILL)
            _ = waitForExit(timeout: 5)
        }
    }

    /// Whether the child has not exited yet (reaps it when it has).
    public var isRunning: Bool { pollExit() == nil }

    /// The raw `waitpid` status once the child has exited, else `nil`.
    public var terminationStatus: Int32? { pollExit() }

    /// Sends `signal` (e.g. `SIGTERM`) unless the child has already exited.
    public func send(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits up to `timeout` seconds for the child to exit.
    /// - Returns: The raw `waitpid` status, or `nil` if it is still running.
    public func waitForExit(timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let status = pollExit() { return status }
            if Date() >= deadline { return nil }
            usleep(2_000)
        }
    }

    /// Sends `SIGTERM`, waits up to `grace` seconds, then `SIGKILL` and waits for the exit.
    public func terminate(grace: Double = 5) {
        send(SIGTERM)
        if waitForExit(timeout: grace) == nil {
            kill(pid, SIGKILL)
            _ = waitForExit(timeout: 30)
        }
    }

    private func pollExit() -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid {
            exitStatus = status
        } else if result < 0 && errno == ECHILD {
            // Reaped by someone else; the child is gone either way.
            exitStatus = -1
        }
        return exitStatus
    }
}

/// Starts `executable` with `posix_spawn`, an empty signal mask and default signal dispositions — not
/// `Foundation.Process`, whose children inherit the blocked SIGTERM of test and Dispatch threads and
/// then ignore it. Standard input is `/dev/null`; standard output goes to `standardOutput` (created or
/// truncated) and standard error to `standardError`, or to standard output when nil.
/// - Parameters:
///   - environment: Variables set on top of this process's environment.
///   - currentDirectory: The child's working directory, or `nil` to inherit this process's.
/// - Returns: The child's pid and `posix_spawn`'s result (0 on success, else an errno value).
public func spawnProcess(
    _ executable: String, _ arguments: [String], standardOutput: String, standardError: String?,
    environment extra: [String: String] = [:], currentDirectory: String? = nil
) throws -> (pid: pid_t, result: Int32) {
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
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    // Close every other inherited descriptor: Foundation's Pipe ends are not close-on-exec, and a
    // long-lived child (nginx, a proxy) holding another thread's pipe would keep its reader from ever
    // seeing EOF (found when the proxy tests started their servers next to certificate generation).
    _ = closeFrom?(&actions, 3)
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, standardOutput, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    if let standardError {
        posix_spawn_file_actions_addopen(&actions, 2, standardError, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    } else {
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
    }
    if let currentDirectory {
        guard let changeDirectory else {
            throw OriginError("posix_spawn \(executable)", detail: "this C library has no posix_spawn_file_actions_addchdir_np")
        }
        _ = changeDirectory(&actions, currentDirectory)
    }

    var environment = ProcessInfo.processInfo.environment
    for (key, value) in extra { environment[key] = value }
    let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    var child = pid_t()
    let result = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
    return (child, result)
}

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), looked up at run time because
/// Glibc's Swift module does not export the GNU extensions.
private let closeFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
    guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "posix_spawn_file_actions_addclosefrom_np")
    else { return nil }
    return unsafeBitCast(
        symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
}()

/// glibc's `posix_spawn_file_actions_addchdir_np` (2.29+), looked up at run time for the same reason.
private let changeDirectory: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32)? = {
    guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "posix_spawn_file_actions_addchdir_np")
    else { return nil }
    return unsafeBitCast(
        symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32).self)
}()
