import Glibc
import HTTPClient
import HTTPWire
import Synchronization

/// A lease holder's permission to write one destination's working files: the fencing of a fleet of
/// workers sharing a queue (docs/FLEET.md).
///
/// A worker that holds a task's lease installs a fence for the task's partial (`.dkpart`) and resume
/// info (`.dkresume`) before it starts the download, and moves the fence's deadline forward each time
/// its heartbeat renews the lease. Every write the engine makes to those files — each body write, each
/// truncation, each checkpoint (the partial's `fdatasync` and the resume info's rename), the final
/// rename into place and the removal of the working files — first checks the fence; once the deadline
/// has passed (a worker paused by SIGSTOP past its lease, a heartbeat that could not renew) or the fence
/// was revoked (another worker holds a newer epoch), the write fails with `EPERM` and the download ends
/// with a `fileSystem` error, writing nothing more. The check costs one lock and a clock read.
///
/// The deadline is the local monotonic clock's, set from the moment a renewal was *sent* plus the lease
/// time less a margin, so it passes before the database lets another worker claim the task. A fence may
/// also carry a `confirm` closure, asked (on the engine's own thread, which may block) before every
/// checkpoint and before the final rename: the fleet worker checks there that the database still names
/// it the holder of the lease's epoch, so progress is committed and a file placed only under a lease the
/// database confirms, not only the local clock. Bodies
/// moved by `splice(2)` bypass the per-write check: the engine only splices when no rate limiter is
/// configured, so a fenced download must have one (the fleet worker always gives one).
public final class WriteFence: Sendable {
    /// What a write is, for ``WriteFence/init(until:confirm:)``'s `confirm`.
    public enum Operation: Sendable, Hashable {
        /// A body write, a truncation, an unlink of a working file: checked against the deadline only.
        case write
        /// A checkpoint: the partial's `fdatasync` or the resume info's rename.
        case checkpoint
        /// The rename (or link) of the finished partial into place.
        case finalRename
    }

    private struct State {
        var deadline: Double
        var revoked: Bool
        var refusals: Int
    }

    private let state: LockedValue<State>
    private let confirm: (@Sendable (Operation) -> Bool)?

    /// A fence that allows writes until `deadline`, a ``WriteFence/now`` value; `confirm`, when given, is
    /// asked before each checkpoint and the final rename too (false refuses it).
    public init(until deadline: Double, confirm: (@Sendable (Operation) -> Bool)? = nil) {
        state = LockedValue(State(deadline: deadline, revoked: false, refusals: 0))
        self.confirm = confirm
    }

    /// The monotonic clock the deadlines are in (seconds).
    public static var now: Double { monotonicSeconds() }

    /// Moves the deadline to `deadline` (never backwards); nothing after ``revoke()``.
    public func extend(until deadline: Double) {
        state.withLock { state in
            if !state.revoked, deadline > state.deadline { state.deadline = deadline }
        }
    }

    /// Refuses every later write for good (the lease is lost).
    public func revoke() {
        state.withLock { $0.revoked = true }
    }

    /// Whether a write would be allowed now.
    public var allowsWrites: Bool {
        let now = monotonicSeconds()
        return state.withLock { !$0.revoked && now < $0.deadline }
    }

    /// How many writes this fence has refused.
    public var refusedWrites: Int { state.withLock { $0.refusals } }

    /// Counts and answers one write.
    fileprivate func admit(_ operation: Operation) -> Bool {
        let now = monotonicSeconds()
        let inTime = state.withLock { state in
            if !state.revoked && now < state.deadline { return true }
            state.refusals += 1
            return false
        }
        guard inTime else { return false }
        guard operation != .write, let confirm else { return true }
        if confirm(operation) && allowsWrites { return true }
        state.withLock { $0.refusals += 1 }
        return false
    }

    // MARK: - Registry

    /// The fences by path; `installed` counts them, so a process without fences (every program but a
    /// fleet worker) pays one atomic load per write and never takes the lock.
    private static let fences = LockedValue<[String: WriteFence]>([:])
    private static let installed = Atomic<Int>(0)

    /// Guards the working files of a download to `destination` from `url` with `fence` until
    /// ``remove(destination:url:)``. Use the same absolute destination the download is given.
    public static func install(_ fence: WriteFence, destination: DownloadDestination, url: String) throws {
        let files = try workingFiles(destination: destination, url: url)
        fences.withLock { fences in
            for path in files { fences[path] = fence }
            installed.store(fences.count, ordering: .releasing)
        }
    }

    /// Removes the fence of a download's working files (after the download ended).
    public static func remove(destination: DownloadDestination, url: String, fence: WriteFence) {
        guard let files = try? workingFiles(destination: destination, url: url) else { return }
        fences.withLock { fences in
            for path in files where fences[path] === fence { fences[path] = nil }
            installed.store(fences.count, ordering: .releasing)
        }
    }

    private static func workingFiles(destination: DownloadDestination, url: String) throws -> [String] {
        let parsed = try HTTPURL(url)
        let working = WorkingFiles(destination: destination, workingDirectory: nil, url: parsed)
        return [working.partial, working.resumeInfo]
    }

    /// Whether a fence guards `path`: its writes must each be admitted, so its body is never spliced by
    /// the kernel past the fence (issue #19).
    static func guards(_ path: String) -> Bool {
        installed.load(ordering: .acquiring) > 0 && fences.withLock({ $0[path] }) != nil
    }

    /// Whether `path` (a partial or resume info) may be written now: true unless a fence guards it and
    /// refuses.
    static func admits(_ path: String, _ kind: Operation = .write) -> Bool {
        guard installed.load(ordering: .acquiring) > 0, let fence = fences.withLock({ $0[path] }) else { return true }
        return fence.admit(kind)
    }

    /// Throws `EPERM` for `operation` on `path` when a fence refuses.
    static func check(_ operation: String, _ path: String, _ kind: Operation = .write) throws(FileSystemError) {
        if !admits(path, kind) {
            throw FileSystemError(operation + " (fenced: the lease on this download is lost)", path: path, errno: EPERM)
        }
    }
}
