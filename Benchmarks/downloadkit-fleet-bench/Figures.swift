import Foundation
import Glibc

/// Median, minimum and maximum of one figure over the repeats, and its noise.
///
/// The statistics downloadkit-bench keeps in `Spread` (Results.swift) and its noise rule (Targets.swift);
/// they are not shared because the two executables have no common target (see docs/BENCHMARKS.md, "Fleet").
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
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        median = sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
        min = sorted[0]
        max = sorted[sorted.count - 1]
        noise = values.count >= 3 && median != 0 ? (max - min) / 2 / median : nil
        self.values = values
    }
}

/// The monotonic clock in seconds.
func monotonicSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

func format(_ value: Double, _ decimals: Int) -> String {
    String(format: "%.\(decimals)f", value)
}

/// 4812.3 → "4,812".
func grouped(_ value: Double) -> String {
    let digits = String(Int(value.rounded()))
    var result = ""
    for (index, character) in digits.reversed().enumerated() {
        if index > 0 && index % 3 == 0 { result.append(",") }
        result.append(character)
    }
    return String(result.reversed())
}

/// Progress and diagnostics go to standard error; the table goes to standard output.
func log(_ message: String) {
    FileHandle.standardError.write(Data(("downloadkit-fleet-bench: " + message + "\n").utf8))
}
