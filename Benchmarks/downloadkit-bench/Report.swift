import Foundation

/// DESIGN.md's "Targets to beat", evaluated on one run's results (always against curl in the same run).
enum Targets {
    static func evaluate(_ scenarios: [ScenarioResult]) -> [TargetCheck] {
        var checks: [TargetCheck] = []
        for scenario in scenarios {
            switch scenario.name {
            case .httpFile:
                checks.append(versusCurl(scenario, minThroughput: 1.4, maxCPU: 0.5))
            case .httpDevnull:
                checks.append(versusCurl(scenario, minThroughput: 1.2, maxCPU: nil))
            case .httpsDevnull, .httpsFile:
                checks.append(versusCurl(scenario, minThroughput: 1.0, maxCPU: 0.8))
            case .rss:
                checks.append(rss(scenario))
            }
        }
        return checks
    }

    private static func versusCurl(_ scenario: ScenarioResult, minThroughput: Double, maxCPU: Double?)
        -> TargetCheck
    {
        var target = "≥ \(format(minThroughput, 1))× curl"
        if let maxCPU { target += ", ≤ \(format(maxCPU, 1))× its CPU-s/GiB" }
        guard let engine = scenario.row(.downloadkit), let curl = scenario.row(.curl),
            let engineRate = engine.megabytesPerSecond?.median, let curlRate = curl.megabytesPerSecond?.median,
            let engineCPU = engine.cpuSecondsPerGiB?.median, let curlCPU = curl.cpuSecondsPerGiB?.median
        else {
            return TargetCheck(
                scenario: scenario.name.rawValue, target: target, measured: "not measured (a row failed or is missing)",
                met: nil)
        }
        let throughput = engineRate / curlRate
        let cpu = engineCPU / curlCPU
        var met = throughput >= minThroughput
        if let maxCPU { met = met && cpu <= maxCPU }
        return TargetCheck(
            scenario: scenario.name.rawValue, target: target,
            measured: "\(format(throughput, 2))× curl, \(format(cpu, 2))× its CPU", met: met)
    }

    private static func rss(_ scenario: ScenarioResult) -> TargetCheck {
        let target = "≤ 32 MiB at both sizes, and flat (larger size within 2 MiB of the smaller)"
        let rows = scenario.rows
        guard rows.count == 2, rows.allSatisfy(\.isUsable), let small = rows[0].peakRSSMiB?.max,
            let large = rows[1].peakRSSMiB?.max
        else {
            return TargetCheck(scenario: "rss", target: target, measured: "not measured", met: nil)
        }
        let measured =
            "\(format(small, 1)) MiB at \(sizeText(rows[0].bytes)), \(format(large, 1)) MiB at \(sizeText(rows[1].bytes))"
        return TargetCheck(
            scenario: "rss", target: target, measured: measured, met: max(small, large) <= 32 && large - small <= 2)
    }
}

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
                    return "\(row.label) \(versions.isEmpty ? "?" : versions)"
                }
                text += "\nTLS version logged by nginx: \(seen.joined(separator: ", ")).\n"
            }
            if scenario.name == .rss, scenario.rows.count == 2, let small = scenario.rows[0].peakRSSMiB?.max,
                let large = scenario.rows[1].peakRSSMiB?.max
            {
                text += "\nPeak RSS changes by \(format(large - small, 1)) MiB from \(sizeText(scenario.rows[0].bytes)) "
                text += "to \(sizeText(scenario.rows[1].bytes)).\n"
            }
        }

        if !results.targets.isEmpty {
            text += "\n## Targets (shared/DESIGN.md, \"Targets to beat\")\n\n"
            text += "| scenario | target | measured | met |\n|---|---|---|---|\n"
            for check in results.targets {
                let met = check.met.map { $0 ? "yes" : "**no**" } ?? "n/a"
                text += "| \(check.scenario) | \(check.target) | \(check.measured) | \(met) |\n"
            }
        }
        text += "\n## Notes\n\n"
        for note in results.notes { text += "- \(note)\n" }
        return text
    }

    private static func escapeTable(_ text: String) -> String {
        text.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "\n", with: " ")
    }

    /// 4812.3 → "4,812".
    private static func grouped(_ value: Double) -> String {
        let digits = String(Int(value.rounded()))
        var result = ""
        for (index, character) in digits.reversed().enumerated() {
            if index > 0 && index % 3 == 0 { result.append(",") }
            result.append(character)
        }
        return String(result.reversed())
    }

    // MARK: SVG

    private static func color(_ kind: ClientKind) -> String {
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

    /// A horizontal bar chart: one group per scenario, one bar per client (median, with a min–max
    /// whisker). Throughput scenarios share one MB/s scale; the rss scenario shows peak RSS in MiB on
    /// its own scale with the 32 MiB target marked.
    static func svg(_ results: BenchResults) -> String {
        let width = 1000.0
        let labelWidth = 190.0
        let barArea = 540.0
        let barHeight = 20.0
        let gap = 6.0
        let throughputMax = results.scenarios.filter { $0.name != .rss }.flatMap(\.rows)
            .compactMap { $0.isUsable ? $0.megabytesPerSecond?.max : nil }.max() ?? 1
        var body = ""
        var y = 84.0
        for scenario in results.scenarios {
            let isRSS = scenario.name == .rss
            let title =
                isRSS
                ? "rss — peak RSS, MiB (dashed line: 32 MiB target)"
                : "\(scenario.name.rawValue) — \(sizeText(scenario.bytes)), MB/s (10^6 B/s), median with min–max"
            body += "<text x=\"20\" y=\"\(y)\" class=\"title\">\(xml(title))</text>\n"
            y += 14
            let scaleMax =
                isRSS ? max(48, scenario.rows.compactMap { $0.isUsable ? $0.peakRSSMiB?.max : nil }.max() ?? 1) : throughputMax
            let top = y
            for row in scenario.rows {
                body += "<text x=\"\(labelWidth - 10)\" y=\"\(y + barHeight * 0.72)\" class=\"label\" "
                body += "text-anchor=\"end\">\(xml(row.label))</text>\n"
                let spread = isRSS ? row.peakRSSMiB : row.megabytesPerSecond
                if row.isUsable, let spread {
                    let length = barArea * spread.median / scaleMax
                    body += "<rect x=\"\(labelWidth)\" y=\"\(y)\" width=\"\(format(length, 1))\" height=\"\(barHeight)\" "
                    body += "fill=\"\(color(row.client))\"/>\n"
                    let low = labelWidth + barArea * spread.min / scaleMax
                    let high = labelWidth + barArea * spread.max / scaleMax
                    let middle = y + barHeight / 2
                    body += "<line x1=\"\(format(low, 1))\" y1=\"\(middle)\" x2=\"\(format(high, 1))\" y2=\"\(middle)\" "
                    body += "class=\"whisker\"/>\n"
                    var value = isRSS ? "\(format(spread.median, 1)) MiB" : "\(grouped(spread.median)) MB/s"
                    if !isRSS, let cpu = row.cpuSecondsPerGiB?.median { value += " · \(format(cpu, 2)) CPU-s/GiB" }
                    let targetX = isRSS ? labelWidth + barArea * 32 / scaleMax : 0
                    body += "<text x=\"\(format(max(labelWidth + length, high, targetX) + 8, 1))\" y=\"\(y + barHeight * 0.72)\" "
                    body += "class=\"value\">\(xml(value))</text>\n"
                } else {
                    body += "<text x=\"\(labelWidth + 4)\" y=\"\(y + barHeight * 0.72)\" class=\"value\">failed</text>\n"
                }
                y += barHeight + gap
            }
            if isRSS {
                let x = labelWidth + barArea * 32 / scaleMax
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
