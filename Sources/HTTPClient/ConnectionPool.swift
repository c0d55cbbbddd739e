import HTTPWire

/// What a pooled connection is good for: requests to one origin over one route (direct, or through
/// one proxy). Connections through different proxies, or direct and proxied, are never shared.
struct ConnectionKey: Sendable, Hashable, CustomStringConvertible {
    /// The origin the requests go to.
    var origin: Origin
    /// The proxy in between, or `nil`.
    var proxy: ProxyURL?

    var description: String { proxy.map { "\(origin) via \($0)" } ?? origin.description }
}

/// A connection taken from the pool for exactly one exchange.
///
/// `@unchecked Sendable`: a `Connection` belongs to one thread at a time. The pool hands a lease to
/// one caller under its lock and takes it back under the same lock, so no two threads ever use the
/// wrapped connection at once; the lock's acquire/release orders their accesses.
final class ConnectionLease: @unchecked Sendable {
    let connection: Connection
    let origin: ConnectionKey
    /// Whether this connection already carried at least one exchange before this one.
    let isReused: Bool
    /// A number identifying the connection within its pool, for logs and tests.
    let connectionID: Int
    /// When the connection was last returned to the pool (monotonic seconds).
    var idleSince: Double

    init(connection: Connection, origin: ConnectionKey, isReused: Bool, connectionID: Int, idleSince: Double) {
        self.connection = connection
        self.origin = origin
        self.isReused = isReused
        self.connectionID = connectionID
        self.idleSince = idleSince
    }
}

/// Keeps kept-alive connections per origin and bounds how many may be open to one origin at once.
///
/// `acquire` returns an idle connection when one is usable (not expired, no unsolicited bytes or EOF
/// pending), otherwise opens a new one when the origin is under its bound, otherwise waits on the
/// calling thread until another exchange returns or discards a connection, or the deadline passes.
final class ConnectionPool: Sendable {
    private struct OriginState {
        var idle: [ConnectionLease] = []
        /// Connections to this origin that exist now: busy plus idle plus being opened.
        var open = 0
    }

    private struct State {
        var origins: [ConnectionKey: OriginState] = [:]
        /// The address family that last won Happy Eyeballs per dialled "host:port".
        var families: [String: AddressFamily] = [:]
        /// Routes on which a request sent ahead went unanswered: nothing is pipelined on them again.
        var refusesPipelining: Set<ConnectionKey> = []
        var nextConnectionID = 1
        var connectionsOpened = 0
        /// How many times a caller of `reserve` waiting for a slot woke up (tests: the wait sleeps until a
        /// connection comes back, the caller is cancelled or its deadline passes, with no timed slices).
        var wakeUps = 0
    }

    private let state = LockedValue(State())
    let maxPerOrigin: Int
    let idleLifetime: Double

    init(maxPerOrigin: Int, idleLifetime: Double) {
        self.maxPerOrigin = maxPerOrigin
        self.idleLifetime = idleLifetime
    }

    deinit {
        closeAll()
    }

    /// How many TCP connections this pool has opened since it was created.
    var connectionsOpened: Int { state.withLock { $0.connectionsOpened } }

    /// How many times callers waiting in ``reserve(origin:deadline:preferFresh:cancellation:)`` woke up.
    var waitWakeUps: Int { state.withLock { $0.wakeUps } }

    /// How many idle connections the pool holds for `origin` (through `proxy`).
    func idleCount(for origin: Origin, proxy: ProxyURL? = nil) -> Int {
        state.withLock { $0.origins[ConnectionKey(origin: origin, proxy: proxy)]?.idle.count ?? 0 }
    }

    /// Whether a request sent ahead on `origin` once went unanswered (see ``DKHTTPClient``'s series).
    func refusesPipelining(_ origin: ConnectionKey) -> Bool {
        state.withLock { $0.refusesPipelining.contains(origin) }
    }

    /// Stops pipelining on `origin` for the pool's lifetime.
    func recordPipeliningRefused(_ origin: ConnectionKey) {
        state.withLock { _ = $0.refusesPipelining.insert(origin) }
    }

    /// The family that won the last connection to `hostAndPort`, tried first next time.
    func preferredFamily(for hostAndPort: String) -> AddressFamily? {
        state.withLock { $0.families[hostAndPort] }
    }

    /// Remembers the family a connection to `hostAndPort` used.
    func recordFamily(_ family: AddressFamily, for hostAndPort: String) {
        state.withLock { $0.families[hostAndPort] = family }
    }

    enum Slot {
        case idle(ConnectionLease)
        case new(connectionID: Int)
    }

    /// Takes an idle connection or reserves the right to open a new one. Blocks while the origin is at
    /// its bound, until a connection is returned or discarded, `cancellation` is cancelled (it wakes the
    /// wait) or the deadline passes. `preferFresh` skips idle connections (used for the one retry after a
    /// stale reuse).
    func reserve(origin: ConnectionKey, deadline: Deadline, preferFresh: Bool, cancellation: CancellationToken?)
        throws(TransportError) -> Slot
    {
        var stale: [ConnectionLease] = []
        defer {
            // Close discarded connections outside the lock.
            for lease in stale { lease.connection.close() }
        }
        let wake = cancellation?.onCancel { [state] in state.wakeWaiters() }
        defer { if let wake { cancellation?.removeOnCancel(wake) } }
        var woken = false
        let slot = try state.wait(until: deadline) { (state) throws(TransportError) -> Slot? in
            if woken { state.wakeUps += 1 }
            woken = true
            if cancellation?.isCancelled == true {
                throw TransportError(.cancelled, detail: "the request was cancelled while waiting for a connection")
            }
            var originState = state.origins[origin] ?? OriginState()
            let now = monotonicSeconds()
            if !preferFresh {
                while let lease = originState.idle.popLast() {
                    if now - lease.idleSince > idleLifetime || lease.connection.hasPendingInputOrEOF {
                        originState.open -= 1
                        stale.append(lease)
                        continue
                    }
                    state.origins[origin] = originState
                    return .idle(ConnectionLease(
                        connection: lease.connection, origin: origin, isReused: true,
                        connectionID: lease.connectionID, idleSince: now))
                }
            } else if originState.open >= maxPerOrigin, let oldest = originState.idle.first {
                // Make room for a fresh connection by dropping an idle one.
                originState.idle.removeFirst()
                originState.open -= 1
                stale.append(oldest)
            }
            if originState.open < maxPerOrigin {
                originState.open += 1
                let id = state.nextConnectionID
                state.nextConnectionID += 1
                state.connectionsOpened += 1
                state.origins[origin] = originState
                return .new(connectionID: id)
            }
            state.origins[origin] = originState
            return nil
        }
        guard let slot else {
            throw TransportError(
                .connectTimeout,
                detail: "timed out waiting for a free connection to \(origin) (limit \(maxPerOrigin) per origin)")
        }
        return slot
    }

    /// Gives back a reserved slot whose connection could not be opened.
    func cancelReservation(origin: ConnectionKey) {
        state.withLockWakingWaiters { $0.origins[origin, default: OriginState()].open -= 1 }
    }

    /// Returns a connection after an exchange. Reusable connections go back to the idle list;
    /// others are closed.
    func release(_ lease: ConnectionLease, reusable: Bool) {
        state.withLockWakingWaiters { state in
            if reusable {
                lease.idleSince = monotonicSeconds()
                state.origins[lease.origin, default: OriginState()].idle.append(lease)
            } else {
                state.origins[lease.origin, default: OriginState()].open -= 1
            }
        }
        if !reusable { lease.connection.close() }
    }

    /// Closes every idle connection. Busy connections are closed when their exchange returns them.
    func closeAll() {
        let toClose = state.withLockWakingWaiters { state in
            var toClose: [ConnectionLease] = []
            for (origin, var originState) in state.origins {
                toClose += originState.idle
                originState.open -= originState.idle.count
                originState.idle = []
                state.origins[origin] = originState
            }
            return toClose
        }
        for lease in toClose { lease.connection.close() }
    }
}
