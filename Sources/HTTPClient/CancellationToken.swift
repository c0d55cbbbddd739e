import Glibc

/// Cancels an exchange in progress from any thread.
///
/// Cancelling shuts the socket down (`shutdown(2)`), which wakes a blocked read at once; the exchange
/// then throws a `TransportError` with code `.cancelled`. A token may be reused across exchanges until it
/// is cancelled; once cancelled it stays cancelled.
public final class CancellationToken: Sendable {
    private struct State {
        var isCancelled = false
        var canceller: ConnectionCanceller?
        /// Called once on cancellation: waits that are not on the connection (a slot in the pool).
        var onCancel: [Int: @Sendable () -> Void] = [:]
        var nextOnCancel = 0
    }

    private let state = LockedValue(State())

    /// Creates a token that is not cancelled.
    public init() {}

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Cancels the current and any future exchange using this token.
    public func cancel() {
        let (canceller, onCancel) = state.withLock { state in
            state.isCancelled = true
            defer { state.onCancel = [:] }
            return (state.canceller, state.onCancel.values)
        }
        canceller?.cancel()
        for wake in onCancel { wake() }
    }

    /// Registers `wake` to be called (once, from the cancelling thread, outside this token's lock) when the
    /// token is cancelled; `nil` when it already is. Remove it with ``removeOnCancel(_:)`` when done.
    func onCancel(_ wake: @escaping @Sendable () -> Void) -> Int? {
        state.withLock { state in
            if state.isCancelled { return nil }
            defer { state.nextOnCancel += 1 }
            state.onCancel[state.nextOnCancel] = wake
            return state.nextOnCancel
        }
    }

    /// Forgets a closure registered with ``onCancel(_:)``.
    func removeOnCancel(_ key: Int) {
        _ = state.withLock { $0.onCancel.removeValue(forKey: key) }
    }

    /// Registers the connection of the running exchange. Returns `false` if already cancelled.
    func attach(_ canceller: ConnectionCanceller) -> Bool {
        state.withLock { state in
            if state.isCancelled { return false }
            state.canceller = canceller
            return true
        }
    }

    func detach() {
        state.withLock { $0.canceller = nil }
    }
}
