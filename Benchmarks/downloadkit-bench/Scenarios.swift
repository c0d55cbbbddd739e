import BenchSupport
import DownloadKitManager
import Foundation
import Glibc
import TestOrigin

/// The scenarios beyond one-file-one-connection: segmented, small-files, resume, queue, allocations.
extension ScenarioContext {
    /// Runs `cases` alternating (A B C A B C …) for `settings.runs` rounds; a failed run marks its row.
    func alternate(
        _ name: ScenarioName, rows initial: [Row], measureOnce: (Int, Int) throws -> Sample
    ) -> [Row] {
        var rows = initial
        log("\(name.rawValue): \(rows.map(\.label).joined(separator: ", ")) × \(settings.runs) runs")
        for run in 1...settings.runs {
            for index in rows.indices where rows[index].failure == nil {
                do {
                    let sample = try measureOnce(index, run)
                    rows[index].samples.append(sample)
                    var line = "  \(name.rawValue) run \(run)/\(settings.runs) \(rows[index].label): "
                    line += "\(format(sample.wallSeconds, 3)) s"
                    if let metrics = sample.metrics {
                        line += " " + metrics.sorted { $0.key < $1.key }.map { "\($0.key)=\(format($0.value, 2))" }
                            .joined(separator: " ")
                    }
                    log(line)
                } catch {
                    rows[index].failure = "run \(run): \(error)"
                    log("  \(name.rawValue) run \(run) \(rows[index].label) FAILED: \(error)")
                }
            }
        }
        return rows
    }

    /// Waits until nginx has logged requests after `count` whose 200/206 bodies add up to `bytes`
    /// (aborted requests are logged when their connection closes, a moment after the client exits).
    /// - Returns: The new entries.
    func logEntries(
        after count: Int, atLeastBytes bytes: Int64, timeout: Double = 5, origin: NginxServer? = nil
    ) throws -> [NginxAccessLogEntry] {
        let origin = origin ?? nginx
        let deadline = monotonicSeconds() + timeout
        while true {
            let entries = Array(try origin.accessLog().dropFirst(count))
            let sent = entries.filter { $0.status == 200 || $0.status == 206 }.reduce(Int64(0)) { $0 + $1.bodyBytesSent }
            if sent >= bytes || monotonicSeconds() > deadline { return entries }
            usleep(10_000)
        }
    }

    func bodyBytes(_ entries: [NginxAccessLogEntry]) -> Int64 {
        entries.filter { $0.status == 200 || $0.status == 206 }.reduce(Int64(0)) { $0 + $1.bodyBytesSent }
    }

    func requireSuccess(_ measurement: Measurement, logBase: String) throws {
        guard measurement.succeeded else {
            let reason = measurement.signal.map { "killed by signal \($0)" } ?? "exit status \(measurement.exitStatus)"
            throw BenchError("\(reason): \(tail(of: logBase + ".err"))")
        }
    }

    func tail(of path: String) -> String {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        let lines = text.split(whereSeparator: \.isNewline).suffix(3)
        return lines.isEmpty ? "(no output)" : lines.joined(separator: " | ")
    }

    /// `key=value` pairs from a child's standard output (several per line allowed).
    func keyValues(in path: String) -> [String: Double] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        var values: [String: Double] = [:]
        for word in text.split(whereSeparator: { $0 == " " || $0.isNewline }) {
            let parts = word.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        return values
    }

    // MARK: segmented

    /// - Parameter roundTrip: Whether the clients reach nginx through the latency relay
    ///   (`segmented-rtt`) instead of directly.
    func runSegmented(roundTrip: Bool) throws -> ScenarioResult {
        let name: ScenarioName = roundTrip ? .segmentedRoundTrip : .segmented
        let cap = settings.mode.segmented.capBytesPerSecond
        let counts = roundTrip ? settings.mode.segmentedRoundTrip.connections : settings.mode.segmented.connections
        // Its own nginx: `limit_rate` on /limited/, and sendfile_max_chunk 256k so a request's head start
        // is one 256 KiB chunk (nginx sends a chunk, then waits chunk / rate; with the default 2 MiB chunk
        // every request, including each stolen range, starts with a 2 MiB burst above the cap).
        let limited = try NginxServer(
            configuration: NginxConfiguration(
                documentRoot: cacheDirectory, limitRate: cap, extraServerDirectives: "        sendfile_max_chunk 256k;"),
            executable: nginxExecutable)
        defer { limited.stop() }
        let relay =
            try roundTrip
            ? LatencyRelay(
                target: limited.httpPort, oneWayMilliseconds: settings.mode.segmentedRoundTrip.oneWayMilliseconds,
                logPath: logDirectory + "/latency-relay.log") : nil
        defer { relay?.stop() }
        var rows: [Row] = []
        var plans: [(client: Client, connections: Int)] = []
        for connections in counts {
            for client in clients where [.downloadkit, .aria2c, .axel].contains(client.kind) {
                plans.append((client, connections))
                var row = Row(
                    label: "\(client.kind.rawValue) ×\(connections)", client: client.kind,
                    bytes: settings.mode.segmentedBytes(connections: connections))
                row.connections = connections
                row.idealBytesPerSecond = Double(cap * connections)
                rows.append(row)
            }
        }
        rows = alternate(name, rows: rows) { index, run in
            let (client, connections) = plans[index]
            let bytes = settings.mode.segmentedBytes(connections: connections)
            let path = "/limited/" + BenchRunner.fileName(bytes: bytes)
            let url = relay.map { "http://127.0.0.1:\($0.port)\(path)" } ?? limited.httpURL(path)
            let destination = downloadDirectory + "/\(name.rawValue)-\(client.kind.rawValue).bin"
            let invocation = try client.segmentedInvocation(url: url, destination: destination, connections: connections)
            let cleanup = [destination] + invocation.leftovers
            for file in cleanup { unlink(file) }
            defer {
                for file in cleanup { unlink(file) }
                syncFileSystem()
            }
            // nginx's one worker blocks the other connections while it reads an evicted page from disk;
            // this VM hands cold page cache back to the host between runs (see warmPageCache).
            try warmPageCache(path: cacheDirectory + "/" + BenchRunner.fileName(bytes: bytes))
            // Every client starts from the same memory state, whatever the run before it freed.
            try warmExecutable(invocation.executable)  // before the settle: see BenchRunner's file runs
            try settlePageCache(directory: downloadDirectory, bytes: bytes)
            let logBase = logDirectory + "/\(name.rawValue)-\(client.kind.rawValue)-\(connections)-\(run)"
            let before = try limited.accessLog().count
            let measurement = try measure(
                invocation.executable, invocation.arguments, stdoutPath: logBase + ".out", stderrPath: logBase + ".err")
            try requireSuccess(measurement, logBase: logBase)
            let entries = try logEntries(after: before, atLeastBytes: bytes, origin: limited)
            let sent = bodyBytes(entries)
            guard sent >= bytes else { throw BenchError("nginx sent \(sent) of \(bytes) body bytes") }
            if let problem = spotCheck(path: destination, bytes: bytes, seed: BenchRunner.seed) {
                throw BenchError("downloaded file: \(problem)")
            }
            let connectionsUsed = Set(entries.map(\.connection)).count
            return Sample(
                measurement,
                metrics: [
                    "sentBytes": Double(sent), "requests": Double(entries.count),
                    "tcpConnections": Double(connectionsUsed),
                ])
        }
        return ScenarioResult(
            name: name, summary: name.summary, bytes: settings.mode.segmentedBytes(connections: counts.max() ?? 1),
            rows: rows)
    }

    // MARK: small-files

    /// `<cache>/small-<count>/f-NNNN.bin`, each 64 KiB of the pattern with seed `BenchRunner.seed + index`.
    static func smallFileDirectory(cache: String, count: Int) -> String { cache + "/small-\(count)" }
    static let smallFileBytes: Int64 = 64 << 10
    static func smallFileName(_ index: Int) -> String { String(format: "f-%04d.bin", index) }

    /// Where the small-files scenario's runs download (under the download directory), and the prefix of an
    /// earlier bench's runs moved aside; ``BenchRunner/removeSmallFileRuns()`` deletes both at the end.
    static let smallFileRunsName = "small-files"
    static let staleSmallFileRunsPrefix = smallFileRunsName + "-stale-"

    func runSmallFiles() throws -> ScenarioResult {
        let count = settings.mode.smallFileCount
        let urls = (0..<count).map { nginx.httpURL("/small-\(count)/" + Self.smallFileName($0)) }
        let listPath = downloadDirectory + "/small-files.list"
        try (urls.joined(separator: "\n") + "\n").write(toFile: listPath, atomically: true, encoding: .utf8)
        // curl: a config file naming every output (curl --parallel needs output names for each URL).
        let total = Int64(count) * Self.smallFileBytes
        var rows: [Row] = []
        var plan: [Client] = []
        for client in clients where client.kind != .axel {
            plan.append(client)
            var row = Row(label: client.kind == .wget ? "wget (sequential)" : client.kind.rawValue, client: client.kind, bytes: total)
            row.files = count
            rows.append(row)
        }
        // Each run downloads into a directory of its own and nothing is deleted before the bench ends
        // (``BenchRunner/removeSmallFileRuns()``): on a no-journal ext4 the kernel skips each inode freed in
        // the last minute (six while its inode-table block is dirty) when it allocates one, reading that
        // inode's table block for each, so deleting thousands of files before a client creates 1,000 made
        // every run pay for the churn — clients and runs alike, more run after run (docs/BENCHMARKS.md,
        // "Small files"). A previous bench's runs in this output directory are moved aside, not deleted.
        let runsDirectory = downloadDirectory + "/" + Self.smallFileRunsName
        let sourceDirectory = Self.smallFileDirectory(cache: cacheDirectory, count: count)
        if FileManager.default.fileExists(atPath: runsDirectory) {
            try FileManager.default.moveItem(
                atPath: runsDirectory,
                toPath: downloadDirectory + "/" + Self.staleSmallFileRunsPrefix + "\(Int(Date().timeIntervalSince1970))")
        }
        rows = alternate(.smallFiles, rows: rows) { index, run in
            let client = plan[index]
            let directory = runsDirectory + "/\(client.kind.rawValue)-\(run)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { syncFileSystem() }
            // The origin's files are read into the page cache before every run, as the large files are
            // (warmPageCache): this VM evicted about 1 % of them within 3 s of a read, and a run that found
            // them as earlier runs left them sent some 700 of nginx's reads to the disk (docs/BENCHMARKS.md,
            // "Small files: the directory inside fdatasync").
            try warmPageCache(paths: (0..<count).map { sourceDirectory + "/" + Self.smallFileName($0) })
            let invocation = try client.manyInvocation(
                urls: urls, listPath: listPath, directory: directory, configDirectory: downloadDirectory)
            let logBase = logDirectory + "/small-files-\(client.kind.rawValue)-\(run)"
            let before = try nginx.accessLog().count
            let measurement = try measure(
                invocation.executable, invocation.arguments, stdoutPath: logBase + ".out", stderrPath: logBase + ".err")
            try requireSuccess(measurement, logBase: logBase)
            let entries = try logEntries(after: before, atLeastBytes: total)
            let sent = bodyBytes(entries)
            guard sent >= total else { throw BenchError("nginx sent \(sent) of \(total) body bytes") }
            try verifyDownloads(
                in: directory,
                files: (0..<count).map { (Self.smallFileName($0), Self.smallFileBytes, BenchRunner.seed &+ UInt64($0)) })
            return Sample(
                measurement,
                metrics: ["tcpConnections": Double(Set(entries.map(\.connection)).count)])
        }
        return ScenarioResult(name: .smallFiles, summary: ScenarioName.smallFiles.summary, bytes: total, rows: rows)
    }

    // MARK: resume

    func runResume() throws -> ScenarioResult {
        let bytes = settings.mode.resumeBytes
        let url = nginx.httpURL("/" + BenchRunner.fileName(bytes: bytes))
        var rows: [Row] = []
        var plan: [Client] = []
        for client in clients where client.kind != .axel {
            plan.append(client)
            rows.append(
                Row(
                    label: client.kind == .downloadkit ? "downloadkit get" : client.kind.rawValue, client: client.kind,
                    bytes: bytes, variant: client.kind == .downloadkit ? "get" : nil))
            if client.kind == .downloadkit {
                // Segmented too: the progress journal makes a kill cost only what was in flight.
                plan.append(client)
                rows.append(
                    Row(
                        label: "downloadkit get --connections 4", client: client.kind, bytes: bytes, connections: 4,
                        variant: "get"))
            }
        }
        if !FileManager.default.isExecutableFile(atPath: cli), let index = rows.firstIndex(where: { $0.client == .downloadkit }) {
            rows[index].failure = "\(cli) is missing: swift build -c release --product downloadkit"
        }
        rows = alternate(.resume, rows: rows) { index, run in
            let client = plan[index]
            let connections = rows[index].connections ?? 1
            let destination = downloadDirectory + "/resume-\(client.kind.rawValue)-\(connections).bin"
            let invocation = try client.resumeInvocation(url: url, destination: destination, cli: cli, connections: connections)
            let cleanup = [destination] + invocation.leftovers
            for file in cleanup { unlink(file) }
            defer {
                for file in cleanup { unlink(file) }
                syncFileSystem()
            }
            let partial = client.kind == .downloadkit ? destination + ".dkpart" : destination
            let logBase = logDirectory + "/resume-\(client.kind.rawValue)-\(connections)-\(run)"

            // First run: SIGKILL once the partial file holds half the bytes.
            let before = try nginx.accessLog().count
            var logOffset = Int(fileSize(nginx.prefix + "/logs/access.log"))
            var sentSoFar: Int64 = 0
            let first = try measureKilling(
                invocation.executable, invocation.arguments, stdoutPath: logBase + "-1.out",
                stderrPath: logBase + "-1.err", timeout: 120
            ) {
                // A segmented partial is sparse (its length says nothing): count what nginx has sent in
                // completed range requests instead.
                if connections > 1 {
                    sentSoFar += (try? nginx.newAccessLogEntries(after: &logOffset)).map(bodyBytes) ?? 0
                    return sentSoFar >= bytes / 2
                }
                return fileSize(partial) >= bytes / 2
            }
            guard first.signal == SIGKILL else {
                throw BenchError("the first run ended before it was killed (exit status \(first.exitStatus))")
            }
            // What the killed run had written: the sparse partial's length means nothing with segments,
            // so "fetched twice" below compares bytes sent by nginx instead.
            let atKill = connections > 1 ? 0 : fileSize(partial)
            // The killed request is logged when nginx notices the closed connection.
            var firstEntries = try nginx.accessLog(waitingFor: before + 1, timeout: 5).dropFirst(before)
            if connections > 1 {
                // Each killed connection's request is logged when nginx notices it closed.
                usleep(500_000)
                firstEntries = try nginx.accessLog().dropFirst(before)
            }
            let firstSent = bodyBytes(Array(firstEntries))

            // Second run to completion, measured (with exact RSS).
            let middle = try nginx.accessLog().count
            let second = try measure(
                invocation.executable, invocation.arguments, stdoutPath: logBase + "-2.out",
                stderrPath: logBase + "-2.err")
            try requireSuccess(second, logBase: logBase + "-2")
            let entries = try logEntries(after: middle, atLeastBytes: connections > 1 ? bytes - firstSent : bytes - atKill)
            let secondSent = bodyBytes(entries)
            if let problem = spotCheck(path: destination, bytes: bytes, seed: BenchRunner.seed) {
                throw BenchError("downloaded file: \(problem)")
            }
            return Sample(
                wallSeconds: first.wallSeconds + second.wallSeconds,
                userSeconds: first.userSeconds + second.userSeconds,
                systemSeconds: first.systemSeconds + second.systemSeconds, maxRSSKiB: second.maxRSSKiB,
                rssIsExact: second.rssIsExact,
                metrics: [
                    "bytesAtKill": Double(atKill), "firstRunSentBytes": Double(firstSent),
                    "secondRunBytes": Double(secondSent), "fetchedTwice": Double(connections > 1 ? firstSent + secondSent - bytes : secondSent - (bytes - atKill)),
                    "firstRunSeconds": first.wallSeconds, "secondRunSeconds": second.wallSeconds,
                    "secondRunRequests": Double(entries.count),
                ])
        }
        return ScenarioResult(name: .resume, summary: ScenarioName.resume.summary, bytes: bytes, rows: rows)
    }

    // MARK: queue

    func runQueue() throws -> ScenarioResult {
        guard let engine = clients.first(where: { $0.kind == .downloadkit }) else {
            throw BenchError("DownloadKit client missing")
        }
        let count = settings.mode.queueTaskCount
        let row = Row(label: "DownloadManager, \(count) tasks", client: .downloadkit, bytes: 0)
        let rows = alternate(.queue, rows: [row]) { _, run in
            let state = downloadDirectory + "/queue-state"
            try? FileManager.default.removeItem(atPath: state)
            defer { try? FileManager.default.removeItem(atPath: state) }
            let logBase = logDirectory + "/queue-\(run)"
            let measurement = try measure(
                engine.executable,
                ["fetch", "--mode", "queue", "--count", String(count), "--dir", state, nginx.httpURL("/queue")],
                stdoutPath: logBase + ".out", stderrPath: logBase + ".err")
            try requireSuccess(measurement, logBase: logBase)
            let values = keyValues(in: logBase + ".out")
            guard values["restored"] == Double(count), let enqueue = values["enqueue_ms"],
                let restore = values["restore_ms"]
            else { throw BenchError("unexpected output: \(tail(of: logBase + ".out"))") }
            return Sample(
                measurement,
                metrics: [
                    "enqueueMs": enqueue, "restoreMs": restore, "openEmptyMs": values["open_ms"] ?? 0,
                    "closeMs": values["close_ms"] ?? 0,
                ])
        }
        return ScenarioResult(name: .queue, summary: ScenarioName.queue.summary, bytes: 0, rows: rows)
    }

    // MARK: allocations

    /// The 64 MiB file the body-loop measurement fetches.
    static let allocationBodyBytes: Int64 = 64 << 20

    func runAllocations() throws -> ScenarioResult {
        guard let engine = clients.first(where: { $0.kind == .downloadkit }) else {
            throw BenchError("DownloadKit client missing")
        }
        var row = Row(label: "downloadkit", client: .downloadkit, bytes: Self.allocationBodyBytes)
        let library: String
        do {
            library = try buildMallocCounter()
        } catch {
            row.failure = "\(error)"
            log("allocations: \(error)")
            return ScenarioResult(name: .allocations, summary: ScenarioName.allocations.summary, bytes: 0, rows: [row])
        }
        let url = nginx.httpURL("/" + BenchRunner.fileName(bytes: Self.allocationBodyBytes))
        let rows = alternate(.allocations, rows: [row]) { _, run in
            let logBase = logDirectory + "/allocations-\(run)"
            let measurement = try measure(
                engine.executable, ["fetch", "--mode", "allocs", url], stdoutPath: logBase + ".out",
                stderrPath: logBase + ".err", environment: ["LD_PRELOAD": library])
            try requireSuccess(measurement, logBase: logBase)
            let values = keyValues(in: logBase + ".out")
            guard values["bytes"] == Double(Self.allocationBodyBytes), values["body_loop_mallocs_per_mib"] != nil else {
                throw BenchError("unexpected output: \(tail(of: logBase + ".out"))")
            }
            var metrics: [String: Double] = [:]
            for key in [
                "parser_head_mallocs", "parser_body_mallocs_per_mib", "exchange_mallocs", "body_loop_mallocs",
                "body_loop_mib", "body_loop_mallocs_per_mib",
            ] {
                metrics[key] = values[key]
            }
            return Sample(
                measurement,
                metrics: metrics)
        }
        return ScenarioResult(
            name: .allocations, summary: ScenarioName.allocations.summary, bytes: Self.allocationBodyBytes, rows: rows)
    }

    /// Compiles Benchmarks/malloc-counter/malloc-counter.c (found next to this source file) into
    /// `<output>/malloc-counter/libdkbench-malloc.so` with the system C compiler.
    private func buildMallocCounter() throws -> String {
        let source =
            ((#filePath as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
            + "/malloc-counter/malloc-counter.c"
        guard FileManager.default.fileExists(atPath: source) else {
            throw BenchError("\(source) not found (the allocations scenario runs from a source checkout)")
        }
        guard let compiler = ProcessRunner.findExecutable("cc") ?? ProcessRunner.findExecutable("clang") else {
            throw BenchError("no C compiler (cc or clang) to build the malloc counter")
        }
        let directory = settings.output + "/malloc-counter"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let library = directory + "/libdkbench-malloc.so"
        let measurement = try measure(
            compiler, ["-O2", "-shared", "-fPIC", "-o", library, source], stdoutPath: directory + "/cc.out",
            stderrPath: directory + "/cc.err")
        guard measurement.succeeded else {
            throw BenchError("building the malloc counter failed: \(tail(of: directory + "/cc.err"))")
        }
        return library
    }
}

/// The size of a file, 0 if it does not exist.
func fileSize(_ path: String) -> Int64 {
    var status = stat()
    return stat(path, &status) == 0 ? Int64(status.st_size) : 0
}

extension Client {
    /// `segmented`: one file over `connections` connections.
    func segmentedInvocation(url: String, destination: String, connections: Int) throws -> Invocation {
        let directory = (destination as NSString).deletingLastPathComponent
        let name = (destination as NSString).lastPathComponent
        switch kind {
        case .aria2c:
            return Invocation(
                executable: executable,
                arguments: [
                    "-q", "-x\(connections)", "-s\(connections)", "-k1M", "--allow-overwrite=true",
                    "--file-allocation=none", "--auto-file-renaming=false", "-d", directory, "-o", name, url,
                ],
                leftovers: [destination + ".aria2"])
        case .axel:
            return Invocation(
                executable: executable, arguments: ["-q", "-n", String(connections), "-o", destination, url],
                leftovers: [destination + ".st"])
        case .downloadkit:
            return Invocation(
                executable: executable,
                arguments: ["fetch", "--mode", "file", "--connections", String(connections), url, destination],
                leftovers: [destination + ".dkpart", destination + ".dkresume"])
        case .curl, .wget:
            throw BenchError("\(kind.rawValue) opens one connection per file: not part of the segmented scenario")
        }
    }

    /// `small-files`: every URL into `directory`, 16 at a time where the client can.
    func manyInvocation(urls: [String], listPath: String, directory: String, configDirectory: String) throws
        -> Invocation
    {
        switch kind {
        case .downloadkit:
            return Invocation(
                executable: executable,
                arguments: ["fetch", "--mode", "many", "--list", listPath, "--dir", directory, "--concurrency", "16"])
        case .aria2c:
            return Invocation(
                executable: executable,
                arguments: [
                    "-q", "-j16", "--allow-overwrite=true", "--auto-file-renaming=false", "-i", listPath, "-d", directory,
                ])
        case .curl:
            let config = configDirectory + "/small-files.curlrc"
            var text = ""
            for url in urls {
                let name = url.split(separator: "/").last.map(String.init) ?? ""
                text += "url = \"\(url)\"\noutput = \"\(directory)/\(name)\"\n"
            }
            try text.write(toFile: config, atomically: true, encoding: .utf8)
            return Invocation(
                executable: executable, arguments: ["-s", "-f", "--parallel", "--parallel-max", "16", "-K", config])
        case .wget:
            return Invocation(executable: executable, arguments: ["-q", "-i", listPath, "-P", directory])
        case .axel:
            throw BenchError("axel takes one URL per file: not part of the small-files scenario")
        }
    }

    /// `downloadkit get URL -o DESTINATION` (resume; https-file's CLI row with the test CA).
    func getInvocation(cli: String, url: String, destination: String, caFile: String? = nil, connections: Int = 1)
        -> Invocation
    {
        var arguments = ["get", url, "-o", destination, "--progress", "none", "--connections", "\(connections)"]
        if let caFile, url.hasPrefix("https:") { arguments += ["--cacert", caFile] }
        return Invocation(
            executable: cli, arguments: arguments,
            leftovers: [destination + ".dkpart", destination + ".dkresume", destination + ".dkjournal"])
    }

    /// `resume`: the same command for the killed first run and the completing second run.
    func resumeInvocation(url: String, destination: String, cli: String, connections: Int = 1) throws -> Invocation {
        let directory = (destination as NSString).deletingLastPathComponent
        let name = (destination as NSString).lastPathComponent
        switch kind {
        case .downloadkit:
            return getInvocation(cli: cli, url: url, destination: destination, connections: connections)
        case .curl:
            return Invocation(executable: executable, arguments: ["-s", "-f", "-C", "-", "-o", destination, url])
        case .wget:
            return Invocation(executable: executable, arguments: ["-q", "-c", "-O", destination, url])
        case .aria2c:
            return Invocation(
                executable: executable,
                arguments: [
                    "-q", "-c", "-x1", "-s1", "--file-allocation=none", "--auto-file-renaming=false", "-d", directory,
                    "-o", name, url,
                ],
                leftovers: [destination + ".aria2"])
        case .axel:
            throw BenchError("axel keeps its own state file (.st); not part of the resume scenario")
        }
    }
}
