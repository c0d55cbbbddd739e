import BenchSupport
import Foundation
import Glibc
import TestOrigin

/// Errors that stop the whole benchmark (a failed run only marks its row).
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Sets up the origin and files, runs every scenario with the clients alternating, and collects results.
struct BenchRunner {
    /// The TestPattern seed of every generated file.
    static let seed: UInt64 = 0x0D0B_E7C4_2026

    let settings: BenchSettings
    private var cacheDirectory: String { settings.output + "/cache" }
    private var downloadDirectory: String { settings.output + "/downloads" }
    private var logDirectory: String { settings.output + "/logs" }

    init(settings: BenchSettings) {
        self.settings = settings
    }

    func run() throws -> BenchResults {
        let fileManager = FileManager.default
        for directory in [settings.output, cacheDirectory, downloadDirectory, logDirectory] {
            try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        guard let nginxPath = NginxServer.locate() else {
            throw BenchError("nginx is not installed: run Scripts/install-deps.sh --bench (as root)")
        }
        let (peers, missing) = locatePeers()
        if !missing.isEmpty {
            log(
                "missing peers: \(missing.joined(separator: ", ")) — continuing without them "
                    + "(Scripts/install-deps.sh --bench installs them on Debian)")
        }
        let clients = [Client(kind: .downloadkit, executable: currentExecutablePath())] + peers

        // Files: written once into the cache, reused by later runs.
        let needsMain = settings.scenarios.contains { $0.isPlainThroughput }
        var sizes: [Int64] = needsMain ? [settings.mode.mainBytes] : []
        if settings.scenarios.contains(.rss) {
            sizes += [settings.mode.rssBytes.small, settings.mode.rssBytes.large]
        }
        if settings.scenarios.contains(.segmented) {
            sizes += settings.mode.segmented.connections.map { settings.mode.segmentedBytes(connections: $0) }
        }
        if settings.scenarios.contains(.segmentedRoundTrip) {
            sizes += settings.mode.segmentedRoundTrip.connections.map { settings.mode.segmentedBytes(connections: $0) }
        }
        if settings.scenarios.contains(.mirrors) {
            sizes += settings.mode.mirrors.sources.map { settings.mode.segmentedBytes(connections: $0) }
        }
        if settings.scenarios.contains(.resume) { sizes.append(settings.mode.resumeBytes) }
        if settings.scenarios.contains(.allocations) { sizes.append(ScenarioContext.allocationBodyBytes) }
        if settings.scenarios.contains(.concurrency) { sizes.append(ScenarioContext.concurrencyFileBytes) }
        if settings.scenarios.contains(.httpsHandshakes) {
            sizes.append(settings.mode.segmentedBytes(connections: ScenarioContext.handshakeConnections))
        }
        for size in Set(sizes).sorted() { try prepareFile(bytes: size) }
        if settings.scenarios.contains(.smallFiles) || settings.scenarios.contains(.httpsHandshakes) {
            try prepareSmallFiles(count: settings.mode.smallFileCount)
        }

        let certificates = try TestCertificates.generate(in: settings.output + "/certs")
        let site = TLSSite(
            name: "localhost", certificatePath: certificates.valid.certificatePath,
            privateKeyPath: certificates.valid.privateKeyPath)
        let nginx = try NginxServer(
            configuration: NginxConfiguration(documentRoot: cacheDirectory, tlsSites: [site]), executable: nginxPath)
        defer { nginx.stop() }
        log("nginx on 127.0.0.1:\(nginx.httpPort) (http) and :\(nginx.tlsPorts["localhost"] ?? 0) (https)")

        let machine = MachineInfo.collect(nginx: nginxPath, clients: clients, missing: missing)
        let context = ScenarioContext(
            nginx: nginx, caFile: certificates.caCertificatePath, clients: clients, settings: settings,
            nginxExecutable: nginxPath, cacheDirectory: cacheDirectory, downloadDirectory: downloadDirectory,
            logDirectory: logDirectory)
        var scenarios: [ScenarioResult] = []
        defer { removeSmallFileRuns() }
        for name in settings.scenarios {
            scenarios.append(try context.run(name))
        }
        var notes = [
            "MB/s are decimal megabytes (1 MB = 10^6 bytes) per second of wall time from spawn to exit, "
                + "process start-up included; CPU-s/GiB is the child's user + system time (wait4) per 2^30 bytes.",
            "DownloadKit's file mode is the full engine and fsyncs the file before renaming it into place; "
                + "curl, wget, aria2c and axel leave their data in the page cache.",
            "After each file run the file is deleted and the file system synced (outside the measured time).",
        ]
        if settings.scenarios.contains(where: \.isTLS), clients.contains(where: { $0.kind == .axel }) {
            notes.append(
                "axel is measured over HTTP only: its own hostname check rejects the test certificate "
                    + "(IP addresses in its SAN); --insecure would skip work the other clients do.")
        }
        if !missing.isEmpty { notes.append("Missing peers (not measured): \(missing.joined(separator: ", ")).") }
        if scenarios.flatMap(\.rows).flatMap(\.samples).contains(where: { !$0.rssIsExact }) {
            notes.append(
                "GNU time (/usr/bin/time) is missing, so peak RSS includes this bench's own address space "
                    + "(Linux carries the pre-exec high-water mark into ru_maxrss): install the `time` package.")
        } else {
            notes.append(
                "Peak RSS is the client's own ru_maxrss, measured by starting it through GNU time (a ~2 MiB "
                    + "launcher): posix_spawn from this bench would carry the bench's own pre-exec high-water mark.")
        }
        if settings.scenarios.contains(.concurrency) {
            notes.append(
                "concurrency: a 1 MiB file at 256 KiB/s takes about 3 s, so wall time (and % of N × cap) includes "
                    + "each client's start-up and, for the manager, opening its queue; `queue add` is not timed.")
        }
        if settings.runs < 3 { notes.append("Fewer than 3 runs: the medians are not meaningful (smoke run).") }
        return BenchResults(
            machine: machine, mode: settings.mode, runs: settings.runs, mainBytes: settings.mode.mainBytes,
            rssBytes: [settings.mode.rssBytes.small, settings.mode.rssBytes.large],
            segmentedCap: settings.scenarios.contains(.segmented) || settings.scenarios.contains(.segmentedRoundTrip)
                ? settings.mode.segmented.capBytesPerSecond : nil,
            missingPeers: missing,
            scenarios: scenarios,
            targets: Targets.evaluate(
                Targets.table(concurrencyLevels: settings.concurrencyLevels), scenarios: scenarios,
                missingPeers: missing),
            notes: notes,
            loadAverageAtEnd: MachineProbe.loadAverage())
    }

    /// Deletes the small-files scenario's downloads (`small-files` and earlier benches' `small-files-stale-*`)
    /// once every scenario has run: deleting thousands of inodes slows every file creation after it on this
    /// machine's file system for minutes (``ScenarioContext/runSmallFiles()``).
    private func removeSmallFileRuns() {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: downloadDirectory)) ?? []
        for name in entries
        where name == ScenarioContext.smallFileRunsName || name.hasPrefix(ScenarioContext.staleSmallFileRunsPrefix) {
            try? FileManager.default.removeItem(atPath: downloadDirectory + "/" + name)
        }
        syncFileSystem()
    }

    /// `count` files of 64 KiB in `<cache>/small-<count>/`, file i with the pattern of seed `seed + i`
    /// (so a client that mixes files up fails the check), each read once into the page cache.
    private func prepareSmallFiles(count: Int) throws {
        let directory = ScenarioContext.smallFileDirectory(cache: cacheDirectory, count: count)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var written = 0
        for index in 0..<count {
            let path = directory + "/" + ScenarioContext.smallFileName(index)
            let seed = Self.seed &+ UInt64(index)
            if spotCheck(path: path, bytes: ScenarioContext.smallFileBytes, seed: seed) != nil {
                try writePatternFile(path: path, bytes: ScenarioContext.smallFileBytes, seed: seed)
                written += 1
            }
            try warmPageCache(path: path)
        }
        if written > 0 { log("wrote \(written) small files into \(directory)") }
    }

    /// `<cache>/pattern-<bytes>.bin`, the served path.
    static func fileName(bytes: Int64) -> String { "pattern-\(bytes).bin" }

    /// Makes sure the cached file of this size exists with the pattern (written once, reused), and
    /// reads it once so nginx serves it from the page cache.
    private func prepareFile(bytes: Int64) throws {
        let path = cacheDirectory + "/" + Self.fileName(bytes: bytes)
        if spotCheck(path: path, bytes: bytes, seed: Self.seed) != nil {
            log("writing \(sizeText(bytes)) test file \(path)")
            try writePatternFile(path: path, bytes: bytes, seed: Self.seed)
        }
        try warmPageCache(path: path)
    }
}

/// Everything one scenario needs.
struct ScenarioContext {
    let nginx: NginxServer
    let caFile: String
    let clients: [Client]
    let settings: BenchSettings
    let nginxExecutable: String
    let cacheDirectory: String
    let downloadDirectory: String
    let logDirectory: String

    private struct Case {
        var client: Client
        var bytes: Int64
        /// Run through the `downloadkit get` CLI instead of the bench's own `fetch` child.
        var viaCLI = false
    }

    /// The `downloadkit` CLI, built next to this executable (bench.sh builds both).
    var cli: String { (currentExecutablePath() as NSString).deletingLastPathComponent + "/downloadkit" }

    func run(_ name: ScenarioName) throws -> ScenarioResult {
        switch name {
        case .segmented: return try runSegmented(roundTrip: false)
        case .segmentedRoundTrip: return try runSegmented(roundTrip: true)
        case .mirrors: return try runMirrors()
        case .smallFiles: return try runSmallFiles()
        case .resume: return try runResume()
        case .queue: return try runQueue()
        case .allocations: return try runAllocations()
        case .httpsHandshakes: return try runHTTPSHandshakes()
        case .concurrency: return try runConcurrency()
        case .httpDevnull, .httpsDevnull, .httpFile, .httpsFile, .rss: return try runSingleFile(name)
        }
    }

    private func runSingleFile(_ name: ScenarioName) throws -> ScenarioResult {
        var cases: [Case] = []
        var rows: [Row] = []
        if name == .rss {
            guard let engine = clients.first(where: { $0.kind == .downloadkit }) else {
                throw BenchError("DownloadKit client missing")
            }
            for (bytes, variant) in [(settings.mode.rssBytes.small, "small"), (settings.mode.rssBytes.large, "large")] {
                cases.append(Case(client: engine, bytes: bytes))
                rows.append(Row(label: "downloadkit, \(sizeText(bytes))", client: .downloadkit, bytes: bytes, variant: variant))
            }
        } else {
            for client in clients where client.supports(name.sink, tls: name.isTLS) {
                cases.append(Case(client: client, bytes: settings.mode.mainBytes))
                rows.append(Row(label: client.kind.rawValue, client: client.kind, bytes: settings.mode.mainBytes))
                // Issue #18's HTTPS → file target is the CLI's: the engine plus the command around it.
                if name == .httpsFile && client.kind == .downloadkit {
                    cases.append(Case(client: client, bytes: settings.mode.mainBytes, viaCLI: true))
                    var row = Row(label: "downloadkit get", client: .downloadkit, bytes: settings.mode.mainBytes, variant: "get")
                    if !FileManager.default.isExecutableFile(atPath: cli) {
                        row.failure = "\(cli) is missing: swift build -c release --product downloadkit"
                    }
                    rows.append(row)
                }
            }
        }
        log("\(name.rawValue): \(rows.map(\.label).joined(separator: ", ")) × \(settings.runs) runs")

        // Alternate: A B C A B C …, so drift (other load, thermal, page cache) spreads over all clients.
        for run in 1...settings.runs {
            for (index, testCase) in cases.enumerated() where rows[index].failure == nil {
                do {
                    let sample = try measureOnce(scenario: name, testCase: testCase, run: run)
                    rows[index].samples.append(sample)
                    let megabytes = Double(testCase.bytes) / 1e6 / sample.wallSeconds
                    let cpu = (sample.userSeconds + sample.systemSeconds) / (Double(testCase.bytes) / 1_073_741_824)
                    log(
                        "  \(name.rawValue) run \(run)/\(settings.runs) \(rows[index].label): "
                            + "\(format(megabytes, 0)) MB/s, \(format(cpu, 3)) CPU-s/GiB, "
                            + "\(format(Double(sample.maxRSSKiB) / 1024, 1)) MiB")
                } catch {
                    rows[index].failure = "run \(run): \(error)"
                    log("  \(name.rawValue) run \(run) \(rows[index].label) FAILED: \(error)")
                }
            }
        }
        return ScenarioResult(name: name, summary: name.summary, bytes: cases.first?.bytes ?? 0, rows: rows)
    }

    /// One measured run, verified, with its files removed afterwards.
    private func measureOnce(scenario: ScenarioName, testCase: Case, run: Int) throws -> Sample {
        let client = testCase.client
        let path = "/" + BenchRunner.fileName(bytes: testCase.bytes)
        let url: String
        if scenario.isTLS {
            guard let tls = nginx.tlsURL(site: "localhost", path: path) else { throw BenchError("no TLS site") }
            url = tls
        } else {
            url = nginx.httpURL(path)
        }
        let name = client.kind.rawValue + (testCase.viaCLI ? "-get" : "")
        let destination = downloadDirectory + "/\(scenario.rawValue)-\(name).bin"
        let invocation =
            testCase.viaCLI
            ? client.getInvocation(cli: cli, url: url, destination: destination, caFile: caFile)
            : client.invocation(
                url: url, sink: scenario.sink, destination: destination, caFile: caFile, seed: BenchRunner.seed)
        let cleanup = [destination] + invocation.leftovers
        for file in cleanup { unlink(file) }
        try warmPageCache(path: cacheDirectory + path)
        // Every client that writes a file starts from the same memory state (see settlePageCache).
        // The program is read in first, so that reading it does not take pages the settle just freed.
        try warmExecutable(invocation.executable)
        if scenario.sink == .file { try settlePageCache(directory: downloadDirectory, bytes: testCase.bytes) }

        let logBase = logDirectory + "/\(scenario.rawValue)-\(name)-\(testCase.bytes)-\(run)"
        let requestsBefore = try nginx.accessLog().count
        let originBefore = nginx.cpuSeconds()
        let measurement = try measure(
            invocation.executable, invocation.arguments, stdoutPath: logBase + ".out", stderrPath: logBase + ".err",
            environment: invocation.environment)
        let originAfter = nginx.cpuSeconds()
        defer {
            for file in cleanup { unlink(file) }
            if scenario.sink == .file { syncFileSystem() }
        }

        guard measurement.succeeded else {
            let reason = measurement.signal.map { "killed by signal \($0)" } ?? "exit status \(measurement.exitStatus)"
            throw BenchError("\(reason): \(tail(of: logBase + ".err"))")
        }
        // The origin's own count: every client must have been sent the whole body.
        let entries = try nginx.accessLog(waitingFor: requestsBefore + 1, timeout: 5).dropFirst(requestsBefore)
        let sent = entries.filter { $0.status == 200 || $0.status == 206 }.reduce(Int64(0)) { $0 + $1.bodyBytesSent }
        guard sent >= testCase.bytes else {
            throw BenchError("nginx sent \(sent) of \(testCase.bytes) body bytes")
        }
        switch scenario.sink {
        case .devnull:
            // DownloadKit prints bytes=N (after its own length and pattern spot checks), curl its
            // %{size_download}; wget has only its exit status and the access log.
            if client.kind == .downloadkit || client.kind == .curl {
                let text = (try? String(contentsOfFile: logBase + ".out", encoding: .utf8)) ?? ""
                let line = text.split(whereSeparator: \.isNewline).first { $0.hasPrefix("bytes=") || $0.first?.isNumber == true }
                let digits = line.map { $0.hasPrefix("bytes=") ? String($0.dropFirst(6)) : String($0) }
                guard digits.flatMap({ Int64($0) }) == testCase.bytes else {
                    throw BenchError("reported \(text.trimmingCharacters(in: .whitespacesAndNewlines)) bytes")
                }
            }
        case .file:
            if let problem = spotCheck(path: destination, bytes: testCase.bytes, seed: BenchRunner.seed) {
                throw BenchError("downloaded file: \(problem)")
            }
        }
        var sample = Sample(measurement)
        sample.tlsProtocol = entries.last?.tlsProtocol
        sample.tlsCipher = entries.last?.tlsCipher
        sample.originCPUSeconds = originBefore.flatMap { before in originAfter.map { $0 - before } }
        return sample
    }
}

