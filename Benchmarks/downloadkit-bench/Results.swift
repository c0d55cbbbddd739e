import BenchSupport
import DownloadKitManager
import Foundation

/// Which sizes a run uses.
enum BenchMode: String, Codable, Sendable {
    case quick, standard, full

    /// The file size of the throughput scenarios.
    var mainBytes: Int64 { self == .quick ? 64 << 20 : 1 << 30 }

    /// The `segmented` scenario: nginx's per-connection cap on `/limited/` and the connection counts.
    var segmented: (capBytesPerSecond: Int, connections: [Int]) {
        self == .quick ? (8_000_000, [1, 4, 8, 16]) : (26_000_000, [1, 4, 8, 16])
    }

    /// The file size for `connections` in `segmented`: 64 MiB per connection (4 MiB with `--quick`), so
    /// every run lasts about 2.6 s at the ideal N × 26 MB/s (0.5 s at 8 MB/s) and process start-up weighs
    /// the same (~3 %) at every N, while one connection's run stays short.
    func segmentedBytes(connections: Int) -> Int64 { Int64(connections) * (self == .quick ? 4 << 20 : 64 << 20) }

    /// The `segmented-rtt` scenario: the delay the relay adds each way (a 50 ms round trip) and the
    /// connection counts (nginx's cap as in `segmented`).
    var segmentedRoundTrip: (oneWayMilliseconds: Int, connections: [Int]) { (25, [8]) }

    /// The `mirrors` scenario: nginx's cap on each connection (as `segmented`) and the numbers of sources, one
    /// connection to each; the file is `segmentedBytes(connections: sources)`.
    var mirrors: (capBytesPerSecond: Int, sources: [Int]) { (segmented.capBytesPerSecond, [1, 2, 4]) }

    /// How many 64 KiB files the `small-files` scenario fetches.
    var smallFileCount: Int { self == .quick ? 100 : 1000 }

    /// The file each client downloads, is killed half-way through, and resumes in `resume`.
    var resumeBytes: Int64 { self == .quick ? 128 << 20 : 1 << 30 }

    /// Tasks enqueued in one batch (and restored) in `queue`.
    var queueTaskCount: Int { 10_000 }

    /// The two sizes whose peak RSS the `rss` scenario compares.
    var rssBytes: (small: Int64, large: Int64) {
        switch self {
        case .quick: return (16 << 20, 64 << 20)
        case .standard: return (64 << 20, 1 << 30)
        case .full: return (1 << 30, 8 << 30)
        }
    }
}

struct BenchSettings: Sendable {
    var mode: BenchMode
    var runs: Int
    var output: String
    var scenarios: [ScenarioName]
    /// Simultaneous transfers of the `concurrency` scenario, one level after the other.
    var concurrencyLevels: [Int] = ScenarioContext.defaultConcurrencyLevels
}

enum ScenarioName: String, CaseIterable, Codable, Sendable {
    case httpDevnull = "http-devnull"
    case httpsDevnull = "https-devnull"
    case httpFile = "http-file"
    case httpsFile = "https-file"
    case rss
    case segmented
    case segmentedRoundTrip = "segmented-rtt"
    case mirrors
    case smallFiles = "small-files"
    case resume
    case queue
    case allocations
    case concurrency
    case httpsHandshakes = "https-handshakes"

    /// Whether a run without --scenarios includes it: all of them, so that one default run judges every
    /// target of issue #18 (`concurrency` adds about 2.5 minutes; leave it out with --scenarios).
    var isDefault: Bool { true }

    /// Scenarios whose rows are single-file downloads measured as MB/s (one shared chart scale).
    var isPlainThroughput: Bool { [.httpDevnull, .httpsDevnull, .httpFile, .httpsFile].contains(self) }

    var isTLS: Bool { self == .httpsDevnull || self == .httpsFile }

    var sink: Sink {
        switch self {
        case .httpDevnull, .httpsDevnull: return .devnull
        case .httpFile, .httpsFile, .rss, .segmented, .segmentedRoundTrip, .mirrors, .smallFiles, .resume, .queue, .allocations,
            .concurrency, .httpsHandshakes:
            return .file
        }
    }

    var summary: String {
        switch self {
        case .httpDevnull:
            return "HTTP, one connection, body discarded: DownloadKit is DKHTTPClient.execute with a reused 1 MiB "
                + "ReceiveBuffer writing each slice to /dev/null; curl and wget write to /dev/null."
        case .httpsDevnull:
            return "As http-devnull over TLS (nginx: TLS 1.2/1.3, OpenSSL's default suite, P-256 certificate)."
        case .httpFile:
            return "HTTP, one connection, to a file on the output directory's file system. DownloadKit runs the "
                + "full Download engine (temp file, checkpoints with fdatasync, final fsync and rename); "
                + "the peers do not fsync."
        case .httpsFile:
            return "As http-file over TLS. The `downloadkit get` row is the CLI (`get URL -o FILE --cacert CA`), "
                + "the same engine plus the command's start-up."
        case .rss:
            return "Peak RSS of the DownloadKit engine (file mode, HTTP) at a small and a large size: it must not "
                + "grow with the file."
        case .segmented:
            return "One file over N connections from a second nginx's /limited/ location (limit_rate per connection, "
                + "sendfile_max_chunk 256k): "
                + "DownloadKit's segmented engine (DownloadConfiguration.connections = N) against aria2c "
                + "-x N -s N -k 1M and axel -n N. The ideal is N × the cap."
        case .segmentedRoundTrip:
            return "As segmented, through Scripts/latency-relay.py in front of the capped nginx: it delays each "
                + "direction by 25 ms, a 50 ms round trip as on a real path (loopback has none). Every range "
                + "request a client waits for costs a round trip."
        case .mirrors:
            return "One file from 1, 2 and 4 sources: the same nginx on 127.0.1.1–127.0.1.4, each address "
                + "its own host to the clients, limit_rate per connection as in segmented, one connection to each "
                + "source. DownloadKit: `DownloadRequest.mirrors` (connections = sources, connectionsPerSource 1); "
                + "aria2c: every URL on its command line, -x1 -s N -k1M. The ideal is N × the cap; nginx's log "
                + "gives the bytes each source sent."
        case .smallFiles:
            return "Many 64 KiB files, 16 at a time over reused connections. DownloadKit runs one Download per "
                + "file sharing one DKHTTPClient (16 connections); every completed file is fsynced and renamed "
                + "into place with its directory fsynced. The peers do not fsync."
        case .resume:
            return "Each client is killed with SIGKILL when the partial file reaches half the size, then rerun "
                + "to completion. Wall time is both runs together; nginx's access log gives the bytes the "
                + "second run fetched, and bytes fetched twice = second run − (size − bytes on disk at the kill). "
                + "The `--connections 4` row is killed when nginx has sent half the size in completed range requests "
                + "(its partial file is sparse, so its length says nothing and shows as 0); its bytes fetched twice "
                + "= everything nginx sent over both runs − the size: what was in flight per connection at the kill."
        case .queue:
            return "DownloadManager: enqueue 10,000 tasks in one batch call (one transaction), close, and restore "
                + "them by opening a new manager on the same state directory. Timed inside the fetch child; "
                + "the network is reported unreachable so no task starts."
        case .allocations:
            return "mallocs counted by an LD_PRELOAD interposer (built from Benchmarks/malloc-counter/malloc-counter.c at "
                + "run time): the response parser over a head + 1 MiB body in 64 KiB pieces, and the "
                + "HTTPClient.execute body loop of a 64 MiB body into a reused ReceiveBuffer."
        case .httpsHandshakes:
            return "Where TLS handshakes count: the small-files list over HTTPS (16 at a time; DownloadKit "
                + "`fetch --mode many`, curl `--parallel --parallel-max 16`) and one file over 8 HTTPS connections "
                + "(DownloadKit `fetch --mode file --connections 8`, aria2c `-x8 -s8 -k1M`, curl over one). Every "
                + "client trusts only the test CA. DownloadKit also runs with session resumption off "
                + "(`DKTLSConfiguration.resumesSessions = false`), curl with `--no-sessionid`. nginx's log gives the "
                + "TCP connections and how many of their handshakes resumed a session (`$ssl_session_reused`)."
        case .concurrency:
            return "N simultaneous transfers of 1 MiB files from an nginx at `limit_rate 256k` per connection "
                + "(one file alone takes about 3 s, not 4: nginx's limit is rate × (whole seconds elapsed + 1), so "
                + "the first 256 KiB leave at once and % of N × cap can exceed 100), the URLs spread over 127.0.1.1–127.0.1.128 so each host is its "
                + "own origin. DownloadKit's manager is `downloadkit queue run --max-concurrent N` (the tasks "
                + "added with `queue add` beforehand, not timed; the queue in a scratch state directory), beside "
                + "`downloadkit get -i LIST --max-concurrent N` and `aria2c -j N`. Wall time is spawn to exit, "
                + "start-up included; throughput is bytes / wall / (N × 256 KiB/s); peak RSS is the CLI's own "
                + "(GNU time). Every file is checked against the pattern; downloads go to tmpfs when there is one."
        }
    }
}

/// One measured run.
struct Sample: Codable, Sendable {
    var wallSeconds: Double
    var userSeconds: Double
    var systemSeconds: Double
    var maxRSSKiB: Int
    var rssIsExact: Bool
    /// Scenario-specific figures (resume: `secondRunBytes`, `bytesAtKill`; queue: `enqueueMs`,
    /// `restoreMs`; allocations: `parserMallocsPerMiB`, …), nil for plain downloads.
    var metrics: [String: Double]? = nil
    /// The TLS version nginx logged for the request (`$ssl_protocol`), nil over plain HTTP.
    var tlsProtocol: String?
    /// The TLS suite nginx logged for it (`$ssl_cipher`), nil over plain HTTP.
    var tlsCipher: String? = nil
    /// nginx's CPU seconds (user + system of its one process) during this run, nil where not read. Over
    /// the run's wall time it says how busy the origin was: a single connection cannot be served faster
    /// than its one worker sends.
    var originCPUSeconds: Double? = nil
}

extension Sample {
    /// The sample of one measured run: its wall, CPU and peak RSS figures, and the scenario's own `metrics`.
    init(_ measurement: Measurement, metrics: [String: Double]? = nil) {
        self.init(
            wallSeconds: measurement.wallSeconds, userSeconds: measurement.userSeconds,
            systemSeconds: measurement.systemSeconds, maxRSSKiB: measurement.maxRSSKiB,
            rssIsExact: measurement.rssIsExact, metrics: metrics)
    }
}

/// One client in one scenario: its samples and their statistics.
struct Row: Codable, Sendable {
    /// What the table shows (the client, plus the size in the rss scenario).
    var label: String
    var client: ClientKind
    var bytes: Int64
    /// Connections per file (segmented).
    var connections: Int? = nil
    /// Files per run (small-files, concurrency); `bytes` is then their total.
    var files: Int? = nil
    /// Which of a client's rows this is where it has several ("get": the CLI; "queue": the manager;
    /// rss: "small", "large"), nil for the client's plain row.
    var variant: String? = nil
    /// Simultaneous transfers (concurrency).
    var transfers: Int? = nil
    /// The ideal rate, bytes per second (segmented, concurrency: N × nginx's cap).
    var idealBytesPerSecond: Double? = nil
    var samples: [Sample] = []
    /// Why the row has no result: the first failed run's reason. A failed row is never ranked.
    var failure: String?

    /// Decimal megabytes (1e6 bytes) per second of wall time, spawn to exit.
    var megabytesPerSecond: Spread? { Spread(samples.map { Double(bytes) / 1e6 / $0.wallSeconds }) }
    /// nginx's CPU time over each run's wall time, for the runs where it was read.
    var originBusyShare: Spread? {
        Spread(samples.compactMap { sample in sample.originCPUSeconds.map { $0 / sample.wallSeconds } })
    }
    /// User + system CPU seconds per GiB (2^30 bytes).
    var cpuSecondsPerGiB: Spread? {
        Spread(samples.map { ($0.userSeconds + $0.systemSeconds) / (Double(bytes) / 1_073_741_824) })
    }
    /// Peak resident set size, MiB.
    var peakRSSMiB: Spread? { Spread(samples.map { Double($0.maxRSSKiB) / 1024 }) }

    /// Files per second of wall time (small-files).
    var filesPerSecond: Spread? {
        guard let files else { return nil }
        return Spread(samples.map { Double(files) / $0.wallSeconds })
    }
    /// User + system CPU milliseconds per file (small-files, concurrency).
    var cpuMillisecondsPerFile: Spread? {
        guard let files else { return nil }
        return Spread(samples.map { ($0.userSeconds + $0.systemSeconds) * 1000 / Double(files) })
    }
    /// Throughput as a percentage of `idealBytesPerSecond`.
    var percentOfIdeal: Spread? {
        guard let idealBytesPerSecond, idealBytesPerSecond > 0 else { return nil }
        return Spread(samples.map { 100 * Double(bytes) / $0.wallSeconds / idealBytesPerSecond })
    }
    /// The spread of one named metric over the samples that carry it.
    func metric(_ name: String) -> Spread? { Spread(samples.compactMap { $0.metrics?[name] }) }

    var isUsable: Bool { failure == nil && !samples.isEmpty }
}

struct ScenarioResult: Codable, Sendable {
    var name: ScenarioName
    var summary: String
    var bytes: Int64
    var rows: [Row]

    /// The peer with the highest median throughput, if any peer succeeded.
    var bestPeer: Row? {
        rows.filter { $0.client.isPeer && $0.isUsable }
            .max { ($0.megabytesPerSecond?.median ?? 0) < ($1.megabytesPerSecond?.median ?? 0) }
    }

    func row(_ kind: ClientKind) -> Row? { rows.first { $0.client == kind && $0.isUsable } }
}

/// One target of ``Targets/table(concurrencyLevels:)`` judged on this run.
struct TargetCheck: Codable, Sendable {
    enum Verdict: String, Codable, Sendable {
        case met
        case notMet = "not met"
        case withinNoise = "within noise"
        case notMeasured = "not measured"
    }

    var scenario: String
    var metric: String
    /// DownloadKit's median, with its unit.
    var downloadkit: String
    /// The baseline row and its median ("—" for an absolute threshold).
    var peer: String
    /// DownloadKit ÷ baseline ("—" for an absolute threshold).
    var ratio: String
    var target: String
    /// Each median's half min–max range relative to it, and the runs behind it.
    var noise: String
    var verdict: Verdict
    /// Where the target comes from (the issue that set it, or DESIGN.md).
    var source: String
    /// Why it is not measured.
    var reason: String? = nil
    /// The compared value (the ratio, or the figure itself) and its threshold.
    var value: Double? = nil
    var threshold: Double? = nil
    /// The compared value's relative noise (the sum of both medians' for a ratio).
    var relativeNoise: Double? = nil

    var verdictText: String { reason.map { "not measured: \($0)" } ?? verdict.rawValue }
}

struct BenchResults: Codable, Sendable {
    var machine: MachineInfo
    var mode: BenchMode
    var runs: Int
    var mainBytes: Int64
    var rssBytes: [Int64]
    /// The segmented scenario's per-connection cap (bytes per second), when it ran.
    var segmentedCap: Int? = nil
    var missingPeers: [String]
    var scenarios: [ScenarioResult]
    var targets: [TargetCheck]
    var notes: [String]
    /// `/proc/loadavg` (1, 5, 15 min) when the last run ended.
    var loadAverageAtEnd: String
}

/// "64 MiB", "1 GiB", "8 GiB".
func sizeText(_ bytes: Int64) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 { return "\(bytes >> 30) GiB" }
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 { return "\(bytes >> 20) MiB" }
    return "\(bytes) B"
}
