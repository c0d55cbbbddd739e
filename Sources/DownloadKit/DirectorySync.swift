import HTTPClient

/// Group commit of a directory's `fsync` (issue #18, small files): a caller needs a sync that *began
/// after* its own change (a rename into the directory); when one is already running, the caller waits
/// for it to end, and then one sync covers everyone who arrived meanwhile. Sixteen downloads finishing
/// into one directory share their directory syncs instead of running sixteen.
///
/// The rule as a value, without I/O: a caller takes a ticket with ``arrive()``, asks ``next(for:)``
/// what to do, and the one that leads reports ``finished(target:succeeded:)``; ``leave()`` when it
/// returns. A failed sync covers no one: every caller either returns after a successful sync that began
/// after it arrived, or runs one itself and gets that sync's own error.
struct GroupCommit: Sendable, Equatable {
    /// What a caller holding a ticket does now.
    enum Step: Equatable {
        /// A successful sync that began after the ticket was taken has ended.
        case done
        /// Run the sync; it covers every ticket up to `target`.
        case lead(target: UInt64)
        /// Another caller's sync is running; ask again when it ends.
        case wait
    }

    private(set) var issued: UInt64 = 0
    private(set) var covered: UInt64 = 0
    private(set) var leading = false
    /// Callers between ``arrive()`` and ``leave()``.
    private(set) var callers = 0

    /// Takes the next ticket (after the caller's own change).
    mutating func arrive() -> UInt64 {
        issued += 1
        callers += 1
        return issued
    }

    mutating func next(for ticket: UInt64) -> Step {
        if covered >= ticket { return .done }
        if leading { return .wait }
        leading = true
        return .lead(target: issued)
    }

    /// The leader's sync ended: on success every ticket up to `target` is covered.
    mutating func finished(target: UInt64, succeeded: Bool) {
        leading = false
        if succeeded { covered = max(covered, target) }
    }

    /// The caller returns (done, or with its own sync's error).
    mutating func leave() { callers -= 1 }

    /// No caller is inside: the state can be forgotten (the next caller starts a new one).
    var isIdle: Bool { callers == 0 && !leading }
}

/// Performs directory syncs through ``GroupCommit``, one state per directory path.
final class DirectorySync: Sendable {
    static let shared = DirectorySync()

    /// The states by directory; a caller whose sync is running waits on it for the leader's wake-up.
    private let states = LockedValue<[String: GroupCommit]>([:])

    /// Returns once `sync` has succeeded for `directory` in a call that began after this one was made,
    /// or throws the error of this caller's own call of `sync`.
    func sync<Failure: Error>(_ directory: String, _ sync: () throws(Failure) -> Void) throws(Failure) {
        var ticket: UInt64?
        // Arriving and the first look at the state are one critical section, as every later look is.
        let step = states.wait { states -> GroupCommit.Step? in
            let mine = ticket ?? states[directory, default: GroupCommit()].arrive()
            ticket = mine
            let step = states[directory, default: GroupCommit()].next(for: mine)
            switch step {
            case .done:
                Self.leave(directory, &states)
                return step
            case .wait:
                return nil
            case .lead:
                return step
            }
        }
        guard case .lead(let target) = step else { return }
        var failure: Failure?
        do throws(Failure) {
            try sync()
        } catch {
            failure = error
        }
        // A successful sync covers the leader's own ticket (its target is at least that ticket), so the
        // leader returns either way; the waiters look again (woken after the unlock).
        states.withLockWakingWaiters { states in
            states[directory, default: GroupCommit()].finished(target: target, succeeded: failure == nil)
            Self.leave(directory, &states)
        }
        if let failure { throw failure }
    }

    /// A caller leaves `directory`'s state (under the lock); the last one forgets it.
    private static func leave(_ directory: String, _ states: inout [String: GroupCommit]) {
        states[directory]?.leave()
        if states[directory]?.isIdle == true { states[directory] = nil }
    }
}
