import ArgumentParser
import BenchSupport
import DownloadKit
import DownloadKitManager
import Foundation
import Glibc
import HTTPClient
import HTTPWire
import TestOrigin

/// The measured DownloadKit client: the bench re-executes itself with this hidden subcommand so each
/// run is its own process, with exact CPU time and peak RSS from `wait4`.
struct FetchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch",
        abstract: "Download one URL once (used by the benchmark for each measured DownloadKit run).",
        shouldDisplay: false)

    enum Mode: String, ExpressibleByArgument, CaseIterable, Sendable {
        /// `DKHTTPClient.execute` with a reused `ReceiveBuffer`, each body slice written to /dev/null.
        case devnull
        /// The full `Download` engine to a file (temp file, checkpoints, fsync, rename); segmented
        /// with `--connections N`.
        case file
        /// Every URL of `--list` into `--dir`, `--concurrency` at a time, one shared DKHTTPClient.
        case many
        /// DownloadManager: enqueue `--count` tasks in one batch, close, restore; prints the timings.
        case queue
        /// mallocs of the response parser and the DKHTTPClient body loop (run under the malloc counter).
        case allocs
        /// Every URL of `--list` in turn, each on a new connection (`Connection: close`), body discarded:
        /// one handshake per file.
        case connections
    }

    @Option(help: "devnull, file, many, queue or allocs.")
    var mode: Mode

    @Option(help: "File mode: connections per file (segmented download when above 1).")
    var connections = 1

    @Option(name: .customLong("mirror"), help: "File mode: another source of the same file (repeatable; DownloadRequest.mirrors).")
    var mirrors: [String] = []

    @Option(help: "Many mode: a file with one URL per line.")
    var list: String?

    @Option(help: "Many mode: the destination directory; queue mode: the manager's state directory.")
    var dir: String?

    @Option(help: "Many mode: downloads at a time (also the client's connections per origin).")
    var concurrency = 16

    @Option(help: "Queue mode: how many tasks to enqueue.")
    var count = 10_000

    @Option(help: "Trust only the CA certificates in this PEM file, as curl --cacert does.")
    var cacert: String?

    @Flag(help: "Do not resume TLS sessions (DKTLSConfiguration.resumesSessions = false), like curl --no-sessionid.")
    var noSessionResumption = false

    @Option(help: "In devnull mode, the TestPattern seed of the body: spot-check bytes at 64 offsets.")
    var seed: UInt64?

    @Argument(help: "The URL (devnull, file, allocs; the base of the task URLs in queue mode).")
    var url: String?

    @Argument(help: "The destination file (file mode; ignored otherwise).")
    var destination: String?

    func validate() throws {
        if connections < 1 { throw ValidationError("--connections must be at least 1") }
        if concurrency < 1 { throw ValidationError("--concurrency must be at least 1") }
        switch mode {
        case .devnull, .allocs, .queue:
            if url == nil { throw ValidationError("\(mode.rawValue) mode needs a URL") }
        case .file:
            if url == nil || destination == nil { throw ValidationError("file mode needs a URL and a destination") }
        case .many:
            if list == nil || dir == nil { throw ValidationError("many mode needs --list and --dir") }
        case .connections:
            if list == nil { throw ValidationError("connections mode needs --list") }
        }
        if mode == .queue && dir == nil { throw ValidationError("queue mode needs --dir (the state directory)") }
    }

    func run() async throws {
        var clientConfiguration = DKHTTPClientConfiguration()
        if let cacert {
            // Like curl's --cacert, the one CA trusted: every client of a run then verifies against the same
            // single certificate. With SSL_CERT_FILE set (as on the project's machine kind) the system roots
            // would be a 139-certificate bundle parsed at the first handshake, 22-42 ms that curl does not pay.
            clientConfiguration.tls.useSystemTrustRoots = false
            clientConfiguration.tls.additionalTrustRootFiles.append(cacert)
        }
        clientConfiguration.tls.resumesSessions = !noSessionResumption
        switch mode {
        case .devnull:
            let bytes = try fetchToDevNull(url: url ?? "", configuration: clientConfiguration)
            print("bytes=\(bytes)")
        case .file:
            clientConfiguration.maxConnectionsPerOrigin = max(clientConfiguration.maxConnectionsPerOrigin, connections)
            var configuration = DownloadConfiguration(client: clientConfiguration)
            configuration.connections = connections
            var request = DownloadRequest(url: url ?? "", destination: .file(destination ?? ""))
            request.mirrors = mirrors
            let result = try await Download.run(request, configuration: configuration)
            print("bytes=\(result.bytes)")
        case .many:
            clientConfiguration.maxConnectionsPerOrigin = concurrency
            let (files, bytes) = try await fetchMany(
                listPath: list ?? "", directory: dir ?? "", concurrency: concurrency, configuration: clientConfiguration)
            print("bytes=\(bytes)")
            print("files=\(files)")
        case .queue:
            try await measureQueue(baseURL: url ?? "", stateDirectory: dir ?? "", count: count)
        case .allocs:
            try measureAllocations(url: url ?? "", configuration: clientConfiguration)
        case .connections:
            let (files, bytes) = try fetchEachOnNewConnection(listPath: list ?? "", configuration: clientConfiguration)
            print("bytes=\(bytes)")
            print("files=\(files)")
        }
        // The kernel's high-water RSS of this address space, a cross-check of the launcher's ru_maxrss.
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
        {
            print(line.replacingOccurrences(of: "\t", with: " "))
        }
    }

    /// One GET, body to /dev/null, like `curl -s -o /dev/null URL`. Returns the body length after
    /// checking it against Content-Length and spot-checking the pattern.
    private func fetchToDevNull(url: String, configuration: DKHTTPClientConfiguration) throws -> Int64 {
        let started = monotonicSeconds()
        let client = try DKHTTPClient(configuration: configuration)
        let clientReady = monotonicSeconds()
        var headSeen = clientReady
        let request = DKHTTPRequest(url: try HTTPURL(url))
        let buffer = ReceiveBuffer(capacity: configuration.receiveBufferSize)
        let sink = open("/dev/null", O_WRONLY | O_CLOEXEC)
        guard sink >= 0 else { throw ValidationError("open /dev/null: \(String(cString: strerror(errno)))") }
        defer { close(sink) }

        var expectedLength: Int64?
        var checkOffsets: [Int64] = []
        var nextCheck = 0
        var position: Int64 = 0
        let summary = try client.execute(
            request, buffer: buffer,
            onHead: { head in
                guard head.status == 200 else { throw ValidationError("HTTP status \(head.status)") }
                headSeen = monotonicSeconds()
                expectedLength = try head.contentLength()
                if seed != nil, let length = expectedLength, length > 0 {
                    checkOffsets = (0..<64).map { Int64($0) * (length - 1) / 63 }
                }
                return .stream
            },
            onBody: { slice in
                guard let base = slice.baseAddress else { return }
                var written = 0
                while written < slice.count {
                    let result = write(sink, base + written, slice.count - written)
                    if result < 0 {
                        if errno == EINTR { continue }
                        throw ValidationError("write /dev/null: \(String(cString: strerror(errno)))")
                    }
                    written += result
                }
                if let seed {
                    let end = position + Int64(slice.count)
                    while nextCheck < checkOffsets.count && checkOffsets[nextCheck] < end {
                        let offset = checkOffsets[nextCheck]
                        guard slice[Int(offset - position)] == TestPattern.byte(at: offset, seed: seed) else {
                            throw ValidationError("body byte at offset \(offset) differs from the pattern")
                        }
                        nextCheck += 1
                    }
                }
                position += Int64(slice.count)
            })
        if let expectedLength, summary.bodyBytes != expectedLength {
            throw ValidationError("received \(summary.bodyBytes) bytes, Content-Length \(expectedLength)")
        }
        let finished = monotonicSeconds()
        // Phase timings (seconds) for the logs: client set-up (TLS context), request to head, body.
        print(
            "phases client_init=\(format(clientReady - started, 4)) to_head=\(format(headSeen - clientReady, 4)) "
                + "body=\(format(finished - headSeen, 4))")
        if nextCheck != checkOffsets.count {
            throw ValidationError("only \(nextCheck) of \(checkOffsets.count) spot checks reached")
        }
        return summary.bodyBytes
    }
}
