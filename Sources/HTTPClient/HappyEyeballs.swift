/// Which IP versions a connection may use.
public enum AddressFamily: String, Sendable, Hashable, CaseIterable {
    /// IPv6 and IPv4, raced with Happy Eyeballs (the default).
    case any
    /// IPv4 only (`-4`).
    case ipv4
    /// IPv6 only (`-6`).
    case ipv6
}

/// The decisions of Happy Eyeballs version 2 (RFC 8305) for one connection, as a value: events in
/// (addresses known, an attempt connected or failed, the timer fired), actions out (start an attempt,
/// cancel attempts, succeed, fail). No sockets, no clock: the caller passes the time with each event,
/// so tests drive it with a virtual clock.
///
/// Rules: addresses are attempted in the interleaved order of ``order(families:preferring:)``; the
/// first attempt starts at once; while earlier attempts are still pending, the next one starts
/// ``attemptDelay`` after the previous one started (RFC 8305 §5, "Connection Attempt Delay",
/// 250 ms recommended); when an attempt fails, the next starts at once; the first attempt that
/// connects wins and every other pending attempt is cancelled; when all have failed, the
/// connection fails.
struct HappyEyeballs: Sendable {
    /// A family as the state machine needs it.
    enum Family: Sendable, Hashable {
        case v4, v6
    }

    /// What the executor must do.
    enum Action: Sendable, Hashable {
        /// Start a non-blocking connect to the address with this index (into the ordered list).
        case startAttempt(Int)
        /// Abandon the pending attempt with this index (close its socket).
        case cancelAttempt(Int)
        /// The attempt with this index won: use its socket.
        case succeed(Int)
        /// Every attempt failed.
        case fail
    }

    /// RFC 8305 §8's recommended Connection Attempt Delay: 250 ms, in nanoseconds.
    static let attemptDelay: UInt64 = 250_000_000

    /// How many addresses there are to try.
    let count: Int
    /// The delay between attempt starts (nanoseconds).
    let delay: UInt64
    /// The next address index to start.
    private(set) var nextIndex = 0
    /// Attempts started and neither connected nor failed.
    private(set) var pending: [Int] = []
    /// When the next attempt starts if nothing else happens first (monotonic ns), or `nil`.
    private(set) var nextAttemptAt: UInt64?
    /// Whether the race is over (succeeded or failed).
    private(set) var isFinished = false

    /// A race over `count` ordered addresses.
    init(count: Int, delay: UInt64 = HappyEyeballs.attemptDelay) {
        self.count = count
        self.delay = delay
    }

    /// Starts the race at time `now`.
    mutating func start(now: UInt64) -> [Action] {
        guard count > 0 else {
            isFinished = true
            return [.fail]
        }
        return [startNext(now: now)]
    }

    /// The timer fired at `now`: starts the next attempt when its time has come.
    mutating func timerFired(now: UInt64) -> [Action] {
        guard !isFinished, let due = nextAttemptAt, now >= due, nextIndex < count else { return [] }
        return [startNext(now: now)]
    }

    /// The attempt `index` connected at `now`: it wins, the others are cancelled.
    mutating func attemptConnected(_ index: Int, now: UInt64) -> [Action] {
        guard !isFinished, pending.contains(index) else { return [] }
        isFinished = true
        nextAttemptAt = nil
        let losers = pending.filter { $0 != index }
        pending = []
        return losers.map(Action.cancelAttempt) + [.succeed(index)]
    }

    /// The attempt `index` failed at `now`: the next address starts at once; when none is left and
    /// none is pending, the race fails.
    mutating func attemptFailed(_ index: Int, now: UInt64) -> [Action] {
        guard !isFinished, let position = pending.firstIndex(of: index) else { return [] }
        pending.remove(at: position)
        if nextIndex < count { return [startNext(now: now)] }
        if pending.isEmpty {
            isFinished = true
            nextAttemptAt = nil
            return [.fail]
        }
        return []
    }

    /// The deadline passed: every pending attempt is cancelled and the race fails.
    mutating func timedOut() -> [Action] {
        guard !isFinished else { return [] }
        isFinished = true
        nextAttemptAt = nil
        let cancelled = pending.map(Action.cancelAttempt)
        pending = []
        return cancelled + [.fail]
    }

    private mutating func startNext(now: UInt64) -> Action {
        let index = nextIndex
        nextIndex += 1
        pending.append(index)
        nextAttemptAt = nextIndex < count ? now + delay : nil
        return .startAttempt(index)
    }

    /// The attempt order (RFC 8305 §4): families interleaved, starting with `preferring` when given,
    /// else with IPv6 when there is any; within a family the resolver's order is kept.
    /// - Returns: Indices into `families`.
    static func order(families: [Family], preferring: Family?) -> [Int] {
        let first = preferring ?? (families.contains(.v6) ? .v6 : .v4)
        var primary = families.indices.filter { families[$0] == first }[...]
        var secondary = families.indices.filter { families[$0] != first }[...]
        var result: [Int] = []
        while !primary.isEmpty || !secondary.isEmpty {
            if let next = primary.popFirst() { result.append(next) }
            if let next = secondary.popFirst() { result.append(next) }
        }
        return result
    }
}

/// How ``Connection/connect(host:port:tls:serverName:deadline:options:)`` picks and races addresses.
public struct ConnectOptions: Sendable, Hashable {
    /// Which IP versions may be used (`-4`/`-6` in the CLI). Default `.any`.
    public var addressFamily: AddressFamily
    /// The family to try first (the pool passes the one that won last time for the host); `nil` or
    /// `.any` means IPv6 first when the host has IPv6 addresses.
    public var preferredFamily: AddressFamily?
    /// IP literals to use instead of resolving the host (like curl's `--resolve`); `nil` resolves.
    public var addressOverride: [String]?
    /// RFC 8305's Connection Attempt Delay. Default 250 ms.
    public var attemptDelay: Duration

    /// Creates options; the defaults race every address with a 250 ms delay.
    public init(
        addressFamily: AddressFamily = .any, preferredFamily: AddressFamily? = nil, addressOverride: [String]? = nil,
        attemptDelay: Duration = .milliseconds(250)
    ) {
        self.addressFamily = addressFamily
        self.preferredFamily = preferredFamily
        self.addressOverride = addressOverride
        self.attemptDelay = attemptDelay
    }
}
