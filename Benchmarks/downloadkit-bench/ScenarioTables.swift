import BenchSupport
import Foundation

/// Markdown tables of the segmented, mirrors, small-files, resume, queue, allocations and concurrency scenarios.
enum ScenarioTables {
    static func markdown(_ scenario: ScenarioResult, results: BenchResults) -> String {
        var text = "\n## \(scenario.name.rawValue)"
        switch scenario.name {
        case .segmented, .segmentedRoundTrip:
            let cap = Double(results.segmentedCap ?? 0) / 1e6
            text += " — nginx limit_rate \(format(cap, 0)) MB/s per connection\n\n"
            let most = scenario.rows.compactMap(\.connections).max() ?? 1
            text += "\(scenario.summary) The file is \(sizeText(results.mode.segmentedBytes(connections: 1))) per "
            text += "connection (N = \(most): \(sizeText(results.mode.segmentedBytes(connections: most)))), so every run "
            text += "lasts about as long at its ideal rate.\n\n"
            text += "| client | connections | file | MB/s median (min–max) | % of N × cap | CPU-s/GiB median | peak RSS MiB "
            text += "| nginx sent / file size | TCP connections |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            for row in scenario.rows {
                text += cappedRow(row, cap: cap) { format($0.metric("tcpConnections")?.median ?? 0, 0) }
            }
        case .mirrors:
            let cap = Double(results.mode.mirrors.capBytesPerSecond) / 1e6
            text += " — nginx limit_rate \(format(cap, 0)) MB/s per connection, one connection to each source\n\n"
            text += "\(scenario.summary) The file is \(sizeText(results.mode.segmentedBytes(connections: 1))) per source.\n\n"
            text += "| client | sources | file | MB/s median (min–max) | % of N × cap | CPU-s/GiB median | peak RSS MiB "
            text += "| nginx sent / file size | smallest source's share % (min) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            for row in scenario.rows {
                text += cappedRow(row, cap: cap) { format($0.metric("smallestSourceShare")?.min ?? 0, 1) }
            }
        case .smallFiles:
            let files = scenario.rows.first?.files ?? 0
            text += " — \(files) × 64 KiB\n\n\(scenario.summary)\n\n"
            text += "| client | files/s median (min–max) | vs aria2c -j16 | CPU-ms per file | peak RSS MiB "
            text += "| TCP connections |\n|---|---:|---:|---:|---:|---:|\n"
            let aria = scenario.row(.aria2c)?.filesPerSecond?.median
            for row in scenario.rows {
                guard let rate = usable(row, row.filesPerSecond) else {
                    text += failedRow(row, columns: 6)
                    continue
                }
                let cpu = row.cpuMillisecondsPerFile
                text += "| \(row.label) | \(spreadText(rate)) "
                text += "| \(aria.map { format(rate.median / $0, 2) + "×" } ?? "—") "
                text += "| \(format(cpu?.median ?? 0, 3)) | \(format(row.peakRSSMiB?.median ?? 0, 1)) "
                text += "| \(format(row.metric("tcpConnections")?.median ?? 0, 0)) |\n"
            }
            text += "\nwget fetches the list one file at a time over one connection (it has no parallel mode).\n"
        case .resume:
            text += " — \(sizeText(scenario.bytes))\n\n\(scenario.summary)\n\n"
            text += "| client | total wall s median (min–max) | first run s | second run s | MiB on disk at the kill "
            text += "| second run fetched MiB | fetched twice MiB (max) | CPU-s both runs | peak RSS MiB (2nd run) |\n"
            text += "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            for row in scenario.rows {
                guard let wall = usable(row, Spread(row.samples.map(\.wallSeconds))) else {
                    text += failedRow(row, columns: 9)
                    continue
                }
                func mib(_ key: String) -> String { format((row.metric(key)?.median ?? 0) / 1_048_576, 1) }
                let cpu = Spread(row.samples.map { $0.userSeconds + $0.systemSeconds })
                text += "| \(row.label) | \(format(wall.median, 2)) (\(format(wall.min, 2))–\(format(wall.max, 2))) "
                text += "| \(format(row.metric("firstRunSeconds")?.median ?? 0, 2)) "
                text += "| \(format(row.metric("secondRunSeconds")?.median ?? 0, 2)) | \(mib("bytesAtKill")) "
                text += "| \(mib("secondRunBytes")) | \(format((row.metric("fetchedTwice")?.max ?? 0) / 1_048_576, 2)) "
                text += "| \(format(cpu?.median ?? 0, 2)) | \(format(row.peakRSSMiB?.median ?? 0, 1)) |\n"
            }
            text += "\nThe first run is killed with SIGKILL when its partial file (DownloadKit: `.dkpart`) reaches half "
            text += "the size; bytes that reached the kernel but not the file by then are lost to every client alike.\n"
        case .queue:
            text += "\n\n\(scenario.summary)\n\n"
            text += "| what | ms median (min–max) |\n|---|---:|\n"
            guard let row = scenario.rows.first, row.isUsable else {
                text += "| failed | \(Report.escapeTable(scenario.rows.first?.failure ?? "no runs")) |\n"
                break
            }
            for (label, key) in [
                ("open a manager on an empty directory", "openEmptyMs"),
                ("enqueue 10,000 tasks (one batch call, one transaction)", "enqueueMs"),
                ("close", "closeMs"), ("open a new manager: restore 10,000 tasks", "restoreMs"),
            ] {
                if let spread = row.metric(key) {
                    text += "| \(label) | \(format(spread.median, 1)) (\(format(spread.min, 1))–\(format(spread.max, 1))) |\n"
                }
            }
            let cpu = Spread(row.samples.map { $0.userSeconds + $0.systemSeconds })?.median ?? 0
            text += "\nWhole child process (both managers, 10,000 requests built): \(format(cpu, 2)) CPU-s, "
            text += "peak RSS \(format(row.peakRSSMiB?.median ?? 0, 1)) MiB.\n"
        case .allocations:
            text += "\n\n\(scenario.summary)\n\n"
            text += "| measurement | mallocs median (min–max) |\n|---|---:|\n"
            guard let row = scenario.rows.first, row.isUsable else {
                text += "| failed | \(Report.escapeTable(scenario.rows.first?.failure ?? "no runs")) |\n"
                break
            }
            for (label, key) in [
                ("parser: head of a realistic nginx response (per response)", "parser_head_mallocs"),
                ("parser: 1 MiB body in 64 KiB pieces (per MiB)", "parser_body_mallocs_per_mib"),
                ("HTTPClient.execute, 64 MiB, reused ReceiveBuffer: whole exchange (second request)", "exchange_mallocs"),
                ("HTTPClient body loop, first to last body slice (per MiB)", "body_loop_mallocs_per_mib"),
            ] {
                if let spread = row.metric(key) {
                    text += "| \(label) | \(format(spread.median, 2)) (\(format(spread.min, 2))–\(format(spread.max, 2))) |\n"
                }
            }
            text += "\nCounted: malloc, calloc, realloc, memalign, aligned_alloc, posix_memalign of every thread "
            text += "in the process (free is not counted).\n"
        case .concurrency:
            text += " — 1 MiB files at 256 KiB/s per connection\n\n\(scenario.summary)\n\n"
            text += "| transfers | client | wall s median (min–max) | % of N × cap median (min–max) | CPU-s/GiB median "
            text += "| CPU-ms per file | peak RSS MiB median (max) |\n|---:|---|---:|---:|---:|---:|---:|\n"
            for row in scenario.rows {
                guard let wall = usable(row, Spread(row.samples.map(\.wallSeconds))),
                    let percent = row.percentOfIdeal, let rss = row.peakRSSMiB
                else {
                    text += "| \(row.transfers ?? 0) " + failedRow(row, columns: 6)
                    continue
                }
                text += "| \(grouped(Double(row.transfers ?? 0))) | \(row.label) "
                text += "| \(format(wall.median, 2)) (\(format(wall.min, 2))–\(format(wall.max, 2))) "
                text += "| \(format(percent.median, 1)) (\(format(percent.min, 1))–\(format(percent.max, 1))) "
                text += "| \(format(row.cpuSecondsPerGiB?.median ?? 0, 2)) | \(format(row.cpuMillisecondsPerFile?.median ?? 0, 2)) "
                text += "| \(format(rss.median, 1)) (\(format(rss.max, 1))) |\n"
            }
        case .httpsHandshakes:
            text = ScenarioContext.httpsHandshakesMarkdown(scenario)
        case .httpDevnull, .httpsDevnull, .httpFile, .httpsFile, .rss:
            break
        }
        return text
    }

    private static func usable(_ row: Row, _ spread: Spread?) -> Spread? { row.isUsable ? spread : nil }

    /// A row of a table of capped connections (segmented, mirrors): client, N, file, MB/s, % of N × `cap` (MB/s),
    /// CPU-s/GiB, peak RSS, nginx's bytes sent per file byte, then the scenario's own `last` column.
    private static func cappedRow(_ row: Row, cap: Double, last: (Row) -> String) -> String {
        guard let rate = usable(row, row.megabytesPerSecond) else { return failedRow(row, columns: 9) }
        let ideal = cap * Double(row.connections ?? 1)
        let sent = row.metric("sentBytes").map { format($0.median / Double(row.bytes), 3) } ?? "?"
        return "| \(row.label) | \(row.connections ?? 1) | \(sizeText(row.bytes)) | \(spreadText(rate)) "
            + "| \(ideal > 0 ? format(100 * rate.median / ideal, 1) + " %" : "—") "
            + "| \(format(row.cpuSecondsPerGiB?.median ?? 0, 3)) | \(format(row.peakRSSMiB?.median ?? 0, 1)) "
            + "| \(sent) | \(last(row)) |\n"
    }

    private static func spreadText(_ spread: Spread) -> String {
        "\(grouped(spread.median)) (\(grouped(spread.min))–\(grouped(spread.max)))"
    }

    private static func failedRow(_ row: Row, columns: Int) -> String {
        "| \(row.label) | failed: \(Report.escapeTable(row.failure ?? "no runs"))"
            + String(repeating: " |", count: columns - 1) + "\n"
    }
}
