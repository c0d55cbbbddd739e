/// curl's `--speed-limit`/`--speed-time` for one connection: below `limit` bytes/s averaged over
/// `seconds`, the transfer is too slow. The one low-speed rule of the single-connection engine and of
/// every segment worker; time is an input (`now`, seconds on any monotonic clock), so the window is a
/// function of what it was told (table-tested in `LowSpeedWindowTests`).
package struct LowSpeedWindow: Sendable, Hashable {
    /// The lowest acceptable rate, bytes per second; 0 turns the rule off.
    package let limit: Int
    /// How long the rate is averaged before it is judged, seconds.
    package let seconds: Double
    private var start = 0.0
    private var bytes: Int64 = 0

    package init(limit: Int, seconds: Double) {
        self.limit = limit
        self.seconds = seconds
    }

    /// Counts `count` bytes received at `now`; returns the window's rate when it closed below the limit.
    /// A window that closed at or above the limit starts a new one at `now`.
    package mutating func record(_ count: Int, now: Double) -> Double? {
        guard limit > 0 else { return nil }
        if start == 0 { start = now }
        bytes += Int64(count)
        let elapsed = now - start
        guard elapsed >= seconds else { return nil }
        let rate = Double(bytes) / elapsed
        start = now
        bytes = 0
        return rate < Double(limit) ? rate : nil
    }

    /// Starts a new window at the next ``record(_:now:)`` (a new attempt or a new source).
    package mutating func reset() {
        start = 0
        bytes = 0
    }
}
