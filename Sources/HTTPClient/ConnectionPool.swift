import Foundation
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
    }

    private let condition = NSCondition()
    // Guarded by `condition`. `nonisolated(unsafe)` because NSCondition is the lock.
    nonisolated(unsafe) private var state = State()
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
    var connectionsOpened: Int {
        condition.lock()
        defer { condition.unlock() }
        return state.connectionsOpened
    }

    /// How many idle connections the pool holds for `origin` (through `proxy`).
    func idleCount(for origin: Origin, proxy: ProxyURL? = nil) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return state.origins[ConnectionKey(origin: origin, proxy: proxy)]?.idle.count ?? 0
    }

    /// Whether a request sent ahead on `origin` once went unanswered (see ``DKHTTPClient``'s series).
    func refusesPipelining(_ origin: ConnectionKey) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return state.refusesPipelining.contains(origin)
    }

    /// Stops pipelining on `origin` for the pool's lifetime.
    func recordPipeliningRefused(_ origin: ConnectionKey) {
        condition.lock()
        state.refusesPipelining.insert(origin)
        condition.unlock()
    }

    /// The family that won the last connection to `hostAndPort`, tried first next time.
    func preferredFamily(for hostAndPort: String) -> AddressFamily? {
        condition.lock()
        defer { condition.unlock() }
        return state.families[hostAndPort]
    }

    /// Remembers the family a connection to `hostAndPort` used.
    func recordFamily(_ family: AddressFamily, for hostAndPort: String) {
        condition.lock()
        state.families[hostAndPort] = family
        condition.unlock()
    }

    enum Slot {
        case idle(ConnectionLease)
        case new(connectionID: Int)
    }

    /// Takes an idle connection or reserves the right to open a new one. Blocks while the origin is at
    /// its bound. `preferFresh` skips idle connections (used for the one retry after a stale reuse).
    func reserve(origin: ConnectionKey, deadline: Deadline, preferFresh: Bool, isCancelled: () -> Bool) throws(TransportError)
        -> Slot
    {
        var stale: [ConnectionLease] = []
        defer {
            // Close discarded connections outside the lock.
            for lease in stale { lease.connection.close() }
        }
        condition.lock()
        defer { condition.unlock() }
        while true {
            if isCancelled() {
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
            if deadline.hasPassed {
                throw TransportError(
                    .connectTimeout,
                    detail: "timed out waiting for a free connection to \(origin) (limit \(maxPerOrigin) per origin)")
            }
            // Wake up periodically to notice cancellation and the deadline.
            _ = condition.wait(until: Date(timeIntervalSinceNow: min(0.05, max(0.001, Double(deadline.remainingMilliseconds) / 1000))))
        }
    }

    /// Gives back a reserved slot whose connection could not be opened.
    func cancelReservation(origin: ConnectionKey) {
        condition.lock()
        state.origins[origin, default: OriginState()].open -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Returns a connection after an exchange. Reusable connections go back to the idle list;
    /// others are closed.
    func release(_ lease: ConnectionLease, reusable: Bool) {
        condition.lock()
        if reusable {
            lease.idleSince = monotonicSeconds()
            state.origins[lease.origin, default: OriginState()].idle.append(lease)
            condition.broadcast()
            condition.unlock()
        } else {
            state.origins[lease.origin, default: OriginState()].open -= 1
            condition.broadcast()
            condition.unlock()
            lease.connection.close()
        }
    }

    /// Closes every idle connection. Busy connections are closed when their exchange returns them.
    func closeAll() {
        condition.lock()
        var toClose: [ConnectionLease] = []
        for (origin, var originState) in state.origins {
            toClose += originState.idle
            originState.open -= originState.idle.count
            originState.idle = []
            state.origins[origin] = originState
        }
        condition.broadcast()
        condition.unlock()
        for lease in toClose { lease.connection.close() }
    }
}
