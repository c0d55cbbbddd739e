import Foundation
import TestOrigin
import Glibc

/// What one measured child process cost: wall time from spawn to reaping, and the kernel's own
/// accounting of exactly that child (`wait4`), so CPU and peak RSS are not diluted by the bench.
struct Measurement: Sendable {
    /// Seconds from just before `posix_spawn` to just after `wait4` returned.
    var wallSeconds: Double
    /// `ru_utime` of the child, seconds.
    var userSeconds: Double
    /// `ru_stime` of the child, seconds.
    var systemSeconds: Double
    /// `ru_maxrss` of the child, KiB.
    var maxRSSKiB: Int
    /// Exit status (meaningful when `signal` is nil).
    var exitStatus: Int32
    /// The terminating signal, if any.
    var signal: Int32?
    /// Whether `maxRSSKiB` is the client's own peak (false: it includes the bench's address space).
    var rssIsExact = true

    var succeeded: Bool { signal == nil && exitStatus == 0 }
    var cpuSeconds: Double { userSeconds + systemSeconds }
}

enum MeasureError: Error, CustomStringConvertible {
    case spawn(String, Int32)
    case wait(Int32)

    var description: String {
        switch self {
        case .spawn(let path, let code): return "posix_spawn \(path): \(String(cString: strerror(code)))"
        case .wait(let code): return "wait4: \(String(cString: strerror(code)))"
        }
    }
}

/// The monotonic clock in seconds.
func monotonicSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// GNU time, used as a small launcher so peak RSS is the client's own (see ``measure``).
let gnuTimePath: String? = FileManager.default.isExecutableFile(atPath: "/usr/bin/time") ? "/usr/bin/time" : nil

/// Runs `executable` with `arguments` to completion and measures it.
///
/// Spawned like TestOrigin's `ChildProcess` (empty signal mask, default dispositions), stdin
/// `/dev/null`, stdout to `stdoutPath`, stderr to `stderrPath`, extra environment entries added.
/// Reaped with `wait4` on its own pid: wall time, user and system time are that child's (plus its
/// reaped descendants').
///
/// Peak RSS needs care: Linux carries the high-water RSS of the address space a process `exec`s
/// from into its `ru_maxrss`, and `posix_spawn` execs from the parent's address space (vfork), so
/// every child would report at least this bench's own ~38 MiB. When GNU time is installed the
/// client is therefore started through it (`/usr/bin/time -f %M`): a ~2 MiB process forks and execs
/// the client, and its `wait4` reports the client's true peak RSS. Its own CPU cost (about a
/// millisecond) is included in the user and system times. Without GNU time, `rssIsExact` is false.
func measure(
    _ executable: String, _ arguments: [String], stdoutPath: String, stderrPath: String,
    environment extra: [String: String] = [:]
) throws -> Measurement {
    try warmExecutable(executable)
    guard let gnuTimePath else {
        var result = try spawnAndWait(
            executable, arguments, stdoutPath: stdoutPath, stderrPath: stderrPath, environment: extra)
        result.rssIsExact = false
        return result
    }
    let rssPath = stdoutPath + ".rss"
    unlink(rssPath)
    var result = try spawnAndWait(
        gnuTimePath, ["-f", "%M", "-o", rssPath, "--", executable] + arguments, stdoutPath: stdoutPath,
        stderrPath: stderrPath, environment: extra)
    // The last line is %M; a failed command adds "Command exited with non-zero status N" before it.
    let text = (try? String(contentsOfFile: rssPath, encoding: .utf8)) ?? ""
    if let line = text.split(whereSeparator: \.isNewline).last, let kibibytes = Int(line) {
        result.maxRSSKiB = kibibytes
    } else {
        result.rssIsExact = false
    }
    unlink(rssPath)
    return result
}

/// Runs `executable` directly (no GNU time launcher, so its peak RSS is not exact) and sends it
/// SIGKILL as soon as `shouldKill` returns true; `shouldKill` is polled every 2 ms while it runs.
/// - Returns: The measurement (its `signal` is SIGKILL when it was killed).
func measureKilling(
    _ executable: String, _ arguments: [String], stdoutPath: String, stderrPath: String,
    environment extra: [String: String] = [:], timeout: Double, shouldKill: () -> Bool
) throws -> Measurement {
    try warmExecutable(executable)
    let (child, start) = try spawnChild(
        executable, arguments, stdoutPath: stdoutPath, stderrPath: stderrPath, environment: extra)
    var status: Int32 = 0
    var usage = rusage()
    var killed = false
    while true {
        let reaped = wait4(child, &status, killed ? 0 : WNOHANG, &usage)
        if reaped == child { break }
        if reaped < 0 && errno == EINTR { continue }
        if reaped < 0 { throw MeasureError.wait(errno) }
        if !killed && (shouldKill() || monotonicSeconds() - start > timeout) {
            kill(child, SIGKILL)
            killed = true
            continue
        }
        usleep(2000)
    }
    var result = decode(status: status, usage: usage, start: start, end: monotonicSeconds())
    result.rssIsExact = false
    return result
}

private func spawnAndWait(
    _ executable: String, _ arguments: [String], stdoutPath: String, stderrPath: String,
    environment extra: [String: String]
) throws -> Measurement {
    let (child, start) = try spawnChild(
        executable, arguments, stdoutPath: stdoutPath, stderrPath: stderrPath, environment: extra)
    var status: Int32 = 0
    var usage = rusage()
    while true {
        let reaped = wait4(child, &status, 0, &usage)
        if reaped == child { break }
        if reaped < 0 && errno == EINTR { continue }
        throw MeasureError.wait(errno)
    }
    return decode(status: status, usage: usage, start: start, end: monotonicSeconds())
}

private func decode(status: Int32, usage: rusage, start: Double, end: Double) -> Measurement {
    func seconds(_ value: timeval) -> Double { Double(value.tv_sec) + Double(value.tv_usec) / 1e6 }
    // WIFSIGNALED / WEXITSTATUS are macros Swift does not import; decode the status word by hand.
    let terminatingSignal = status & 0x7f
    return Measurement(
        wallSeconds: end - start,
        userSeconds: seconds(usage.ru_utime),
        systemSeconds: seconds(usage.ru_stime),
        maxRSSKiB: usage.ru_maxrss,
        exitStatus: (status >> 8) & 0xff,
        signal: terminatingSignal == 0 ? nil : terminatingSignal)
}

/// Spawns the child (empty signal mask, default dispositions, stdin /dev/null, stdout and stderr to
/// files) with TestOrigin's `spawnProcess`. Returns its pid and the monotonic time just before the spawn.
private func spawnChild(
    _ executable: String, _ arguments: [String], stdoutPath: String, stderrPath: String,
    environment extra: [String: String]
) throws -> (pid: pid_t, start: Double) {
    let start = monotonicSeconds()
    let child = try spawnProcess(
        executable, arguments, standardOutput: stdoutPath, standardError: stderrPath, environment: extra)
    guard child.result == 0 else { throw MeasureError.spawn(executable, child.result) }
    return (child.pid, start)
}
