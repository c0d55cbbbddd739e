import Glibc
import HTTPClient

/// A lease holder's permission to write one destination's working files: the fencing of a fleet of
/// workers sharing a queue (docs/FLEET.md).
///
/// A worker that holds a task's lease passes a fence to the download it starts for the task
/// (``FileIOHooks/fence`` in ``DownloadConfiguration/fileIO``: the value, not a registry keyed by path),
/// and moves the fence's deadline forward each time its heartbeat renews the lease. A download started
/// again for the task (a retry, the next holder after a hand-over) gets the holder's fence the same way.
/// Every write the engine makes to the download's working files — each body write, each
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
/// database confirms, not only the local clock. The engine never lets the kernel move (`splice(2)`) the
/// body of a fenced download, which would bypass the per-write check.
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
    func admit(_ operation: Operation) -> Bool {
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
}
