/// curl's `--speed-limit`/`--speed-time` for one connection: below `limit` bytes/s averaged over
/// `seconds`, the transfer is too slow.
struct LowSpeedWindow: Sendable {
    let limit: Int
    let seconds: Double
    private var start = 0.0
    private var bytes: Int64 = 0

    init(limit: Int, seconds: Double) {
        self.limit = limit
        self.seconds = seconds
    }

    /// Counts `count` bytes at `now`; returns the window's rate when it closed below the limit.
    mutating func record(_ count: Int, now: Double) -> Double? {
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

    mutating func reset() {
        start = 0
        bytes = 0
    }
}
