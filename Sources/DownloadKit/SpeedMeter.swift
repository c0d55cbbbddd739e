/// Bytes per second over a sliding window, from samples taken at most a few times a second.
struct SpeedMeter {
    private var samples: [(time: Double, bytes: Int64)] = []
    let window: Double

    init(window: Double = 5) {
        self.window = window
        samples.reserveCapacity(64)
    }

    /// Records that `totalBytes` had arrived by `time` (monotonic seconds).
    mutating func record(totalBytes: Int64, at time: Double) {
        if let last = samples.last, time - last.time < 0.1 {
            samples[samples.count - 1].bytes = totalBytes
            return
        }
        samples.append((time, totalBytes))
        while let first = samples.first, time - first.time > window, samples.count > 2 {
            samples.removeFirst()
        }
    }

    /// The rate across the window, or 0 before two samples exist.
    var bytesPerSecond: Double {
        guard let first = samples.first, let last = samples.last, last.time > first.time else { return 0 }
        return Double(last.bytes - first.bytes) / (last.time - first.time)
    }
}
