import ArgumentParser
import BenchSupport
import DownloadKit
import DownloadKitPostgres
import Foundation
import TestOrigin

/// The fleet's row (issue #45): claims per second at 1, 4 and 16 workers on one PostgreSQL server, and the
/// restore of 100,000 queued tasks, beside SQLite's figures in the same run (docs/BENCHMARKS.md, "Fleet").
@main
struct FleetBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloadkit-fleet-bench",
        abstract: "The fleet's benchmark: claims per second on one PostgreSQL server, and restoring a queue (PostgreSQL and SQLite).",
        discussion: """
            Starts its own PostgreSQL server (initdb + pg_ctl on a free loopback port, as the postgres user when \
            run as root; Debian's postgresql package). Writes fleet-results.md and fleet-results.json into \
            --output. Exits non-zero when any task was claimed twice or left unclaimed. Default: 3,000 tasks at \
            1, 4 and 16 workers and a restore of 100,000 tasks, 3 runs each (about 4 minutes in release on 2 cores).
            """,
        version: DownloadKitVersion.string)

    @Flag(help: "Small sizes (500 tasks to claim, 10,000 to restore) for a smoke run; accepts --runs 1.")
    var quick = false

    @Option(help: "Runs of every row (default 3; medians need at least 3).")
    var runs: Int?

    @Option(help: "Comma-separated numbers of concurrent workers (default 1,4,16).")
    var workers = "1,4,16"

    @Option(help: "Tasks queued for each claims run (default 3,000; 500 with --quick).")
    var claimTasks: Int?

    @Option(help: "Tasks queued and restored (default 100,000; 10,000 with --quick).")
    var restoreTasks: Int?

    @Option(help: "Directory for fleet-results.md and fleet-results.json.")
    var output = "bench-results"

    func validate() throws {
        if let runs, runs < 1 { throw ValidationError("--runs must be at least 1") }
        if let runs, runs < 3, !quick { throw ValidationError("--runs below 3 gives no meaningful median; only --quick accepts it") }
        _ = try workerCounts()
        if let claimTasks, claimTasks < 1 { throw ValidationError("--claim-tasks must be at least 1") }
        if let restoreTasks, restoreTasks < 1 { throw ValidationError("--restore-tasks must be at least 1") }
    }

    func workerCounts() throws -> [Int] {
        let counts = workers.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        // 16 workers use 16 of the server's 50 connections, plus the bench's own.
        guard !counts.isEmpty, counts.allSatisfy({ ($0 ?? 0) >= 1 && ($0 ?? 0) <= 40 }) else {
            throw ValidationError("--workers takes numbers from 1 to 40 separated by commas, e.g. 1,4,16")
        }
        return counts.compactMap { $0 }
    }

    func run() async throws {
        let runs = self.runs ?? 3
        let counts = try workerCounts()
        let claimCount = claimTasks ?? (quick ? 500 : 3_000)
        let restoreCount = restoreTasks ?? (quick ? 10_000 : 100_000)
        let outputDirectory = output.hasPrefix("/") ? output : FileManager.default.currentDirectoryPath + "/" + output
        let scratch = NSTemporaryDirectory() + "dk-fleet-bench-\(getpid())"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }

        log("starting PostgreSQL")
        let server = try await offloaded { try PostgresServer() }
        do {
            let results = try await measure(
                server: server, runs: runs, workerCounts: counts, claimCount: claimCount, restoreCount: restoreCount,
                scratch: scratch)
            try await offloaded { server.stop() }
            let markdown = FleetReport.markdown(results)
            print(markdown)
            try FleetReport.write(results, markdown: markdown, to: outputDirectory)
            log("wrote \(outputDirectory)/fleet-results.md and fleet-results.json")
        } catch {
            try? await offloaded { server.stop() }
            log("failed: \(error)")
            throw ExitCode.failure
        }
    }

    private func measure(
        server: PostgresServer, runs: Int, workerCounts: [Int], claimCount: Int, restoreCount: Int, scratch: String
    ) async throws -> FleetResults {
        let machine = FleetMachine.collect(postgresBinaries: server.binaries)

        // Claims: the worker counts alternate (1 4 16 1 4 16 …), each run on a fresh database.
        var seconds: [Int: [Double]] = [:]
        for round in 0..<runs {
            for workers in workerCounts {
                let run = ClaimsRun(
                    server: server, workers: workers, tasks: claimCount, database: "claims_\(workers)w_\(round)",
                    directory: scratch + "/files")
                let elapsed = try await run.run()
                seconds[workers, default: []].append(elapsed)
                log("claims, \(workers) workers, run \(round + 1): \(format(Double(claimCount) / elapsed, 0)) claims/s (\(format(elapsed, 2)) s)")
            }
        }
        let claims = workerCounts.compactMap { workers -> FleetResults.ClaimsRow? in
            let values = seconds[workers] ?? []
            guard let time = Figures(values), let rate = Figures(values.map { Double(claimCount) / $0 }) else { return nil }
            return FleetResults.ClaimsRow(workers: workers, tasks: claimCount, claimsPerSecond: rate, seconds: time)
        }

        // Restore: both stores filled once, then the three ways alternate.
        try await offloaded { try server.createDatabase("restore") }
        guard let url = PostgresStoreURL(server.url(database: "restore")) else {
            throw ValidationError("not a store URL: \(server.url(database: "restore"))")
        }
        for directory in ["sqlite-state", "postgres-state"] {
            try FileManager.default.createDirectory(atPath: scratch + "/" + directory, withIntermediateDirectories: true)
        }
        let restore = RestoreRun(
            count: restoreCount, sqliteState: scratch + "/sqlite-state", postgresState: scratch + "/postgres-state",
            postgres: url, directory: scratch + "/files")
        log("queueing \(restoreCount) tasks in SQLite and in PostgreSQL")
        let prepared = try await restore.prepare()
        var milliseconds: [RestoreRun.Way: [Double]] = [:]
        for round in 0..<runs {
            for way in RestoreRun.Way.allCases {
                let elapsed = try await restore.measure(way)
                milliseconds[way, default: []].append(elapsed * 1000)
                log("restore, \(way.rawValue), run \(round + 1): \(format(elapsed * 1000, 0)) ms")
            }
        }
        let restoreRows = RestoreRun.Way.allCases.compactMap { way in
            Figures(milliseconds[way] ?? []).map { FleetResults.RestoreRow(way: way, tasks: restoreCount, milliseconds: $0) }
        }
        return FleetResults(
            machine: machine,
            command: CommandLine.arguments.dropFirst().reduce("downloadkit-fleet-bench") { $0 + " " + $1 },
            runs: runs, claims: claims, restore: restoreRows,
            enqueueMilliseconds: [
                "SQLite enqueue (one call)": prepared.sqlite * 1000, "PostgreSQL add (1,000 per call)": prepared.postgres * 1000,
            ],
            loadAverageAtEnd: MachineProbe.loadAverage())
    }
}
