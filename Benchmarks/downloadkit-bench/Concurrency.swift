import Foundation
import Glibc
import TestOrigin

/// The `concurrency` scenario: N simultaneous transfers of rate-limited 1 MiB files, as
/// Scripts/scale-cli.sh measures them, with DownloadKit's manager (`downloadkit queue run`), its
/// `get -i` and aria2c -j N at each level.
extension ScenarioContext {
    /// The levels issue #18 asks for (`--concurrency-levels` overrides them).
    static let defaultConcurrencyLevels = [1, 16, 128, 1024]
    /// The file every transfer fetches (under a different name each).
    static let concurrencyFileBytes: Int64 = 1 << 20
    /// nginx's `limit_rate 256k`: bytes per second per connection.
    static let concurrencyCap = 256 * 1024
    /// Hosts 127.0.1.1 … 127.0.1.128: each its own origin, so no per-host limit binds.
    static let concurrencyHosts = 128

    private enum ConcurrencyClient {
        case queue, get, aria2c

        var variant: String? {
            switch self {
            case .queue: return "queue"
            case .get: return "get"
            case .aria2c: return nil
            }
        }

        func label(_ transfers: Int) -> String {
            switch self {
            case .queue: return "downloadkit queue, N = \(transfers)"
            case .get: return "downloadkit get -i, N = \(transfers)"
            case .aria2c: return "aria2c -j \(transfers)"
            }
        }
    }

    func runConcurrency() throws -> ScenarioResult {
        let levels = settings.concurrencyLevels
        raiseOpenFileLimit(needed: 4 * (levels.max() ?? 1) + 256)
        let origin = try ConcurrencyOrigin(
            nginx: nginxExecutable, documentRoot: cacheDirectory,
            file: BenchRunner.fileName(bytes: Self.concurrencyFileBytes), hosts: Self.concurrencyHosts,
            capBytesPerSecond: Self.concurrencyCap, prefix: settings.output + "/concurrency-nginx")
        defer { origin.stop() }
        log("concurrency: nginx on 127.0.1.1–127.0.1.\(Self.concurrencyHosts):\(origin.port), limit_rate 256k")

        // Downloads in tmpfs when there is one (the disk is not what is measured), like scale-cli.sh.
        let shm = "/dev/shm"
        let base = (access(shm, W_OK) == 0 ? shm : downloadDirectory) + "/dk-bench-concurrency-\(getpid())"
        try? FileManager.default.removeItem(atPath: base)
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }

        var kinds: [ConcurrencyClient] = []
        if FileManager.default.isExecutableFile(atPath: cli) { kinds += [.queue, .get] }
        let aria2c = clients.first { $0.kind == .aria2c }
        if aria2c != nil { kinds.append(.aria2c) }
        var rows: [Row] = []
        var plans: [(kind: ConcurrencyClient, transfers: Int)] = []
        for transfers in levels {
            for kind in kinds {
                plans.append((kind, transfers))
                rows.append(
                    Row(
                        label: kind.label(transfers), client: kind == .aria2c ? .aria2c : .downloadkit,
                        bytes: Int64(transfers) * Self.concurrencyFileBytes, files: transfers, variant: kind.variant,
                        transfers: transfers, idealBytesPerSecond: Double(transfers * Self.concurrencyCap)))
            }
        }
        if !kinds.contains(.queue) { log("concurrency: \(cli) is missing: swift build -c release --product downloadkit") }

        rows = alternate(.concurrency, rows: rows) { index, run in
            let (kind, transfers) = plans[index]
            let names = (0..<transfers).map { String(format: "f-%04d.bin", $0) }
            let urls = names.enumerated().map { index, name in
                "http://127.0.1.\(index % Self.concurrencyHosts + 1):\(origin.port)/c/\(name)"
            }
            let list = base + "/list-\(transfers)"
            try (urls.joined(separator: "\n") + "\n").write(toFile: list, atomically: true, encoding: .utf8)
            let directory = base + "/out"
            let state = base + "/state"
            for path in [directory, state] { try? FileManager.default.removeItem(atPath: path) }
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { for path in [directory, state] { try? FileManager.default.removeItem(atPath: path) } }
            let logBase = logDirectory + "/concurrency-\(kind)-\(transfers)-\(run)"

            let executable: String
            let arguments: [String]
            switch kind {
            case .queue:
                // Not timed: recording the tasks (one batch, one transaction).
                let add = try measure(
                    cli, ["queue", "--state", state, "add", "-d", directory] + urls, stdoutPath: logBase + "-add.out",
                    stderrPath: logBase + "-add.err")
                try requireSuccess(add, logBase: logBase + "-add")
                executable = cli
                arguments = ["queue", "--state", state, "run", "--max-concurrent", "\(transfers)", "--progress", "none"]
            case .get:
                executable = cli
                arguments = ["get", "-i", list, "-d", directory, "--max-concurrent", "\(transfers)", "--progress", "none"]
            case .aria2c:
                executable = aria2c?.executable ?? "aria2c"
                arguments = [
                    "-q", "-j", "\(transfers)", "-i", list, "-d", directory, "--max-connection-per-server=1", "--split=1",
                    "--file-allocation=none", "--allow-overwrite=true", "--auto-file-renaming=false",
                    "--summary-interval=0", "--console-log-level=error",
                ]
            }
            let measurement = try measure(
                executable, arguments, stdoutPath: logBase + ".out", stderrPath: logBase + ".err")
            try requireSuccess(measurement, logBase: logBase)
            try verifyDownloads(
                in: directory, files: names.map { ($0, Self.concurrencyFileBytes, BenchRunner.seed) })
            return Sample(measurement)
        }
        return ScenarioResult(
            name: .concurrency, summary: ScenarioName.concurrency.summary,
            bytes: Int64(levels.max() ?? 1) * Self.concurrencyFileBytes, rows: rows)
    }

    /// Every file of `files` in `directory` with its size and pattern, and nothing else there.
    func verifyDownloads(in directory: String, files: [(name: String, bytes: Int64, seed: UInt64)]) throws {
        for file in files {
            if let problem = spotCheck(path: directory + "/" + file.name, bytes: file.bytes, seed: file.seed) {
                throw BenchError("\(file.name): \(problem)")
            }
        }
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory).count - files.count
        guard leftovers == 0 else { throw BenchError("\(leftovers) extra files left in the directory") }
    }

    /// Raises the soft open-file limit to the hard one (at most 65,536), as scale-cli.sh's `ulimit -n`:
    /// every child (nginx, the clients) inherits it.
    private func raiseOpenFileLimit(needed: Int) {
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return }
        let wanted = min(limit.rlim_max, 65_536)
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted
            if setrlimit(resource, &limit) != 0 { log("concurrency: setrlimit(RLIMIT_NOFILE, \(wanted)) failed") }
        }
        if Int(limit.rlim_cur) < needed {
            log("concurrency: the open-file limit is \(limit.rlim_cur), below the \(needed) the largest level needs")
        }
    }
}

/// An nginx of its own for the concurrency and mirrors scenarios: TestOrigin's `NginxServer` listens on
/// 127.0.0.1 only with 1,024 worker connections; this one listens on 127.0.1.1 … 127.0.1.HOSTS (one port) with
/// room for thousands of connections, each address a host of its own (one origin per address for a client), and
/// serves below /c/ at `limit_rate` per connection: `file` under any name, or (file nil) the document root's files
/// by their names. With `accessLog`, one line per response there: the address it was sent from and its body bytes;
/// `sendfileMaxChunk` as the segmented scenario's nginx (a request's head start above the cap is one such chunk).
final class ConcurrencyOrigin {
    let port: Int
    private let process: ChildProcess

    init(
        nginx: String, documentRoot: String, file: String?, hosts: Int, capBytesPerSecond: Int, prefix: String,
        accessLog: String? = nil, sendfileMaxChunk: String? = nil
    ) throws {
        try? FileManager.default.removeItem(atPath: prefix)
        try FileManager.default.createDirectory(atPath: prefix + "/temp", withIntermediateDirectories: true)
        let port = try FreePort.allocate(count: 1)[0]
        self.port = port
        let listens = (1...hosts).map { "        listen 127.0.1.\($0):\(port) backlog=4096;" }.joined(separator: "\n")
        let temp = prefix + "/temp"
        let configuration = """
            daemon off;
            master_process off;
            worker_processes 1;
            worker_rlimit_nofile 16384;
            pid \(prefix)/nginx.pid;
            error_log \(prefix)/error.log warn;
            events { worker_connections 8192; }
            http {
                default_type application/octet-stream;
                log_format bysource '$server_addr $body_bytes_sent';
                \(accessLog.map { "access_log \($0) bysource;" } ?? "access_log off;")
                client_body_temp_path \(temp);
                proxy_temp_path \(temp);
                fastcgi_temp_path \(temp);
                uwsgi_temp_path \(temp);
                scgi_temp_path \(temp);
                sendfile on;
                \(sendfileMaxChunk.map { "sendfile_max_chunk \($0);" } ?? "")
                server {
            \(listens)
                    root \(documentRoot);
                    limit_rate \(capBytesPerSecond);
                    location /c/ { \(file.map { "try_files /\($0) =404;" } ?? "alias \(documentRoot)/;") }
                }
            }

            """
        try configuration.write(toFile: prefix + "/nginx.conf", atomically: true, encoding: .utf8)
        process = try ChildProcess(nginx, ["-c", prefix + "/nginx.conf", "-p", prefix], outputPath: prefix + "/nginx.out")
        let deadline = monotonicSeconds() + 10
        while !(Self.accepts("127.0.1.1", port) && Self.accepts("127.0.1.\(hosts)", port)) {
            guard process.isRunning, monotonicSeconds() < deadline else {
                let log = (try? String(contentsOfFile: prefix + "/error.log", encoding: .utf8)) ?? ""
                process.terminate(grace: 1)
                throw BenchError("the concurrency nginx did not start: \(log.suffix(500))")
            }
            usleep(20_000)
        }
    }

    func stop() { process.terminate(grace: 5) }

    /// Whether a TCP connection to `host`:`port` succeeds.
    private static func accepts(_ host: String, _ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
