import ArgumentParser
import BenchSupport
import DownloadKit
import DownloadKitManager
import Foundation
import Glibc
import HTTPClient
import HTTPWire
import TestOrigin

/// The `many`, `queue` and `allocs` modes of the hidden `fetch` subcommand.
extension FetchCommand {
    /// Downloads every URL in `listPath` into `directory` (named by the URL's last path component),
    /// `concurrency` at a time, all sharing one `DKHTTPClient` so connections are reused. Each file is a
    /// full `Download`: temp file, fsync, rename, directory fsync.
    /// - Returns: The number of files and their total bytes.
    func fetchMany(
        listPath: String, directory: String, concurrency: Int, configuration: DKHTTPClientConfiguration
    ) async throws -> (files: Int, bytes: Int64) {
        let text = try String(contentsOfFile: listPath, encoding: .utf8)
        let urls = text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.isEmpty }
        let client = try DKHTTPClient(configuration: configuration)
        let downloadConfiguration = DownloadConfiguration(client: configuration)
        var files = 0
        var bytes: Int64 = 0
        try await withThrowingTaskGroup(of: Int64.self) { group in
            var next = 0
            func addNext() {
                guard next < urls.count else { return }
                let url = urls[next]
                next += 1
                let name = url.split(separator: "/").last.map(String.init) ?? "file-\(next)"
                let request = DownloadRequest(url: url, destination: .file(directory + "/" + name))
                group.addTask {
                    try await Download.run(request, configuration: downloadConfiguration, client: client).bytes
                }
            }
            for _ in 0..<concurrency { addNext() }
            while let received = try await group.next() {
                files += 1
                bytes += received
                addNext()
            }
        }
        return (files, bytes)
    }

    /// Fetches every URL in `listPath` one after the other, each with `Connection: close` so the server
    /// closes it and the next one opens a new connection (a TLS handshake per file, resumed or not), bodies
    /// discarded. One `DKHTTPClient`, so its TLS session cache is shared by all of them.
    /// - Returns: The number of files and their total bytes.
    func fetchEachOnNewConnection(listPath: String, configuration: DKHTTPClientConfiguration) throws
        -> (files: Int, bytes: Int64)
    {
        let text = try String(contentsOfFile: listPath, encoding: .utf8)
        let urls = text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.isEmpty }
        let client = try DKHTTPClient(configuration: configuration)
        let buffer = ReceiveBuffer(capacity: 64 << 10)
        var bytes: Int64 = 0
        for url in urls {
            let request = DKHTTPRequest(url: try HTTPURL(url), headers: ["Connection": "close"])
            let summary = try client.execute(
                request, buffer: buffer,
                onHead: { head in
                    guard head.status == 200 else { throw ValidationError("HTTP status \(head.status) for \(url)") }
                    return .stream
                },
                onBody: { _ in })
            bytes += summary.bodyBytes
        }
        return (urls.count, bytes)
    }

    /// Opens a manager on `stateDirectory` (network unreachable, so nothing starts), enqueues `count`
    /// tasks in one batch, closes it, and opens a second manager on the same directory, which restores
    /// them. Prints `open_ms`, `enqueue_ms`, `close_ms` and `restore_ms`, then `restored=N`.
    func measureQueue(baseURL: String, stateDirectory: String, count: Int) async throws {
        let offline = NetworkStatus(isReachable: false, isMetered: false)
        let configuration = DownloadManagerConfiguration(maxConcurrentDownloads: 3)
        let base = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        let requests = (0..<count).map { index in
            DownloadManager.TaskRequest(
                url: "\(base)/task-\(index).bin", destination: .file("\(stateDirectory)/files/task-\(index).bin"))
        }

        let opening = monotonicSeconds()
        let manager = try await DownloadManager(
            stateDirectory: stateDirectory, configuration: configuration,
            networkMonitor: ManualNetworkMonitor(offline))
        let enqueueing = monotonicSeconds()
        let ids = try await manager.enqueue(requests)
        let closing = monotonicSeconds()
        await manager.close()
        let restoring = monotonicSeconds()
        let restored = try await DownloadManager(
            stateDirectory: stateDirectory, configuration: configuration,
            networkMonitor: ManualNetworkMonitor(offline))
        let done = monotonicSeconds()
        let tasks = await restored.allTasks()
        await restored.close()
        guard Set(ids).count == count, tasks.count == count else {
            throw ValidationError("enqueued \(Set(ids).count) distinct tasks, restored \(tasks.count), expected \(count)")
        }
        print(
            "open_ms=\(format((enqueueing - opening) * 1000, 2)) enqueue_ms=\(format((closing - enqueueing) * 1000, 2)) "
                + "close_ms=\(format((restoring - closing) * 1000, 2)) restore_ms=\(format((done - restoring) * 1000, 2))")
        print("restored=\(tasks.count)")
    }

    /// Counts mallocs (through the LD_PRELOAD counter's `dkbench_malloc_count`) in the response
    /// parser and in the DKHTTPClient body loop. Prints `key=value` lines the bench reads.
    func measureAllocations(url: String, configuration: DKHTTPClientConfiguration) throws {
        guard let symbol = dlsym(nil, "dkbench_malloc_count") else {
            throw ValidationError("dkbench_malloc_count not found: run under LD_PRELOAD=<malloc counter>")
        }
        typealias Counter = @convention(c) () -> UInt64
        let mallocs = unsafeBitCast(symbol, to: Counter.self)

        // (a) The parser over a realistic nginx response: head + 1 MiB body, fed in 64 KiB pieces.
        let bodyBytes = 1 << 20
        let head = """
            HTTP/1.1 200 OK\r
            Server: nginx/1.22.1\r
            Date: Sat, 21 Nov 2026 19:43:45 GMT\r
            Content-Type: application/octet-stream\r
            Content-Length: \(bodyBytes)\r
            Last-Modified: Sat, 21 Nov 2026 19:40:00 GMT\r
            Connection: keep-alive\r
            ETag: "6920c0a0-100000"\r
            Accept-Ranges: bytes\r
            \r

            """
        var message = Array(head.utf8)
        message += [UInt8](repeating: 0x5a, count: bodyBytes)
        var parser = ResponseParser(requestMethod: .GET)
        var headMallocs: UInt64 = 0
        var bodyMallocs: UInt64 = 0
        var parsedBody = 0
        let rounds = 64
        try message.withUnsafeBytes { bytes in
            for round in 0..<(rounds + 4) {
                let counting = round >= 4  // the first responses warm up the head buffer's storage
                parser.reset(requestMethod: .GET)
                var mark = mallocs()
                var finished = false
                var start = 0
                while start < bytes.count && !finished {
                    let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<min(start + (64 << 10), bytes.count)])
                    var offset = 0
                    pieceLoop: while true {
                        let step = try parser.next(UnsafeRawBufferPointer(rebasing: piece[offset...]))
                        offset += step.consumed
                        switch step.event {
                        case .head:
                            let now = mallocs()
                            if counting { headMallocs += now - mark }
                            mark = now
                        case .body(let range):
                            if counting { parsedBody += range.count }
                        case .end:
                            finished = true
                            break pieceLoop
                        case .needMore:
                            break pieceLoop
                        }
                    }
                    start += piece.count
                }
                if counting { bodyMallocs += mallocs() - mark }
                guard finished else { throw ValidationError("the parser did not reach the end of the message") }
            }
        }
        guard parsedBody == rounds * bodyBytes else {
            throw ValidationError("parsed \(parsedBody) body bytes, expected \(rounds * bodyBytes)")
        }
        print("parser_head_mallocs=\(format(Double(headMallocs) / Double(rounds), 2))")
        print("parser_body_mallocs_per_mib=\(format(Double(bodyMallocs) / Double(rounds), 2))")

        // (b) DKHTTPClient.execute into a reused ReceiveBuffer: a warm-up exchange, then the measured one.
        let client = try DKHTTPClient(configuration: configuration)
        let request = DKHTTPRequest(url: try HTTPURL(url))
        let buffer = ReceiveBuffer(capacity: configuration.receiveBufferSize)
        var firstBody: UInt64 = 0
        var lastBody: UInt64 = 0
        var bytesAtFirst: Int64 = 0
        var received: Int64 = 0
        var exchangeStart: UInt64 = 0
        var exchangeEnd: UInt64 = 0
        for round in 0..<2 {
            received = 0
            firstBody = 0
            exchangeStart = mallocs()
            let summary = try client.execute(
                request, buffer: buffer,
                onHead: { head in
                    guard head.status == 200 else { throw ValidationError("HTTP status \(head.status)") }
                    return .stream
                },
                onBody: { slice in
                    let now = mallocs()
                    if firstBody == 0 {
                        firstBody = now
                        bytesAtFirst = received + Int64(slice.count)
                    }
                    lastBody = now
                    received += Int64(slice.count)
                })
            exchangeEnd = mallocs()
            guard summary.bodyBytes == received, received > 0 else {
                throw ValidationError("round \(round): \(received) body bytes, summary \(summary.bodyBytes)")
            }
        }
        let steadyMiB = Double(received - bytesAtFirst) / 1_048_576
        print("exchange_mallocs=\(exchangeEnd - exchangeStart)")
        print("body_loop_mallocs=\(lastBody - firstBody)")
        print("body_loop_mib=\(format(steadyMiB, 3))")
        print("body_loop_mallocs_per_mib=\(format(steadyMiB > 0 ? Double(lastBody - firstBody) / steadyMiB : 0, 3))")
        print("bytes=\(received)")
    }
}
