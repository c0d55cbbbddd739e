import Glibc

/// A point in time on the monotonic clock (`CLOCK_MONOTONIC`), used to bound every blocking
/// operation in this module.
///
/// The monotonic clock never jumps when the wall clock is changed, so a deadline measures elapsed
/// time only. Deadlines are absolute: one deadline can be passed to several calls (resolve, connect,
/// TLS handshake) and they share the budget.
public struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Nanoseconds since an arbitrary fixed point (usually boot) on the monotonic clock.
    public let uptimeNanoseconds: UInt64

    /// Creates a deadline at the given monotonic time in nanoseconds.
    public init(uptimeNanoseconds: UInt64) { self.uptimeNanoseconds = uptimeNanoseconds }

    /// The current monotonic time. Wraps `clock_gettime(CLOCK_MONOTONIC)`.
    public static func now() -> Deadline {
        var time = timespec()
        // CLOCK_MONOTONIC cannot fail on Linux with a valid pointer.
        _ = clock_gettime(CLOCK_MONOTONIC, &time)
        return Deadline(uptimeNanoseconds: UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec))
    }

    /// The deadline `seconds` from now. Negative or NaN values mean "now"; values too large to
    /// represent saturate to ``distantFuture``.
    public static func after(seconds: Double) -> Deadline {
        let now = Deadline.now().uptimeNanoseconds
        guard seconds > 0 else { return Deadline(uptimeNanoseconds: now) }
        let nanoseconds = seconds * 1_000_000_000
        guard nanoseconds < Double(UInt64.max - now) else { return .distantFuture }
        return Deadline(uptimeNanoseconds: now + UInt64(nanoseconds))
    }

    /// The deadline `duration` from now (saturating like ``after(seconds:)``).
    public static func after(_ duration: Duration) -> Deadline { after(seconds: duration.asSeconds) }

    /// A deadline that never passes.
    public static let distantFuture = Deadline(uptimeNanoseconds: UInt64.max)

    /// Milliseconds left until the deadline, rounded up and clamped to `0...Int32.max`, ready to
    /// pass to `poll(2)`. Rounding up keeps `poll` from waking just before the deadline and spinning.
    public var remainingMilliseconds: Int32 {
        let now = Deadline.now().uptimeNanoseconds
        guard uptimeNanoseconds > now else { return 0 }
        let milliseconds = (uptimeNanoseconds - now + 999_999) / 1_000_000
        return milliseconds >= UInt64(Int32.max) ? Int32.max : Int32(milliseconds)
    }

    /// Whether the deadline is now or in the past.
    public var hasPassed: Bool { Deadline.now().uptimeNanoseconds >= uptimeNanoseconds }

    public static func < (lhs: Deadline, rhs: Deadline) -> Bool {
        lhs.uptimeNanoseconds < rhs.uptimeNanoseconds
    }

    public var description: String {
        if self == .distantFuture { return "Deadline(distantFuture)" }
        return "Deadline(uptime: \(Double(uptimeNanoseconds) / 1e9) s)"
    }
}

extension Duration {
    /// The duration in seconds as a `Double` (attoseconds kept to double precision), for arithmetic with
    /// the monotonic clock and rates.
    package var asSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }
}

/// Seconds on the monotonic clock: the one clock of every module (``Deadline/now()`` underneath), for
/// intervals, rates and timers. Never the wall clock, which jumps.
package func monotonicSeconds() -> Double {
    Double(Deadline.now().uptimeNanoseconds) / 1e9
}
