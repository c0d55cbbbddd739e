import BenchSupport
import Foundation
import Glibc
import TestOrigin

/// The `https-handshakes` scenario: where TLS handshakes, and their resumption, count.
extension ScenarioContext {
    /// The two groups of rows (a row's `variant`): many small files over HTTPS, and one file over 8 HTTPS
    /// connections.
    enum HandshakeGroup: String, Sendable {
        case smallFiles = "small-files"
        case newConnections = "new-connections"
        case segmented = "connections"

        /// The group's name in the table: "1,000 × 64 KiB over HTTPS", "--connections 8 over HTTPS".
        func title(files: Int) -> String {
            switch self {
            case .smallFiles: return "\(grouped(Double(files))) × 64 KiB over HTTPS"
            case .newConnections: return "\(grouped(Double(files))) × 64 KiB over HTTPS, a new connection each"
            case .segmented: return "--connections \(ScenarioContext.handshakeConnections) over HTTPS"
            }
        }
    }

    /// One planned row: who runs, in which group, and whether DownloadKit resumes sessions.
    private struct HandshakePlan {
        var client: Client
        var group: HandshakeGroup
        var resumes: Bool
    }

    static let handshakeConnections = 8

    /// Runs both groups against curl (and aria2c for the segmented one) in the same alternation. Every row
    /// counts the TCP connections nginx saw and how many of their handshakes resumed a session
    /// (`$ssl_session_reused`). DownloadKit runs twice per group: as shipped, and with
    /// `DKTLSConfiguration.resumesSessions = false` (`fetch --no-session-resumption`); curl likewise with
    /// and without `--no-sessionid`.
    func runHTTPSHandshakes() throws -> ScenarioResult {
        let count = settings.mode.smallFileCount
        func url(_ path: String) throws -> String {
            guard let url = nginx.tlsURL(site: "localhost", path: path) else { throw BenchError("no TLS site") }
            return url
        }
        let urls = try (0..<count).map { try url("/small-\(count)/" + Self.smallFileName($0)) }
        let listPath = downloadDirectory + "/https-small-files.list"
        try (urls.joined(separator: "\n") + "\n").write(toFile: listPath, atomically: true, encoding: .utf8)
        let totalSmall = Int64(count) * Self.smallFileBytes
        let bigBytes = settings.mode.segmentedBytes(connections: Self.handshakeConnections)
        let bigURL = try url("/" + BenchRunner.fileName(bytes: bigBytes))

        var plans: [HandshakePlan] = []
        var rows: [Row] = []
        func add(_ client: Client, _ group: HandshakeGroup, resumes: Bool, label: String) {
            plans.append(HandshakePlan(client: client, group: group, resumes: resumes))
            var row = Row(label: label, client: client.kind, bytes: group == .segmented ? bigBytes : totalSmall)
            row.variant = group.rawValue
            if group == .segmented { row.connections = Self.handshakeConnections } else { row.files = count }
            rows.append(row)
        }
        // Each group's rows, in the order they alternate: (client, resumes sessions, label).
        let lineUp: [(HandshakeGroup, [(ClientKind, Bool, String)])] = [
            (.smallFiles, [
                (.downloadkit, true, "downloadkit"), (.downloadkit, false, "downloadkit, no resumption"),
                (.curl, true, "curl"), (.curl, false, "curl --no-sessionid"),
            ]),
            (.newConnections, [
                (.downloadkit, true, "downloadkit"), (.downloadkit, false, "downloadkit, no resumption"),
                (.curl, true, "curl"), (.curl, false, "curl --no-sessionid"),
            ]),
            (.segmented, [
                (.downloadkit, true, "downloadkit ×8"), (.downloadkit, false, "downloadkit ×8, no resumption"),
                (.curl, true, "curl (one connection)"), (.aria2c, true, "aria2c ×8"),
            ]),
        ]
        for (group, entries) in lineUp {
            for (kind, resumes, label) in entries {
                if let client = clients.first(where: { $0.kind == kind }) { add(client, group, resumes: resumes, label: label) }
            }
        }

        let runsDirectory = downloadDirectory + "/https-handshakes"
        let sourceDirectory = Self.smallFileDirectory(cache: cacheDirectory, count: count)
        rows = alternate(.httpsHandshakes, rows: rows) { index, run in
            let plan = plans[index]
            let logBase = logDirectory + "/https-handshakes-\(index)-\(run)"
            let invocation: Invocation
            var cleanup: [String] = []
            let expected: Int64
            switch plan.group {
            case .smallFiles:
                let directory = runsDirectory + "/\(index)-\(run)"
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                try warmPageCache(paths: (0..<count).map { sourceDirectory + "/" + Self.smallFileName($0) })
                invocation = try plan.client.httpsManyInvocation(
                    urls: urls, listPath: listPath, directory: directory, configDirectory: downloadDirectory,
                    caFile: caFile, resumes: plan.resumes)
                cleanup = [directory]
                expected = totalSmall
            case .newConnections:
                try warmPageCache(paths: (0..<count).map { sourceDirectory + "/" + Self.smallFileName($0) })
                invocation = try plan.client.newConnectionsInvocation(
                    urls: urls, listPath: listPath, configDirectory: downloadDirectory, caFile: caFile,
                    resumes: plan.resumes)
                expected = totalSmall
            case .segmented:
                let destination = downloadDirectory + "/https-handshakes-\(plan.client.kind.rawValue).bin"
                invocation = try plan.client.httpsSegmentedInvocation(
                    url: bigURL, destination: destination, connections: Self.handshakeConnections, caFile: caFile,
                    resumes: plan.resumes)
                cleanup = [destination] + invocation.leftovers
                for file in cleanup { unlink(file) }
                try warmPageCache(path: cacheDirectory + "/" + BenchRunner.fileName(bytes: bigBytes))
                expected = bigBytes
            }
            defer {
                for path in cleanup { try? FileManager.default.removeItem(atPath: path) }
                syncFileSystem()
            }
            let before = try nginx.accessLog().count
            let measurement = try measure(
                invocation.executable, invocation.arguments, stdoutPath: logBase + ".out", stderrPath: logBase + ".err")
            try requireSuccess(measurement, logBase: logBase)
            let entries = try logEntries(after: before, atLeastBytes: expected)
            let sent = bodyBytes(entries)
            guard sent >= expected else { throw BenchError("nginx sent \(sent) of \(expected) body bytes") }
            // One entry per request; a connection's handshake resumed or not, whichever of its requests says so.
            var connections: [Int: Bool] = [:]
            for entry in entries { connections[entry.connection] = entry.tlsSessionReused }
            var sample = Sample(
                measurement,
                metrics: [
                    "tcpConnections": Double(connections.count),
                    "resumedHandshakes": Double(connections.values.filter { $0 }.count),
                ])
            sample.tlsProtocol = entries.first?.tlsProtocol
            sample.tlsCipher = entries.first?.tlsCipher
            return sample
        }
        try? FileManager.default.removeItem(atPath: runsDirectory)
        return ScenarioResult(
            name: .httpsHandshakes, summary: ScenarioName.httpsHandshakes.summary, bytes: bigBytes, rows: rows)
    }

    /// The table: both groups, with files per second or MB/s, CPU, connections and resumed handshakes, and
    /// the CPU one resumed handshake saved (DownloadKit without resumption minus with, per resumed handshake).
    static func httpsHandshakesMarkdown(_ scenario: ScenarioResult) -> String {
        var text = "\n## \(scenario.name.rawValue)\n\n\(scenario.summary)\n\n"
        text += "| rows | client | files/s or MB/s median (min–max) | CPU-ms per file or CPU-s/GiB | TCP connections "
        text += "| resumed handshakes |\n|---|---|---:|---:|---:|---:|\n"
        for row in scenario.rows {
            let files = scenario.rows.compactMap(\.files).first ?? 0
            let group = HandshakeGroup(rawValue: row.variant ?? "")?.title(files: files) ?? ""
            guard row.isUsable else {
                text += "| \(group) | \(row.label) | failed: \(Report.escapeTable(row.failure ?? "no runs")) | | | |\n"
                continue
            }
            let rate = row.files != nil ? row.filesPerSecond : row.megabytesPerSecond
            let cpu = row.files != nil ? row.cpuMillisecondsPerFile : row.cpuSecondsPerGiB
            text += "| \(group) | \(row.label) "
            text += "| \(rate.map { "\(grouped($0.median)) (\(grouped($0.min))–\(grouped($0.max)))" } ?? "—") "
            text += "| \(format(cpu?.median ?? 0, 3)) | \(format(row.metric("tcpConnections")?.median ?? 0, 0)) "
            text += "| \(format(row.metric("resumedHandshakes")?.median ?? 0, 0)) |\n"
        }
        for group in [HandshakeGroup.smallFiles, .newConnections, .segmented] {
            let mine = scenario.rows.filter { $0.client == .downloadkit && $0.variant == group.rawValue && $0.isUsable }
            guard mine.count == 2, let with = mine.first(where: { !$0.label.contains("no resumption") }),
                let without = mine.first(where: { $0.label.contains("no resumption") }),
                let resumed = with.metric("resumedHandshakes")?.median
            else { continue }
            // A handful of resumed handshakes among a transfer's CPU is noise, not a figure.
            guard resumed >= 100 else { continue }
            func cpu(_ row: Row) -> Double {
                Spread(row.samples.map { $0.userSeconds + $0.systemSeconds })?.median ?? 0
            }
            let saved = (cpu(without) - cpu(with)) * 1000 / resumed
            let files = scenario.rows.compactMap(\.files).first ?? 0
            text += "\n\(group.title(files: files)): DownloadKit's CPU without resumption − with, per resumed handshake: "
            text += "\(format(saved, 2)) ms (median CPU \(format(cpu(without), 3)) s − \(format(cpu(with), 3)) s, "
            text += "\(format(resumed, 0)) resumed).\n"
        }
        return text
    }
}

extension Client {
    /// `https-handshakes`, small files: every HTTPS URL into `directory`, 16 at a time, trusting `caFile`.
    func httpsManyInvocation(
        urls: [String], listPath: String, directory: String, configDirectory: String, caFile: String, resumes: Bool
    ) throws -> Invocation {
        var invocation = try manyInvocation(
            urls: urls, listPath: listPath, directory: directory, configDirectory: configDirectory)
        switch kind {
        case .downloadkit:
            invocation.arguments += ["--cacert", caFile] + (resumes ? [] : ["--no-session-resumption"])
        case .curl:
            invocation.arguments = ["--cacert", caFile] + (resumes ? [] : ["--no-sessionid"]) + invocation.arguments
        default:
            throw BenchError("\(kind.rawValue) is not part of the https-handshakes scenario's small files")
        }
        return invocation
    }

    /// `https-handshakes`, a new connection per file: every HTTPS URL in turn with `Connection: close`,
    /// bodies discarded (DownloadKit `fetch --mode connections`; curl `-K` with `output = /dev/null` per URL).
    func newConnectionsInvocation(
        urls: [String], listPath: String, configDirectory: String, caFile: String, resumes: Bool
    ) throws -> Invocation {
        switch kind {
        case .downloadkit:
            return Invocation(
                executable: executable,
                arguments: ["fetch", "--mode", "connections", "--list", listPath, "--cacert", caFile]
                    + (resumes ? [] : ["--no-session-resumption"]))
        case .curl:
            let config = configDirectory + "/new-connections.curlrc"
            let text = urls.map { "url = \"\($0)\"\noutput = \"/dev/null\"\n" }.joined()
            try text.write(toFile: config, atomically: true, encoding: .utf8)
            return Invocation(
                executable: executable,
                arguments: ["-s", "-f", "--cacert", caFile, "-H", "Connection: close"]
                    + (resumes ? [] : ["--no-sessionid"]) + ["-K", config])
        default:
            throw BenchError("\(kind.rawValue) is not part of the https-handshakes scenario's new connections")
        }
    }

    /// `https-handshakes`, one file: DownloadKit and aria2c over `connections` connections, curl over one.
    func httpsSegmentedInvocation(url: String, destination: String, connections: Int, caFile: String, resumes: Bool)
        throws -> Invocation
    {
        switch kind {
        case .downloadkit, .aria2c:
            var invocation = try segmentedInvocation(url: url, destination: destination, connections: connections)
            if kind == .downloadkit {
                invocation.arguments.insert(contentsOf: ["--cacert", caFile] + (resumes ? [] : ["--no-session-resumption"]), at: 1)
            } else {
                invocation.arguments.insert("--ca-certificate=" + caFile, at: 0)
            }
            return invocation
        case .curl:
            return Invocation(
                executable: executable, arguments: ["-s", "-f", "--cacert", caFile, "-o", destination, url])
        case .wget, .axel:
            throw BenchError("\(kind.rawValue) is not part of the https-handshakes scenario")
        }
    }
}
