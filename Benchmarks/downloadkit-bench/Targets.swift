import BenchSupport
import Foundation

/// Which row of a scenario a target reads: the client, and where a scenario has several rows of one
/// client, which of them (`variant` "get" for the CLI, "queue" for the manager; connections; transfers).
struct RowSelector: Codable, Sendable {
    var client: ClientKind
    var variant: String? = nil
    var connections: Int? = nil
    var transfers: Int? = nil

    func matches(_ row: Row) -> Bool {
        row.client == client && row.variant == variant && (connections == nil || row.connections == connections)
            && (transfers == nil || row.transfers == transfers)
    }

    var description: String {
        var text = client.rawValue
        if let variant { text += " " + variant }
        if let connections { text += " ×\(connections)" }
        if let transfers { text += " at N = \(grouped(Double(transfers)))" }
        return text
    }
}

/// A figure a target compares, read from a row's samples (the median, with the min–max as noise).
enum TargetMetric: String, Codable, Sendable {
    case megabytesPerSecond = "MB/s"
    case cpuSecondsPerGiB = "CPU-s/GiB"
    case wallSeconds = "wall s"
    case filesPerSecond = "files/s"
    case cpuMillisecondsPerFile = "CPU-ms/file"
    case percentOfIdeal = "% of N × cap"
    case peakRSSMiB = "peak RSS MiB"
    case enqueueMilliseconds = "enqueue ms"
    case restoreMilliseconds = "restore ms"
    case fetchedTwiceBytes = "bytes fetched twice"
    case bodyLoopMallocsPerMiB = "body-loop mallocs/MiB"

    func spread(_ row: Row) -> Spread? {
        switch self {
        case .megabytesPerSecond: return row.megabytesPerSecond
        case .cpuSecondsPerGiB: return row.cpuSecondsPerGiB
        case .wallSeconds: return Spread(row.samples.map(\.wallSeconds))
        case .filesPerSecond: return row.filesPerSecond
        case .cpuMillisecondsPerFile: return row.cpuMillisecondsPerFile
        case .percentOfIdeal: return row.percentOfIdeal
        case .peakRSSMiB: return row.peakRSSMiB
        case .enqueueMilliseconds: return row.metric("enqueueMs")
        case .restoreMilliseconds: return row.metric("restoreMs")
        case .fetchedTwiceBytes: return row.metric("fetchedTwice")
        case .bodyLoopMallocsPerMiB: return row.metric("body_loop_mallocs_per_mib")
        }
    }

    func text(_ value: Double) -> String {
        switch self {
        case .megabytesPerSecond, .filesPerSecond, .fetchedTwiceBytes: return grouped(value) + " " + rawValue
        case .cpuSecondsPerGiB, .cpuMillisecondsPerFile, .bodyLoopMallocsPerMiB: return format(value, 3) + " " + rawValue
        case .wallSeconds: return format(value, 2) + " s"
        case .percentOfIdeal: return format(value, 1) + " %"
        case .peakRSSMiB: return format(value, 1) + " MiB"
        case .enqueueMilliseconds, .restoreMilliseconds: return format(value, 0) + " " + rawValue
        }
    }
}

/// One target: a figure of one row, against a threshold on its own or on its ratio to another row.
struct Target: Sendable {
    enum Comparison: String, Sendable {
        case atLeast = "≥"
        case atMost = "≤"
    }

    var scenario: ScenarioName
    /// What the row of the table is called ("HTTPS → /dev/null, 1 GiB").
    var name: String
    var subject: RowSelector
    var metric: TargetMetric
    /// nil: `threshold` applies to the figure itself; else to the figure ÷ this row's (same metric).
    var baseline: RowSelector? = nil
    var comparison: Comparison
    var threshold: Double
    var source = "issue #18"

    var text: String {
        guard let baseline else { return "\(metric.rawValue) \(comparison.rawValue) \(Self.number(threshold))" }
        return "\(metric.rawValue) \(comparison.rawValue) \(Self.number(threshold))× \(baseline.description)'s"
    }

    private static func number(_ value: Double) -> String {
        value == value.rounded() ? grouped(value) : String(format: "%g", value)
    }
}

/// The targets as values (issue #18's, then the bench's own from DESIGN.md), and one function that
/// judges them against a run.
enum Targets {
    /// One line per target: scenario, name, DownloadKit's row, metric, comparison, threshold, and the
    /// row whose figure the threshold multiplies (nil: an absolute threshold).
    static func table(concurrencyLevels levels: [Int]) -> [Target] {
        let dk = RowSelector(client: .downloadkit)
        let get = RowSelector(client: .downloadkit, variant: "get")
        let curl = RowSelector(client: .curl)
        let aria2c = RowSelector(client: .aria2c)
        let queue = { (n: Int) in RowSelector(client: .downloadkit, variant: "queue", transfers: n) }
        let segmented = { (n: Int) in RowSelector(client: .downloadkit, connections: n) }
        let ariaSegmented = { (n: Int) in RowSelector(client: .aria2c, connections: n) }
        func target(
            _ scenario: ScenarioName, _ name: String, _ subject: RowSelector, _ metric: TargetMetric,
            _ comparison: Target.Comparison, _ threshold: Double, _ baseline: RowSelector? = nil,
            source: String = "issue #18"
        ) -> Target {
            Target(
                scenario: scenario, name: name, subject: subject, metric: metric, baseline: baseline,
                comparison: comparison, threshold: threshold, source: source)
        }
        let small = "64 KiB files, 16 at a time, durable"
        let manager1024 = "concurrency, manager at N = 1,024"
        var targets = [
            target(.httpsDevnull, "HTTPS → /dev/null", dk, .megabytesPerSecond, .atLeast, 1.15, curl),
            target(.httpsDevnull, "HTTPS → /dev/null", dk, .cpuSecondsPerGiB, .atMost, 0.8, curl),
            target(.httpsFile, "HTTPS → file, `downloadkit get`", get, .wallSeconds, .atMost, 0.85, curl),
            target(.httpsFile, "HTTPS → file, `downloadkit get`", get, .cpuSecondsPerGiB, .atMost, 0.85, curl),
            target(.httpDevnull, "HTTP → /dev/null", dk, .megabytesPerSecond, .atLeast, 1.2, curl),
            target(.httpFile, "HTTP → file (durable)", dk, .megabytesPerSecond, .atLeast, 1.4, curl),
            target(.httpFile, "HTTP → file (durable)", dk, .cpuSecondsPerGiB, .atMost, 0.5, curl),
            target(.smallFiles, small, dk, .filesPerSecond, .atLeast, 3, aria2c),
            target(.smallFiles, small, dk, .filesPerSecond, .atLeast, 0.5, curl),
            target(.smallFiles, small, dk, .cpuMillisecondsPerFile, .atMost, 0.5),
        ]
        for n in [8, 16] {
            targets.append(target(.segmented, "\(n) connections, nginx's cap on each", segmented(n), .percentOfIdeal, .atLeast, 97))
            targets.append(
                target(
                    .segmented, "\(n) connections, nginx's cap on each", segmented(n), .cpuSecondsPerGiB, .atMost, 1,
                    ariaSegmented(n)))
        }
        // Over a path with a round trip (2026-11-27): waiting a round trip per 4 MiB request cost 30 % there.
        let far = "8 connections, 50 ms round trip"
        targets += [
            target(.segmentedRoundTrip, far, segmented(8), .percentOfIdeal, .atLeast, 90, source: "a real path"),
            target(.segmentedRoundTrip, far, segmented(8), .megabytesPerSecond, .atLeast, 1, ariaSegmented(8), source: "a real path"),
        ]
        // Issue #48: one file from N rate-capped mirrors, one connection each, as close to N × cap as the 16-connection row.
        for n in [2, 4] {
            let name = "\(n) mirrors, nginx's cap on each"
            targets += [
                target(.mirrors, name, segmented(n), .percentOfIdeal, .atLeast, 95, source: "issue #48"),
                target(.mirrors, name, segmented(n), .megabytesPerSecond, .atLeast, 1, ariaSegmented(n), source: "issue #48"),
            ]
        }
        targets += [
            target(.queue, "restore 10,000 queued tasks", dk, .restoreMilliseconds, .atMost, 300),
            target(.queue, "enqueue 10,000 tasks (one batch)", dk, .enqueueMilliseconds, .atMost, 300),
            target(.concurrency, manager1024, queue(1024), .peakRSSMiB, .atMost, 128),
            target(.concurrency, manager1024 + " vs N = 16", queue(1024), .cpuSecondsPerGiB, .atMost, 1.5, queue(16)),
        ]
        for n in Set(ScenarioContext.defaultConcurrencyLevels + levels).sorted() {
            let name = "concurrency, manager at N = \(grouped(Double(n)))"
            targets.append(target(.concurrency, name, queue(n), .percentOfIdeal, .atLeast, 95))
        }
        targets += [
            target(
                .rss, "peak RSS, larger file", RowSelector(client: .downloadkit, variant: "large"), .peakRSSMiB, .atMost,
                32, source: "DESIGN.md"),
            target(.resume, "kill -9 at half, rerun", get, .fetchedTwiceBytes, .atMost, 0, source: "DESIGN.md"),
            target(.allocations, "mallocs in the body loop", dk, .bodyLoopMallocsPerMiB, .atMost, 0, source: "DESIGN.md"),
        ]
        return targets
    }

    /// Judges every target on this run's medians. A target whose scenario, row or peer is missing is
    /// "not measured" with the reason; one whose figure is within the runs' spread of its threshold is
    /// "within noise".
    static func evaluate(
        _ targets: [Target], scenarios: [ScenarioResult], missingPeers: [String]
    ) -> [TargetCheck] {
        targets.map { target in
            var check = TargetCheck(
                scenario: target.name, metric: target.metric.rawValue, downloadkit: "—", peer: "—", ratio: "—",
                target: target.text, noise: "—", verdict: .notMeasured, source: target.source)
            guard let scenario = scenarios.first(where: { $0.name == target.scenario }) else {
                var reason = "scenario \(target.scenario.rawValue) not selected"
                if !target.scenario.isDefault { reason += " (opt-in: --scenarios \(target.scenario.rawValue))" }
                check.reason = reason
                return check
            }
            let subject = figure(target.subject, target.metric, in: scenario, missingPeers: missingPeers)
            let baseline = target.baseline.map { figure($0, target.metric, in: scenario, missingPeers: missingPeers) }
            if case .success(let spread) = subject { check.downloadkit = target.metric.text(spread.median) }
            if case .success(let spread) = baseline { check.peer = "\(target.baseline?.description ?? ""): \(target.metric.text(spread.median))" }
            let value: Double
            let noise: Double
            switch (subject, baseline) {
            case (.failure(let reason), _), (_, .failure(let reason)?):
                check.reason = reason.description
                return check
            case (.success(let own), nil):
                value = own.median
                noise = own.relativeNoise
                check.noise = noiseText(own, runs: scenarioRuns(scenario, target.subject))
            case (.success(let own), .success(let other)?):
                guard other.median != 0 else {
                    check.reason = "\(target.baseline?.description ?? "") measured 0"
                    return check
                }
                value = own.median / other.median
                noise = own.relativeNoise + other.relativeNoise
                check.ratio = format(value, 2) + "×"
                let texts = [
                    noiseText(own, runs: scenarioRuns(scenario, target.subject)),
                    noiseText(other, runs: scenarioRuns(scenario, target.baseline ?? target.subject)),
                ]
                check.noise = texts[0] == texts[1] && !texts[0].hasPrefix("±") ? texts[0] : texts.joined(separator: " / ")
            }
            check.value = value
            check.threshold = target.threshold
            check.relativeNoise = noise.isFinite ? noise : nil
            let met = target.comparison == .atLeast ? value >= target.threshold : value <= target.threshold
            if noise > 0 && abs(value - target.threshold) <= noise * abs(value) {
                check.verdict = .withinNoise
            } else {
                check.verdict = met ? .met : .notMet
            }
            return check
        }
    }

    /// The row's figure, or why there is none.
    private static func figure(
        _ selector: RowSelector, _ metric: TargetMetric, in scenario: ScenarioResult, missingPeers: [String]
    ) -> Result<Spread, BenchError> {
        if selector.client.isPeer, missingPeers.contains(selector.client.programName) {
            return .failure(BenchError("\(selector.client.programName) missing"))
        }
        guard let row = scenario.rows.first(where: selector.matches) else {
            if let transfers = selector.transfers, !scenario.rows.contains(where: { $0.transfers == transfers }) {
                return .failure(BenchError("N = \(grouped(Double(transfers))) not among --concurrency-levels"))
            }
            return .failure(BenchError("no \(selector.description) row in this run"))
        }
        if let failure = row.failure { return .failure(BenchError("\(selector.description) failed (\(failure))")) }
        guard row.isUsable, let spread = metric.spread(row) else {
            return .failure(BenchError("\(selector.description) has no \(metric.rawValue)"))
        }
        return .success(spread)
    }

    private static func scenarioRuns(_ scenario: ScenarioResult, _ selector: RowSelector) -> Int {
        scenario.rows.first(where: selector.matches)?.samples.count ?? 0
    }

    /// "±2.1 % (3 runs)": half the min–max range relative to the median.
    private static func noiseText(_ spread: Spread, runs: Int) -> String {
        guard runs > 1 else { return "1 run: unknown" }
        let noise = spread.relativeNoise
        return (noise.isFinite ? "±" + format(100 * noise, 1) + " %" : "±∞ (median 0)") + " (\(runs) runs)"
    }
}

extension Spread {
    /// Half the min–max range relative to the median (0 when all runs agree; infinite around a median of 0).
    var relativeNoise: Double {
        if max == min { return 0 }
        return median == 0 ? .infinity : (max - min) / 2 / abs(median)
    }
}
