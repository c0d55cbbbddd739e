import Foundation

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
final class DirectorySync: @unchecked Sendable {
    static let shared = DirectorySync()

    private let condition = NSCondition()
    // Guarded by `condition`.
    private var states: [String: GroupCommit] = [:]

    /// Returns once `sync` has succeeded for `directory` in a call that began after this one was made,
    /// or throws the error of this caller's own call of `sync`.
    func sync<Failure: Error>(_ directory: String, _ sync: () throws(Failure) -> Void) throws(Failure) {
        condition.lock()
        let ticket = states[directory, default: GroupCommit()].arrive()
        while true {
            switch states[directory, default: GroupCommit()].next(for: ticket) {
            case .done:
                leave(directory)
                condition.unlock()
                return
            case .wait:
                condition.wait()
            case .lead(let target):
                condition.unlock()
                var failure: Failure?
                do throws(Failure) {
                    try sync()
                } catch {
                    failure = error
                }
                condition.lock()
                states[directory, default: GroupCommit()].finished(target: target, succeeded: failure == nil)
                // A successful sync covers the leader's own ticket (its target is at least that ticket),
                // so the leader returns either way. The waiters are woken after the unlock, so that they
                // do not wake only to block on the lock the leader still holds.
                leave(directory)
                condition.unlock()
                condition.broadcast()
                if let failure { throw failure }
                return
            }
        }
    }

    /// A caller leaves `directory`'s state (the condition locked); the last one forgets it.
    private func leave(_ directory: String) {
        states[directory]?.leave()
        if states[directory]?.isIdle == true { states[directory] = nil }
    }
}
