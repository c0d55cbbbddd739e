import Foundation
import Glibc
import TestOrigin

// What both benchmarks (downloadkit-bench and downloadkit-fleet-bench) state their figures with: the spread of
// a series, number formats and the machine's description.

/// Median, minimum and maximum of a series.
public struct Spread: Codable, Sendable, Equatable {
    /// The middle value (the mean of the two middle ones for an even count).
    public var median: Double
    /// The smallest value.
    public var min: Double
    /// The largest value.
    public var max: Double

    /// The series' spread, or nil for an empty one.
    public init?(_ values: [Double]) {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        median = sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
        min = sorted[0]
        max = sorted[sorted.count - 1]
    }
}

/// `value` with `decimals` digits after the point ("%.Nf").
public func format(_ value: Double, _ decimals: Int) -> String {
    String(format: "%.\(decimals)f", value)
}

/// 4812.3 → "4,812".
public func grouped(_ value: Double) -> String {
    if value < 0 { return "−" + grouped(-value) }
    let digits = String(Int(value.rounded()))
    var result = ""
    for (index, character) in digits.reversed().enumerated() {
        if index > 0 && index % 3 == 0 { result.append(",") }
        result.append(character)
    }
    return String(result.reversed())
}

/// What a result records about the machine it ran on.
public enum MachineProbe {
    /// The first three fields of /proc/loadavg (1, 5 and 15 minutes), "unknown" without it.
    public static func loadAverage() -> String {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "unknown" }
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    /// The first non-empty line `executable arguments` prints, trimmed; "unknown" when it cannot run.
    public static func firstLine(of executable: String, _ arguments: [String]) -> String {
        guard let result = try? ProcessRunner.run(executable, arguments) else { return "unknown" }
        let line = result.output.split(whereSeparator: \.isNewline).first { !$0.isEmpty }
        return line.map { String($0).trimmingCharacters(in: .whitespaces) } ?? "unknown"
    }

    /// The CPU's `model name` from /proc/cpuinfo.
    public static func cpuModel() -> String {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
    }

    /// The online CPUs.
    public static var cpuCount: Int { Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

    /// Now, as ISO 8601 (seconds, UTC).
    public static func date() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: Date())
    }
}
