import BenchSupport
import Foundation

/// Where and with what the fleet bench ran.
struct FleetMachine: Codable, Sendable {
    var date: String
    var uname: String
    var cpuModel: String
    var cpuCount: Int
    var buildConfiguration: String
    var postgres: String
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages when the runs started.
    var loadAverageAtStart: String

    static func collect(postgresBinaries: String) -> FleetMachine {
        #if DEBUG
            let build = "debug (absolute figures are slow: use -c release)"
        #else
            let build = "release"
        #endif
        return FleetMachine(
            date: MachineProbe.date(), uname: MachineProbe.firstLine(of: "uname", ["-a"]), cpuModel: MachineProbe.cpuModel(),
            cpuCount: MachineProbe.cpuCount, buildConfiguration: build,
            postgres: MachineProbe.firstLine(of: postgresBinaries + "/postgres", ["--version"]),
            loadAverageAtStart: MachineProbe.loadAverage())
    }
}

/// Everything one run of the fleet bench measured (written as fleet-results.json).
struct FleetResults: Codable, Sendable {
    struct ClaimsRow: Codable, Sendable {
        var workers: Int
        var tasks: Int
        var claimsPerSecond: Figures
        var seconds: Figures
    }

    struct RestoreRow: Codable, Sendable {
        var way: RestoreRun.Way
        var tasks: Int
        var milliseconds: Figures
    }

    var machine: FleetMachine
    var command: String
    var runs: Int
    var claims: [ClaimsRow]
    var restore: [RestoreRow]
    /// Queueing the restore's tasks (once, not part of the restore): SQLite `enqueue` in one call, PostgreSQL
    /// `add` 1,000 per call.
    var enqueueMilliseconds: [String: Double]
    var loadAverageAtEnd: String
}

enum FleetReport {
    static func write(_ results: FleetResults, markdown: String, to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try markdown.write(toFile: directory + "/fleet-results.md", atomically: true, encoding: .utf8)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(results).write(to: URL(fileURLWithPath: directory + "/fleet-results.json"))
    }

    static func noise(_ figures: Figures) -> String {
        figures.noise.map { "±\(format(100 * $0, 1)) %" } ?? "unknown (< 3 runs)"
    }

    static func markdown(_ results: FleetResults) -> String {
        let machine = results.machine
        var text = "# DownloadKit fleet benchmark: PostgreSQL beside SQLite\n\n"
        text += "- Date: \(machine.date)\n"
        text += "- Command: `\(results.command)`\n"
        text += "- Machine: `\(machine.uname)`\n"
        text += "- CPU: \(machine.cpuModel), \(machine.cpuCount) online\n"
        text += "- Load average (1/5/15 min): \(machine.loadAverageAtStart) at start, \(results.loadAverageAtEnd) at end\n"
        text += "- Build: \(machine.buildConfiguration)\n"
        text += "- PostgreSQL: \(machine.postgres), one private server on 127.0.0.1 (TestOrigin's `PostgresServer`: "
        text += "fsync, synchronous_commit and full_page_writes off, shared_buffers 16MB), started by the bench\n"
        text += "- \(results.runs) runs of each row, alternating; median (min–max); noise: half the min–max range over "
        text += "the median\n"

        if let first = results.claims.first {
            text += "\n## Claims per second — \(grouped(Double(first.tasks))) queued tasks, one PostgreSQL server\n\n"
            text += "Each worker is its own `PostgresTaskStore` (own connection pool), as separate `queue run` "
            text += "processes would be, run as concurrent tasks of the bench process. A worker claims one task "
            text += "(`claim(worker:count: 1, lease:)`) and records it completed (`finish(_:worker:as: .completed)`), "
            text += "until a claim finds the queue empty; no transfer. Every run checked: each task claimed exactly once "
            text += "under epoch 1 (the workers' tally, the rows, the lease history).\n\n"
            text += "| workers | claims/s median (min–max) | seconds median (min–max) | noise | SQLite |\n"
            text += "|---:|---:|---:|---|---|\n"
            for row in results.claims {
                let rate = row.claimsPerSecond
                let seconds = row.seconds
                text += "| \(row.workers) | \(grouped(rate.median)) (\(grouped(rate.min))–\(grouped(rate.max))) "
                text += "| \(format(seconds.median, 2)) (\(format(seconds.min, 2))–\(format(seconds.max, 2))) "
                text += "| \(noise(rate)) | — |\n"
            }
            text += "\nSQLite: — (no equivalent). The SQLite store belongs to one `DownloadManager`, which picks its next "
            text += "task in memory (`Scheduler`) and writes the state change in the background; there is no claim "
            text += "transaction to time, and no second process may take tasks from it.\n"
        }

        if let first = results.restore.first {
            text += "\n## Restore of \(grouped(Double(first.tasks))) queued tasks\n\n"
            text += "Timed from nothing open to every task in memory (checked: all restored, all waiting); the "
            text += "network reported unreachable, so nothing starts.\n\n"
            text += "| store | what is timed | ms median (min–max) | noise | vs SQLite manager |\n"
            text += "|---|---|---:|---|---:|\n"
            let sqlite = results.restore.first { $0.way == .sqliteManager }?.milliseconds.median
            for row in results.restore {
                let ms = row.milliseconds
                let ratio = sqlite.map { "\(format(ms.median / $0, 2))×" } ?? "—"
                text += "| \(label(row.way)) | \(description(row.way)) "
                text += "| \(grouped(ms.median)) (\(grouped(ms.min))–\(grouped(ms.max))) | \(noise(ms)) | \(ratio) |\n"
            }
            if !results.enqueueMilliseconds.isEmpty {
                text += "\nQueueing them first (once, not timed above): "
                text += results.enqueueMilliseconds.sorted { $0.key > $1.key }.map { "\($0.key) \(grouped($0.value)) ms" }
                    .joined(separator: ", ")
                text += ".\n"
            }
        }
        return text
    }

    static func label(_ way: RestoreRun.Way) -> String {
        switch way {
        case .sqliteManager: return "SQLite"
        case .postgresManager, .postgresList: return "PostgreSQL"
        }
    }

    static func description(_ way: RestoreRun.Way) -> String {
        switch way {
        case .sqliteManager: return "`DownloadManager(stateDirectory:)` (its SQLite `TaskStore`)"
        case .postgresManager:
            return "`PostgresTaskStore.open` + `DownloadManager(stateDirectory:store:)` (the same manager on PostgreSQL)"
        case .postgresList: return "`PostgresTaskStore.open` + `fleetTasks()` (what `queue --store … list` reads)"
        }
    }
}
