import BenchSupport
import Foundation

/// One figure over the repeats: its spread (median, min–max), its noise and every value.
struct Figures: Codable, Sendable, Equatable {
    var median: Double
    var min: Double
    var max: Double
    /// Half the min–max range over the median (as downloadkit-bench's targets table); nil with fewer than 3
    /// repeats, where it says nothing.
    var noise: Double?
    /// Every repeat's value, in the order measured.
    var values: [Double]

    init?(_ values: [Double]) {
        guard let spread = Spread(values) else { return nil }
        median = spread.median
        min = spread.min
        max = spread.max
        noise = values.count >= 3 && median != 0 ? (max - min) / 2 / median : nil
        self.values = values
    }
}

/// Progress and diagnostics go to standard error; the table goes to standard output.
func log(_ message: String) {
    FileHandle.standardError.write(Data(("downloadkit-fleet-bench: " + message + "\n").utf8))
}

/// Seconds on the continuous clock since `start`.
func secondsSince(_ start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}
