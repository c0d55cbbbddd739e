import ArgumentParser
import DownloadKit
import Foundation
import Glibc
import TestOrigin

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloadkit-bench",
        abstract: "Loopback download benchmarks: DownloadKit side by side with curl, wget, aria2c and axel.",
        version: DownloadKitVersion.string,
        subcommands: [RunCommand.self, FetchCommand.self],
        defaultSubcommand: RunCommand.self)
}

/// The benchmark proper: origin, files, alternating measured runs, report.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the benchmark scenarios and write results.md, results.json and chart.svg.",
        discussion: """
            Scenarios: \(ScenarioName.allCases.map(\.rawValue).joined(separator: ", ")).
            Default: every scenario, 1 GiB file, 3 runs per client, about 7 minutes on 2 cores (concurrency
            alone about 2.5). --quick: 64 MiB (CI smoke, under a minute). --full: also peak
            RSS at 8 GiB. The last table, "Targets (issue #18)", judges each target on this run's medians.
            """)

    @Flag(help: "Small sizes (64 MiB) for a smoke run; accepts --runs 1.")
    var quick = false

    @Flag(help: "Also measure peak RSS with an 8 GiB file.")
    var full = false

    @Option(help: "Measured runs per client and scenario (default 3; medians need at least 3).")
    var runs: Int?

    @Option(help: "Directory for results and the cached test files.")
    var output = "bench-results"

    @Option(help: "Comma-separated scenarios to run (default: all but concurrency).")
    var scenarios: String?

    @Option(help: "Concurrency scenario: comma-separated numbers of simultaneous transfers (default 1,16,128,1024).")
    var concurrencyLevels: String?

    func validate() throws {
        if quick && full { throw ValidationError("--quick and --full exclude each other") }
        if let runs, runs < 1 { throw ValidationError("--runs must be at least 1") }
        // A concurrency-only run takes minutes per round: one round is a fair check that it works.
        if let runs, runs < 3, !quick, try selectedScenarios() != [.concurrency] {
            throw ValidationError(
                "--runs below 3 gives no meaningful median; only --quick (or --scenarios concurrency) accepts it")
        }
        _ = try selectedConcurrencyLevels()
    }

    func selectedConcurrencyLevels() throws -> [Int] {
        guard let concurrencyLevels else { return ScenarioContext.defaultConcurrencyLevels }
        let levels = concurrencyLevels.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !levels.isEmpty, levels.allSatisfy({ ($0 ?? 0) >= 1 }) else {
            throw ValidationError("--concurrency-levels takes positive numbers separated by commas, e.g. 1,16,128,1024")
        }
        return levels.compactMap { $0 }
    }

    func selectedScenarios() throws -> [ScenarioName] {
        guard let scenarios else { return ScenarioName.allCases.filter(\.isDefault) }
        return try scenarios.split(separator: ",").map { name in
            let trimmed = name.trimmingCharacters(in: .whitespaces)
            guard let scenario = ScenarioName(rawValue: trimmed) else {
                throw ValidationError(
                    "unknown scenario \(trimmed); known: \(ScenarioName.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return scenario
        }
    }

    func run() throws {
        let mode: BenchMode = quick ? .quick : (full ? .full : .standard)
        let settings = BenchSettings(
            mode: mode, runs: runs ?? 3, output: absolutePath(output), scenarios: try selectedScenarios(),
            concurrencyLevels: try selectedConcurrencyLevels())
        let results = try BenchRunner(settings: settings).run()
        let markdown = Report.markdown(results)
        print(markdown)
        try Report.write(results, markdown: markdown, to: settings.output)
        log("wrote \(settings.output)/results.md, results.json, chart.svg")
    }

    private func absolutePath(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        return FileManager.default.currentDirectoryPath + "/" + path
    }
}

/// Progress and diagnostics go to standard error; the table goes to standard output.
func log(_ message: String) {
    FileHandle.standardError.write(Data(("downloadkit-bench: " + message + "\n").utf8))
}
