import DownloadKit
import DownloadKitManager
import Foundation
import HTTPClient
import Logging
import Testing
import TestOrigin

/// README.md's library examples, run as written against the local origin (only the URLs, paths and
/// the checksum differ), so the README cannot drift from the API.
@Suite(.timeLimit(.minutes(3)))
struct ReadmeExamplesTests {
    @Test func singleDownloadExampleRunsAsDocumented() async throws {
        let origin = try FaultOrigin()
        origin.serve("/images/disk.iso", .resource(Resource(size: 2 << 20, seed: 81)))
        let dir = try ScratchDirectory()
        let sha256 = DKDigest.hex(DKDigest.hash(.sha256, TestPattern.bytes(offset: 0, count: 2 << 20, seed: 81)))

        let request = DownloadRequest(
            url: origin.url("/images/disk.iso"),
            destination: .file(dir.file("disk.iso")),
            checksum: Checksum(parsing: "sha256=\(sha256)"))
        let download = Download(request)
        download.start()
        let watcher = Task {
            var progressEvents = 0
            for await event in download.events {
                if case .progress = event { progressEvents += 1 }
            }
            return progressEvents
        }
        var path: String?
        do {
            let result = try await download.result()
            path = result.path
        } catch {
            Issue.record("\(error.code) \(error.detail) \(error.isTransient)")
        }
        #expect(path == dir.file("disk.iso"))
        #expect(await watcher.value > 0)

        // Pause after completion returns no resume data; a new Download to the same destination works.
        let resumeData = await download.pause()
        #expect(resumeData == nil)
        let again = Download(DownloadRequest(url: request.url, destination: request.destination, resumeData: resumeData))
        again.start()
        #expect(try await again.result().bytes == 2 << 20)
    }

    @Test func cancellationExampleRunsAsDocumented() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 4 << 20
        origin.serve("/disk.iso", .resource(Resource(size: size, seed: 83, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 100)])))
        let dir = try ScratchDirectory()
        let download = Download(DownloadRequest(url: origin.url("/disk.iso"), destination: .file(dir.file("disk.iso"))))
        download.start()
        for _ in 0..<3000 where download.progress.bytesReceived == 0 { try await Task.sleep(for: .milliseconds(20)) }
        try #require(download.progress.bytesReceived > 0)
        var resumed: DownloadResult?

        let work = Task { try await download.result() }
        work.cancel()                                           // bytes kept on disk
        let outcome = await work.result
        // The origin is healed only once the first download has stopped: healed before the cancellation
        // lands, a low-speed retry in between (30 s of stall, reached on a starved machine) could finish it.
        origin.serve("/disk.iso", .resource(Resource(size: size, seed: 83)))
        if case .failure(let error as DownloadError) = outcome, let data = error.resumeData {
            let again = try Download(resumingWith: data)        // URL, destination and checksum from the plist
            again.start()
            resumed = try await again.result()
        }

        #expect(resumed?.resumedFrom ?? 0 > 0)
        #expect(fileMatchesPattern(dir.file("disk.iso"), size: size, seed: 83))
    }

    @Test func managerExampleRunsAsDocumented() async throws {
        let origin = try FaultOrigin()
        origin.serve("/ep1.mp4", .resource(Resource(size: 1 << 20, seed: 82)))
        let state = try ScratchDirectory()
        let videos = try ScratchDirectory()
        let manager = try await DownloadManager(stateDirectory: state.path, networkMonitor: ManualNetworkMonitor())
        try await manager.setMaxConcurrent(3)
        let events = manager.events
        let id = try await manager.enqueue(
            url: origin.url("/ep1.mp4?sig=abc"), fileID: "ep1",
            destination: .directory(videos.path, naming: .fileID("ep1")), group: "season-1")
        var finishedPath: String?
        loop: for await event in events {
            switch event {
            case .finished(let taskID, let path):
                #expect(taskID == id)
                finishedPath = path
            case .failed(_, let error): Issue.record("\(error.detail)")
            case .allFinished: break loop
            default: break
            }
        }
        #expect(finishedPath == videos.file("ep1.mp4"))
        #expect(fileMatchesPattern(videos.file("ep1.mp4"), size: 1 << 20, seed: 82))
        try await manager.refreshURL(taskID: id, newURL: origin.url("/ep1.mp4?sig=new"))
        await manager.close()
    }

    @Test func configurationExampleRunsAsDocumented() async throws {
        let origin = try FaultOrigin()
        origin.serve("/big.iso", .resource(Resource(size: 16 << 20, seed: 83)))
        let dir = try ScratchDirectory()
        let request = DownloadRequest(url: origin.url("/big.iso"), destination: .file(dir.file("big.iso")))

        var configuration = DownloadConfiguration(retries: 8, retryBaseDelay: .seconds(1), lowSpeedTime: .seconds(60))
        configuration.connections = 8                           // segmented: ranges checked one by one
        configuration.client.headTimeout = .seconds(30)         // a response head must arrive within 30 s
        configuration.logger = Logger(label: "downloads")       // swift-log; DKHTTPClient logs to it at debug
        let fast = Download(request, configuration: configuration)

        fast.start()
        let result = try await fast.result()
        #expect(result.bytes == 16 << 20)
        #expect(fileMatchesPattern(dir.file("big.iso"), size: 16 << 20, seed: 83))
    }

    @Test func mirrorsExampleRunsAsDocumented() async throws {
        let a = try FaultOrigin(), b = try FaultOrigin(), c = try FaultOrigin()
        defer { for origin in [a, b, c] { origin.shutdown() } }
        // Three servers of one file: the same bytes and Last-Modified, each its own ETag.
        for (index, origin) in [a, b, c].enumerated() {
            origin.serve("/disk.iso", .resource(Resource(size: 8 << 20, seed: 84, etag: "\"server-\(index)\"")))
        }
        let dir = try ScratchDirectory()

        var mirrored = DownloadRequest(url: a.url("/disk.iso"), destination: .file(dir.file("disk.iso")))
        mirrored.mirrors = [b.url("/disk.iso"), c.url("/disk.iso")]
        var spread = DownloadConfiguration()
        spread.connections = 6                                  // the total; at most connectionsPerSource on each
        let download = Download(mirrored, configuration: spread)
        download.start()
        let result = try await download.result()
        var lines: [String] = []
        for source in result.sources { lines.append("\(source.url) \(source.bytes) \(source.dropReason.map { "\($0)" } ?? "kept")") }

        #expect(fileMatchesPattern(dir.file("disk.iso"), size: 8 << 20, seed: 84))
        #expect(result.sources.count == 3 && result.sources.allSatisfy { $0.dropReason == nil }, "\(lines)")
        #expect(result.sources.reduce(0) { $0 + $1.bytes } >= 8 << 20, "\(lines)")
    }
}
