import Foundation
import Glibc
import TestOrigin

/// The `mirrors` scenario: one file from 1, 2 and 4 rate-capped sources, DownloadKit's mirrors
/// against aria2c given the same URLs, one connection to each source.
extension ScenarioContext {
    /// Hosts 127.0.1.1 … 127.0.1.4 of one nginx: four sources to the clients (each address its own host, so
    /// per-host connection limits apply to each), the same bytes behind all of them.
    static let mirrorHosts = 4

    func runMirrors() throws -> ScenarioResult {
        let (cap, counts) = settings.mode.mirrors
        guard let most = counts.max(), most <= Self.mirrorHosts else {
            throw BenchError("mirrors: at most \(Self.mirrorHosts) sources")
        }
        let accessLog = settings.output + "/mirrors-nginx/access.log"
        let origin = try ConcurrencyOrigin(
            nginx: nginxExecutable, documentRoot: cacheDirectory, file: nil, hosts: Self.mirrorHosts,
            capBytesPerSecond: cap, prefix: settings.output + "/mirrors-nginx", accessLog: accessLog,
            sendfileMaxChunk: "256k")
        defer { origin.stop() }
        log("mirrors: nginx on 127.0.1.1–127.0.1.\(Self.mirrorHosts):\(origin.port), limit_rate \(cap) B/s per connection")

        var rows: [Row] = []
        var plans: [(client: Client, sources: Int)] = []
        for sources in counts {
            for client in clients where [.downloadkit, .aria2c].contains(client.kind) {
                plans.append((client, sources))
                var row = Row(
                    label: "\(client.kind.rawValue), \(sources) source\(sources == 1 ? "" : "s")", client: client.kind,
                    bytes: settings.mode.segmentedBytes(connections: sources))
                row.connections = sources
                row.idealBytesPerSecond = Double(cap * sources)
                rows.append(row)
            }
        }
        rows = alternate(.mirrors, rows: rows) { index, run in
            let (client, sources) = plans[index]
            let bytes = settings.mode.segmentedBytes(connections: sources)
            let name = BenchRunner.fileName(bytes: bytes)
            let urls = (1...sources).map { "http://127.0.1.\($0):\(origin.port)/c/\(name)" }
            let destination = downloadDirectory + "/mirrors-\(client.kind.rawValue).bin"
            let invocation = try client.mirrorsInvocation(urls: urls, destination: destination)
            let cleanup = [destination] + invocation.leftovers
            for file in cleanup { unlink(file) }
            defer {
                for file in cleanup { unlink(file) }
                syncFileSystem()
            }
            try warmPageCache(path: cacheDirectory + "/" + name)
            try warmExecutable(invocation.executable)
            try settlePageCache(directory: downloadDirectory, bytes: bytes)
            let logBase = logDirectory + "/mirrors-\(client.kind.rawValue)-\(sources)-\(run)"
            let before = Self.sourceLog(accessLog).count
            let measurement = try measure(
                invocation.executable, invocation.arguments, stdoutPath: logBase + ".out", stderrPath: logBase + ".err")
            try requireSuccess(measurement, logBase: logBase)
            // nginx logs a response when its connection is done with it, a moment after the client exits.
            var entries: [(address: String, bytes: Int64)] = []
            let deadline = monotonicSeconds() + 5
            repeat {
                entries = Array(Self.sourceLog(accessLog).dropFirst(before))
                if entries.reduce(0, { $0 + $1.bytes }) >= bytes { break }
                usleep(10_000)
            } while monotonicSeconds() < deadline
            let sent = entries.reduce(Int64(0)) { $0 + $1.bytes }
            guard sent >= bytes else { throw BenchError("nginx sent \(sent) of \(bytes) body bytes") }
            if let problem = spotCheck(path: destination, bytes: bytes, seed: BenchRunner.seed) {
                throw BenchError("downloaded file: \(problem)")
            }
            let bySource = Dictionary(grouping: entries, by: \.address).mapValues { $0.reduce(Int64(0)) { $0 + $1.bytes } }
            let shares = (1...sources).map { Double(bySource["127.0.1.\($0)"] ?? 0) / Double(bytes) }
            return Sample(
                measurement,
                metrics: [
                    "sentBytes": Double(sent), "requests": Double(entries.count),
                    "smallestSourceShare": 100 * (shares.min() ?? 0), "sourcesUsed": Double(shares.filter { $0 > 0 }.count),
                ])
        }
        return ScenarioResult(
            name: .mirrors, summary: ScenarioName.mirrors.summary, bytes: settings.mode.segmentedBytes(connections: most),
            rows: rows)
    }

    /// The mirrors nginx's log: `ADDRESS BODY_BYTES` per response (log_format `bysource`).
    private static func sourceLog(_ path: String) -> [(address: String, bytes: Int64)] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 2, let bytes = Int64(fields[1]) else { return nil }
            return (String(fields[0]), bytes)
        }
    }
}

extension Client {
    /// `mirrors`: one file from every URL in `urls`, one connection to each.
    func mirrorsInvocation(urls: [String], destination: String) throws -> Invocation {
        guard let first = urls.first else { throw BenchError("mirrors: no URL") }
        switch kind {
        case .aria2c:
            let directory = (destination as NSString).deletingLastPathComponent
            let name = (destination as NSString).lastPathComponent
            return Invocation(
                executable: executable,
                arguments: [
                    "-q", "-x1", "-s\(urls.count)", "-k1M", "--allow-overwrite=true", "--file-allocation=none",
                    "--auto-file-renaming=false", "-d", directory, "-o", name,
                ] + urls,
                leftovers: [destination + ".aria2"])
        case .downloadkit:
            return Invocation(
                executable: executable,
                arguments: ["fetch", "--mode", "file", "--connections", String(urls.count)]
                    + urls.dropFirst().flatMap { ["--mirror", $0] } + [first, destination],
                leftovers: [destination + ".dkpart", destination + ".dkresume"])
        case .curl, .wget, .axel:
            throw BenchError("\(kind.rawValue) is not part of the mirrors scenario")
        }
    }
}
