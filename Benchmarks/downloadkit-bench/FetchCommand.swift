import ArgumentParser
import DownloadKit
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
        /// `HTTPClient.execute` with a reused `ReceiveBuffer`, each body slice written to /dev/null.
        case devnull
        /// The full `Download` engine to a file (temp file, checkpoints, fsync, rename).
        case file
    }

    @Option(help: "devnull or file.")
    var mode: Mode

    @Option(help: "Also trust the CA certificates in this PEM file.")
    var cacert: String?

    @Option(help: "In devnull mode, the TestPattern seed of the body: spot-check bytes at 64 offsets.")
    var seed: UInt64?

    @Argument(help: "The URL.")
    var url: String

    @Argument(help: "The destination file (file mode; ignored in devnull mode).")
    var destination: String

    func run() async throws {
        var clientConfiguration = HTTPClientConfiguration()
        if let cacert { clientConfiguration.tls.additionalTrustRootFiles.append(cacert) }
        switch mode {
        case .devnull:
            let bytes = try fetchToDevNull(configuration: clientConfiguration)
            print("bytes=\(bytes)")
        case .file:
            let result = try await Download.run(
                DownloadRequest(url: url, destination: .file(destination)),
                configuration: DownloadConfiguration(client: clientConfiguration))
            print("bytes=\(result.bytes)")
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
    private func fetchToDevNull(configuration: HTTPClientConfiguration) throws -> Int64 {
        let started = monotonicNow()
        let client = try HTTPClient(configuration: configuration)
        let clientReady = monotonicNow()
        var headSeen = clientReady
        let request = HTTPRequest(url: try HTTPURL(url))
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
                headSeen = monotonicNow()
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
        let finished = monotonicNow()
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
