import BenchSupport
import DownloadKitManager
import Foundation

enum Report {
    static func write(_ results: BenchResults, markdown: String, to directory: String) throws {
        try markdown.write(toFile: directory + "/results.md", atomically: true, encoding: .utf8)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(results).write(to: URL(fileURLWithPath: directory + "/results.json"))
        try svg(results).write(toFile: directory + "/chart.svg", atomically: true, encoding: .utf8)
    }

    // MARK: Markdown

    static func markdown(_ results: BenchResults) -> String {
        let machine = results.machine
        var text = "# DownloadKit benchmark results\n\n"
        text += "- Date: \(machine.date)\n"
        text += "- Command: `\(CommandLine.arguments.dropFirst().reduce("downloadkit-bench") { $0 + " " + $1 })`\n"
        text += "- Machine: `\(machine.uname)`\n"
        text += "- CPU: \(machine.cpuModel), \(machine.cpuCount) online; RAM \(format(machine.memoryGiB, 1)) GiB\n"
        text += "- Load average (1/5/15 min): \(machine.loadAverageAtStart) at start, \(results.loadAverageAtEnd) at end "
        text += "(nginx and the measured client add up to about 2; more is other work on the machine)\n"
        text += "- Swift: \(machine.swiftVersion); build: \(machine.buildConfiguration)\n"
        for name in ["nginx", "openssl", "curl", "wget", "aria2c", "axel"] {
            if let version = machine.versions[name] { text += "- \(name): \(version)\n" }
        }
        text += "- Mode: \(results.mode.rawValue); file size \(sizeText(results.mainBytes)); rss sizes "
        text += results.rssBytes.map(sizeText).joined(separator: " vs ")
        text += "; \(results.runs) runs per client, clients alternating (A B C A B C …)\n"
        text += "- Origin: nginx, one process, sendfile on, tcp_nopush off, on 127.0.0.1; TLS with a test CA "
        text += "(clients get `--cacert`)\n\n"
        text += "MB/s = 10^6 bytes per second (wall time, spawn to exit). CPU-s/GiB = user + system seconds of "
        text += "the client process (wait4) per 2^30 bytes. Ranges are min–max over the runs. Ratios compare "
        text += "medians with the fastest peer of the scenario.\n"

        for scenario in results.scenarios {
            if !scenario.name.isPlainThroughput && scenario.name != .rss {
                text += ScenarioTables.markdown(scenario, results: results)
                continue
            }
            text += "\n## \(scenario.name.rawValue)"
            if scenario.name != .rss { text += " — \(sizeText(scenario.bytes))" }
            text += "\n\n\(scenario.summary)\n\n"
            text += "| client | MB/s median (min–max) | CPU-s/GiB median (min–max) | peak RSS MiB median (max) "
            text += "| throughput vs best peer | CPU vs that peer |\n"
            text += "|---|---:|---:|---:|---:|---:|\n"
            let best = scenario.bestPeer
            for row in scenario.rows {
                guard row.isUsable, let rate = row.megabytesPerSecond, let cpu = row.cpuSecondsPerGiB,
                    let rss = row.peakRSSMiB
                else {
                    text += "| \(row.label) | failed: \(escapeTable(row.failure ?? "no runs")) | | | | |\n"
                    continue
                }
                var ratio = "—"
                var cpuRatio = "—"
                if let best, let bestRate = best.megabytesPerSecond?.median, let bestCPU = best.cpuSecondsPerGiB?.median,
                    scenario.name != .rss
                {
                    ratio = "\(format(rate.median / bestRate, 2))× \(best.label)"
                    cpuRatio = "\(format(cpu.median / bestCPU, 2))× \(best.label) CPU"
                }
                text += "| \(row.label) | \(grouped(rate.median)) (\(grouped(rate.min))–\(grouped(rate.max))) "
                text += "| \(format(cpu.median, 3)) (\(format(cpu.min, 3))–\(format(cpu.max, 3))) "
                text += "| \(format(rss.median, 1)) (\(format(rss.max, 1))) | \(ratio) | \(cpuRatio) |\n"
            }
            if scenario.name.isTLS {
                let seen = scenario.rows.filter(\.isUsable).map { row in
                    let versions = Set(row.samples.compactMap(\.tlsProtocol)).sorted().joined(separator: "/")
                    let suites = Set(row.samples.compactMap(\.tlsCipher)).sorted().joined(separator: "/")
                    return "\(row.label) \(versions.isEmpty ? "?" : versions)" + (suites.isEmpty ? "" : " " + suites)
                }
                text += "\nTLS version and suite logged by nginx: \(seen.joined(separator: ", ")).\n"
            }
            if scenario.name.isPlainThroughput {
                let busy = scenario.rows.filter(\.isUsable).compactMap { row -> String? in
                    guard let share = row.originBusyShare else { return nil }
                    return "\(row.label) \(format(100 * share.median, 0)) % (\(format(100 * share.min, 0))–\(format(100 * share.max, 0)))"
                }
                if !busy.isEmpty {
                    text += "\nnginx's one worker on the CPU during each client's run (its CPU time over the run's wall time, "
                    text += "median, min–max; near 100 % the origin, not the client, sets the pace): "
                    text += busy.joined(separator: ", ") + ".\n"
                }
            }
            if scenario.name == .rss, scenario.rows.count == 2, let small = scenario.rows[0].peakRSSMiB?.max,
                let large = scenario.rows[1].peakRSSMiB?.max
            {
                text += "\nPeak RSS changes by \(format(large - small, 1)) MiB from \(sizeText(scenario.rows[0].bytes)) "
                text += "to \(sizeText(scenario.rows[1].bytes)).\n"
            }
        }

        text += "\n## Notes\n\n"
        for note in results.notes { text += "- \(note)\n" }
        text += targetsMarkdown(results.targets)
        return text
    }

    /// The last section (so it ends the printed report): every target with both figures, the ratio,
    /// the noise of the runs and the verdict.
    static func targetsMarkdown(_ checks: [TargetCheck]) -> String {
        guard !checks.isEmpty else { return "" }
        var text = "\n## Targets (issue #18)\n\n"
        text += "Judged on this run's medians. Noise: half the min–max range of the runs, relative to each median "
        text += "(DownloadKit / baseline); a compared value within that noise of its threshold is \"within noise\", "
        text += "neither met nor not met. Rows from DESIGN.md are the bench's own.\n\n"
        text += "| scenario | DownloadKit | baseline | ratio | target | noise | verdict |\n|---|---:|---:|---:|---|---|---|\n"
        for check in checks {
            let source = check.source == "issue #18" ? "" : " (\(check.source))"
            let verdict = check.verdict == .notMet ? "**not met**" : check.verdictText
            text += "| \(check.scenario)\(source) | \(check.downloadkit) | \(check.peer) | \(check.ratio) "
            text += "| \(escapeTable(check.target)) | \(check.noise) | \(escapeTable(verdict)) |\n"
        }
        let counts = Dictionary(grouping: checks, by: \.verdict).mapValues(\.count)
        text += "\n" + [TargetCheck.Verdict.met, .notMet, .withinNoise, .notMeasured].map {
            "\($0.rawValue): \(counts[$0] ?? 0)"
        }.joined(separator: ", ") + ".\n"
        return text
    }

    static func escapeTable(_ text: String) -> String {
        text.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "\n", with: " ")
    }

    // MARK: SVG

    static func color(_ kind: ClientKind) -> String {
        switch kind {
        case .downloadkit: return "#e4572e"
        case .curl: return "#2e86de"
        case .wget: return "#27ae60"
        case .aria2c: return "#8e44ad"
        case .axel: return "#7f8c8d"
        }
    }

    private static func xml(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    /// One bar of the chart.
    private struct Bar {
        var label: String
        var client: ClientKind
        /// nil: the row failed.
        var spread: Spread?
        var value: String
        /// A per-bar mark (segmented: the ideal N × cap).
        var tick: Double?
    }

    /// One group of bars with its own title and scale (nil scale: the shared MB/s scale).
    private struct Group {
        var title: String
        var bars: [Bar]
        var scale: Double?
        /// A dashed target line across the group.
        var target: Double?
    }

    private static func groups(_ results: BenchResults) -> [Group] {
        var groups: [Group] = []
        for scenario in results.scenarios {
            switch scenario.name {
            case .httpDevnull, .httpsDevnull, .httpFile, .httpsFile:
                let bars = scenario.rows.map { row in
                    var value = row.megabytesPerSecond.map { "\(grouped($0.median)) MB/s" } ?? ""
                    if let cpu = row.cpuSecondsPerGiB?.median { value += " · \(format(cpu, 2)) CPU-s/GiB" }
                    return Bar(label: row.label, client: row.client, spread: usable(row, row.megabytesPerSecond), value: value)
                }
                groups.append(Group(
                    title: "\(scenario.name.rawValue) — \(sizeText(scenario.bytes)), MB/s (10^6 B/s), median with min–max",
                    bars: bars, scale: nil))
            case .rss:
                let bars = scenario.rows.map { row in
                    Bar(label: row.label, client: row.client, spread: usable(row, row.peakRSSMiB),
                        value: row.peakRSSMiB.map { "\(format($0.median, 1)) MiB" } ?? "")
                }
                let top = max(48, bars.compactMap { $0.spread?.max }.max() ?? 1)
                groups.append(Group(
                    title: "rss — peak RSS, MiB (dashed line: 32 MiB target)", bars: bars, scale: top, target: 32))
            case .segmented, .segmentedRoundTrip, .mirrors:
                let cap = Double(scenario.name == .mirrors ? results.mode.mirrors.capBytesPerSecond : results.segmentedCap ?? 0) / 1e6
                let bars = scenario.rows.map { row in
                    let ideal = cap * Double(row.connections ?? 1)
                    var value = row.megabytesPerSecond.map { "\(grouped($0.median)) MB/s" } ?? ""
                    if let rate = row.megabytesPerSecond?.median, ideal > 0 {
                        value += " · \(format(100 * rate / ideal, 1)) % of N × cap"
                    }
                    return Bar(
                        label: row.label, client: row.client, spread: usable(row, row.megabytesPerSecond), value: value,
                        tick: ideal)
                }
                let top = max(bars.compactMap { $0.spread?.max }.max() ?? 1, bars.compactMap(\.tick).max() ?? 1)
                let path = [.segmentedRoundTrip: ", 50 ms round trip", .mirrors: ", N sources"][scenario.name] ?? ""
                groups.append(Group(
                    title: "\(scenario.name.rawValue) — \(format(cap, 0)) MB/s per connection\(path), MB/s "
                        + "(red tick: N × cap)", bars: bars, scale: top * 1.05))
            case .smallFiles:
                let bars = scenario.rows.map { row in
                    Bar(label: row.label, client: row.client, spread: usable(row, row.filesPerSecond),
                        value: row.filesPerSecond.map { "\(grouped($0.median)) files/s" } ?? "")
                }
                groups.append(Group(
                    title: "small-files — \(scenario.rows.first?.files ?? 0) × 64 KiB, files per second",
                    bars: bars, scale: bars.compactMap { $0.spread?.max }.max() ?? 1))
            case .resume:
                let bars = scenario.rows.map { row in
                    var value = Spread(row.samples.map(\.wallSeconds)).map { "\(format($0.median, 2)) s" } ?? ""
                    if let twice = row.metric("fetchedTwice")?.median {
                        value += " · \(format(twice / 1_048_576, 1)) MiB fetched twice"
                    }
                    return Bar(
                        label: row.label, client: row.client,
                        spread: usable(row, Spread(row.samples.map(\.wallSeconds))), value: value)
                }
                groups.append(Group(
                    title: "resume — \(sizeText(scenario.bytes)), killed at half and rerun: total wall seconds (lower is better)",
                    bars: bars, scale: bars.compactMap { $0.spread?.max }.max() ?? 1))
            case .queue:
                guard let row = scenario.rows.first else { continue }
                let bars = [("enqueue 10,000", "enqueueMs"), ("restore 10,000", "restoreMs")].map { label, key in
                    Bar(label: label, client: .downloadkit, spread: usable(row, row.metric(key)),
                        value: row.metric(key).map { "\(format($0.median, 1)) ms" } ?? "")
                }
                groups.append(Group(
                    title: "queue — DownloadManager, milliseconds (lower is better)", bars: bars,
                    scale: bars.compactMap { $0.spread?.max }.max() ?? 1))
            case .concurrency:
                let bars = scenario.rows.map { row in
                    var value = row.peakRSSMiB.map { "\(format($0.median, 1)) MiB" } ?? ""
                    if let percent = row.percentOfIdeal?.median { value += " · \(format(percent, 1)) % of N × cap" }
                    return Bar(label: row.label, client: row.client, spread: usable(row, row.peakRSSMiB), value: value)
                }
                let top = max(160, bars.compactMap { $0.spread?.max }.max() ?? 1)
                groups.append(Group(
                    title: "concurrency — peak RSS at N transfers, MiB (dashed line: 128 MiB target at 1,024)",
                    bars: bars, scale: top, target: 128))
            case .httpsHandshakes:
                let bars = scenario.rows.filter { $0.files != nil }.map { row in
                    Bar(label: row.label, client: row.client, spread: usable(row, row.filesPerSecond),
                        value: row.filesPerSecond.map { "\(grouped($0.median)) files/s" } ?? "")
                }
                groups.append(Group(
                    title: "https-handshakes — "
                        + ScenarioContext.HandshakeGroup.smallFiles.title(files: scenario.rows.compactMap(\.files).first ?? 0)
                        + ", files per second",
                    bars: bars, scale: bars.compactMap { $0.spread?.max }.max() ?? 1))
            case .allocations:
                guard let row = scenario.rows.first else { continue }
                let bars = [
                    ("parser: head", "parser_head_mallocs", "mallocs"),
                    ("parser: body", "parser_body_mallocs_per_mib", "mallocs/MiB"),
                    ("body loop", "body_loop_mallocs_per_mib", "mallocs/MiB"),
                ].map { label, key, unit in
                    Bar(label: label, client: .downloadkit, spread: usable(row, row.metric(key)),
                        value: row.metric(key).map { "\(format($0.median, 2)) \(unit)" } ?? "")
                }
                groups.append(Group(
                    title: "allocations — mallocs (head: per response; body: per MiB at steady state)", bars: bars,
                    scale: max(1, bars.compactMap { $0.spread?.max }.max() ?? 1)))
            }
        }
        return groups
    }

    private static func usable(_ row: Row, _ spread: Spread?) -> Spread? { row.isUsable ? spread : nil }

    /// A horizontal bar chart: one group per scenario, one bar per client (median, with a min–max
    /// whisker). The single-file throughput scenarios share one MB/s scale; every other scenario has
    /// its own (peak RSS with the 32 MiB target, segmented MB/s with a tick at N × cap, files/s,
    /// seconds, milliseconds, mallocs).
    static func svg(_ results: BenchResults) -> String {
        let width = 1000.0
        let labelWidth = 190.0
        let barArea = 540.0
        let barHeight = 20.0
        let gap = 6.0
        let groups = groups(results)
        let sharedMax = groups.filter { $0.scale == nil }.flatMap(\.bars).compactMap { $0.spread?.max }.max() ?? 1
        var body = ""
        var y = 84.0
        for group in groups {
            body += "<text x=\"20\" y=\"\(y)\" class=\"title\">\(xml(group.title))</text>\n"
            y += 14
            let scaleMax = max(group.scale ?? sharedMax, 1e-9)
            let top = y
            for bar in group.bars {
                body += "<text x=\"\(labelWidth - 10)\" y=\"\(y + barHeight * 0.72)\" class=\"label\" "
                body += "text-anchor=\"end\">\(xml(bar.label))</text>\n"
                if let spread = bar.spread {
                    let length = barArea * spread.median / scaleMax
                    body += "<rect x=\"\(labelWidth)\" y=\"\(y)\" width=\"\(format(length, 1))\" height=\"\(barHeight)\" "
                    body += "fill=\"\(color(bar.client))\"/>\n"
                    let low = labelWidth + barArea * spread.min / scaleMax
                    let high = labelWidth + barArea * spread.max / scaleMax
                    let middle = y + barHeight / 2
                    body += "<line x1=\"\(format(low, 1))\" y1=\"\(middle)\" x2=\"\(format(high, 1))\" y2=\"\(middle)\" "
                    body += "class=\"whisker\"/>\n"
                    var right = max(labelWidth + length, high)
                    if let tick = bar.tick {
                        let x = labelWidth + barArea * tick / scaleMax
                        body += "<line x1=\"\(format(x, 1))\" y1=\"\(y - 2)\" x2=\"\(format(x, 1))\" "
                        body += "y2=\"\(y + barHeight + 2)\" class=\"target\"/>\n"
                        right = max(right, x)
                    }
                    if let target = group.target { right = max(right, labelWidth + barArea * target / scaleMax) }
                    body += "<text x=\"\(format(right + 8, 1))\" y=\"\(y + barHeight * 0.72)\" "
                    body += "class=\"value\">\(xml(bar.value))</text>\n"
                } else {
                    body += "<text x=\"\(labelWidth + 4)\" y=\"\(y + barHeight * 0.72)\" class=\"value\">failed</text>\n"
                }
                y += barHeight + gap
            }
            if let target = group.target {
                let x = labelWidth + barArea * target / scaleMax
                body += "<line x1=\"\(format(x, 1))\" y1=\"\(top - 4)\" x2=\"\(format(x, 1))\" y2=\"\(y)\" class=\"target\"/>\n"
            }
            y += 22
        }
        let machine = results.machine
        let subtitle = "\(machine.date) · \(machine.cpuModel) × \(machine.cpuCount) · \(results.runs) runs each · loopback nginx"
        return """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(y + 10))" \
            viewBox="0 0 \(Int(width)) \(Int(y + 10))" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">
            <style>
            .heading { font-size: 20px; font-weight: bold; fill: #222; }
            .subtitle { font-size: 12px; fill: #555; }
            .title { font-size: 14px; font-weight: bold; fill: #222; }
            .label { font-size: 13px; fill: #222; }
            .value { font-size: 12px; fill: #333; }
            .whisker { stroke: #111; stroke-width: 1.5; }
            .target { stroke: #c0392b; stroke-width: 1.5; stroke-dasharray: 5 4; }
            </style>
            <rect width="100%" height="100%" fill="white"/>
            <text x="20" y="30" class="heading">DownloadKit vs peers, loopback</text>
            <text x="20" y="50" class="subtitle">\(xml(subtitle))</text>
            \(body)</svg>

            """
    }
}
