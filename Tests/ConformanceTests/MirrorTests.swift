import DownloadKit
import Foundation
import Glibc
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// One file from several sources (issue #48, docs/MIRRORS.md): three origins on private ports — nginx
/// and the fault origin — each witnessing in its own log what it served.
@Suite(.timeLimit(.minutes(3)))
struct MirrorTests {
    static let size: Int64 = 8 << 20
    /// `Resource.defaultLastModified` as a file time, so nginx's `Last-Modified` equals the fault origin's.
    static let modified = Date(timeIntervalSince1970: 1_704_067_200)

    func configuration() -> DownloadConfiguration {
        var configuration = DownloadConfiguration(
            retries: 3, retryBaseDelay: .milliseconds(10), maxRetryDelay: .milliseconds(50),
            progressInterval: .milliseconds(20),
            client: DKHTTPClientConfiguration(connectTimeout: .seconds(20), idleTimeout: .seconds(20)))
        configuration.minimumSegmentSize = 256 << 10
        return configuration
    }

    func run(_ request: DownloadRequest, _ configuration: DownloadConfiguration) async -> (Result<DownloadResult, DownloadError>, [DownloadEvent]) {
        await runDownload(request, configuration: configuration)
    }

    func drops(_ events: [DownloadEvent]) -> [String: SourceDropReason] {
        var drops: [String: SourceDropReason] = [:]
        for event in events {
            if case .stateChanged(_, .sourceDropped(let source, let reason)) = event { drops[source] = reason }
        }
        return drops
    }

    /// Body bytes a fault origin was asked for in range requests (the probe's `bytes=0-0` left out).
    static func requestedBytes(_ origin: FaultOrigin, _ path: String) -> Int64 {
        origin.requests(path).compactMap { request -> Int64? in
            guard let range = request.header("Range"), range != "bytes=0-0", range.hasPrefix("bytes=") else { return nil }
            let parts = range.dropFirst(6).split(separator: "-")
            guard parts.count == 2, let first = Int64(parts[0]), let last = Int64(parts[1]) else { return nil }
            return last - first + 1
        }.reduce(0, +)
    }

    /// A pattern file with the fixed modification time, in a fresh document root.
    static func nginxRoot(seed: UInt64, name: String = "m.bin") throws -> ScratchDirectory {
        let root = try ScratchDirectory()
        try Data(TestPattern.bytes(offset: 0, count: Int(size), seed: seed)).write(to: URL(fileURLWithPath: root.file(name)))
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: root.file(name))
        return root
    }

    @Test func threeAgreeingMirrorsEachServePartOfTheFile() async throws {
        let seed: UInt64 = 0x48
        let root = try Self.nginxRoot(seed: seed)
        let nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path, limitRate: 2 << 20))
        defer { nginx.stop() }
        // Its own ETag and nginx's Last-Modified: the ordinary mirror.
        let second = try FaultOrigin()
        second.serve("/m.bin", .resource(Resource(size: Self.size, seed: seed, etag: "\"second\"", bytesPerSecond: 2 << 20)))
        // No Last-Modified at all: it joins by a sample equal to bytes already written.
        let third = try FaultOrigin()
        third.serve("/m.bin", .resource(Resource(size: Self.size, seed: seed, etag: nil, lastModified: nil, bytesPerSecond: 2 << 20)))
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: nginx.httpURL("/limited/m.bin"), destination: .file(dir.file("m.bin")))
        request.mirrors = [second.url("/m.bin"), third.url("/m.bin")]
        let (result, events) = await run(request, configuration())
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("m.bin"), size: Self.size, seed: seed))
        #expect(dir.contents == ["m.bin"])
        #expect(drops(events).isEmpty)
        // Each origin's log shows its part.
        let nginxBytes = try nginx.accessLog(waitingFor: 2).filter { $0.uri == "/limited/m.bin" && $0.range != "bytes=0-0" }
            .reduce(Int64(0)) { $0 + $1.bodyBytesSent }
        let secondBytes = Self.requestedBytes(second, "/m.bin")
        let thirdBytes = Self.requestedBytes(third, "/m.bin")
        #expect(nginxBytes > 0 && secondBytes > 0 && thirdBytes > SourceSchedulerSample.size, "nginx \(nginxBytes), second \(secondBytes), third \(thirdBytes)")
        // The result says the same: every byte credited once, from the three.
        #expect(done.sources.map(\.bytes).allSatisfy { $0 > 0 }, "\(done.sources)")
        #expect(done.sources.map(\.bytes).reduce(0, +) == Self.size)
        #expect(done.sources.allSatisfy { $0.dropReason == nil })
        #expect(done.sources.map(\.url) == [request.url] + request.mirrors)
    }

    @Test func mirrorsWithAnotherVersionAreDroppedWithTheirReasonAndTheFileIsRight() async throws {
        let first = try FaultOrigin()
        first.serve("/v", .resource(Resource(size: Self.size, seed: 1, bytesPerSecond: 4 << 20)))
        // Same length, another Last-Modified (and other bytes).
        let newer = try FaultOrigin()
        let newerDate = "Tue, 02 Jan 2024 00:00:00 GMT"
        newer.serve("/v", .resource(Resource(size: Self.size, seed: 2, lastModified: newerDate)))
        // Same length, no Last-Modified, other bytes: the sample finds it out.
        let silent = try FaultOrigin()
        silent.serve("/v", .resource(Resource(size: Self.size, seed: 3, etag: nil, lastModified: nil)))
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: first.url("/v"), destination: .file(dir.file("v")))
        request.mirrors = [newer.url("/v"), silent.url("/v")]
        let (result, events) = await run(request, configuration())
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("v"), size: Self.size, seed: 1))
        let dropped = drops(events)
        #expect(dropped[newer.url("/v")] == .differentLastModified(expected: Resource.defaultLastModified, got: newerDate))
        guard case .differentBytes(let range)? = dropped[silent.url("/v")] else {
            Issue.record("the silent mirror: \(String(describing: dropped[silent.url("/v")]))")
            return
        }
        #expect(range.count == SourceSchedulerSample.size)
        #expect(done.sources.map(\.bytes) == [Self.size, 0, 0])
        #expect(done.sources[1].dropReason == dropped[newer.url("/v")])
        // The silent mirror was asked twice: a segment, whose answer was left unread at its head (no
        // Last-Modified to compare), then the sample; none of its bytes reached the file.
        let asked = silent.requests("/v").compactMap { $0.header("Range") }
        #expect(asked.count == 2, "\(asked)")
        #expect(asked.last == "bytes=\(range.lowerBound)-\(range.upperBound - 1)")
    }

    /// The caller's credentials go to the first URL's origin only; a mirror that ignores ranges (a 200)
    /// is dropped as such, its whole body never written.
    @Test func credentialsStayWithTheFirstOriginAndARangelessMirrorIsDropped() async throws {
        let seed: UInt64 = 0x43
        let first = try FaultOrigin()
        first.serve("/c", .resource(Resource(size: Self.size, seed: seed, bytesPerSecond: 4 << 20)))
        let other = try FaultOrigin()
        other.serve("/c", .resource(Resource(size: Self.size, seed: seed, etag: "\"other\"", bytesPerSecond: 4 << 20)))
        let rangeless = try FaultOrigin()
        rangeless.serve("/c", .resource(Resource(size: Self.size, seed: seed, honorsRanges: false)))
        let dir = try ScratchDirectory()
        var headers = DKHTTPHeaders()
        headers.add(name: "Authorization", value: "Bearer s3cret")
        headers.add(name: "X-Api-Key", value: "k3y")
        var request = DownloadRequest(url: first.url("/c"), destination: .file(dir.file("c")), headers: headers)
        request.credentialHeaderNames = ["X-Api-Key"]
        request.mirrors = [other.url("/c"), rangeless.url("/c")]
        let (result, events) = await run(request, configuration())
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("c"), size: Self.size, seed: seed))
        #expect(drops(events) == [rangeless.url("/c"): .noRangeSupport(status: 200)])
        #expect(done.sources[1].bytes > 0 && done.sources[2].bytes == 0)
        #expect(first.requests("/c").allSatisfy { $0.header("Authorization") == "Bearer s3cret" && $0.header("X-Api-Key") == "k3y" })
        #expect(!other.requests("/c").isEmpty)
        #expect(other.requests("/c").allSatisfy { $0.header("Authorization") == nil && $0.header("X-Api-Key") == nil })
        #expect(rangeless.requests("/c").allSatisfy { $0.header("Authorization") == nil })
    }

    /// Mirrors that need a sample, and a first source that fails before it wrote one: nothing can prove
    /// them, so they are dropped as unverifiable and the download fails with a typed error — it does not
    /// wait for bytes that never come, nor take their bytes unproved.
    @Test(.timeLimit(.minutes(1))) func mirrorsThatCannotBeProvedAreDroppedWhenTheFirstSourceFails() async throws {
        let first = try FaultOrigin()
        // The probe's one byte goes out whole; every segment answer then closes after a byte.
        first.serve("/u", .resource(Resource(size: Self.size, seed: 5, lastModified: nil, faults: [.closeAfter(bytes: 1, times: 1_000)])))
        let mirrors = try (0..<2).map { _ in try FaultOrigin() }
        for mirror in mirrors { mirror.serve("/u", .resource(Resource(size: Self.size, seed: 5, etag: nil, lastModified: nil))) }
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: first.url("/u"), destination: .file(dir.file("u")))
        request.mirrors = mirrors.map { $0.url("/u") }
        var configuration = configuration()
        configuration.retries = 1
        let (result, events) = await run(request, configuration)
        guard case .failure(let error) = result else {
            Issue.record("the download succeeded from unproved mirrors")
            return
        }
        #expect(error.detail.contains("every source was dropped"), "\(error)")
        let dropped = drops(events)
        #expect(dropped.count == 3, "\(dropped)")
        for mirror in mirrors { #expect(dropped[mirror.url("/u")] == .unverifiable) }
        #expect(!FileManager.default.fileExists(atPath: dir.file("u")))
    }

    @Test func aMirrorThatDiesHandsItsRangesToTheOthers() async throws {
        let seed: UInt64 = 0x4D
        let origins = try (0..<3).map { _ in try FaultOrigin() }
        for origin in origins {
            origin.serve("/d", .resource(Resource(size: Self.size, seed: seed, bytesPerSecond: 1 << 20)))
        }
        let dying = origins[1]
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: origins[0].url("/d"), destination: .file(dir.file("d")))
        request.mirrors = [dying.url("/d"), origins[2].url("/d")]
        let download = Download(request, configuration: configuration())
        download.start()
        // Once the mirror has served for a while, it goes away (its connection closed mid-body, then refused).
        _ = try await offloaded {
            var polls = 0
            while dying.requests("/d").isEmpty && polls < 20_000 {
                usleep(1000)
                polls += 1
            }
            usleep(700_000)
            dying.shutdown()
        }
        var events: [DownloadEvent] = []
        for await event in download.events { events.append(event) }
        let done = try await download.result()
        #expect(fileMatchesPattern(dir.file("d"), size: Self.size, seed: seed))
        guard case .failed? = drops(events)[dying.url("/d")] else {
            Issue.record("the dying mirror: \(drops(events))")
            return
        }
        #expect(done.sources[1].bytes > 0, "it served a part before it died")
        #expect(done.sources[1].bytes < Self.size / 3, "its ranges went to the others")
        #expect(done.sources.map(\.bytes).reduce(0, +) == Self.size)
    }
}

/// `downloadkit get URL --mirror URL2 --mirror URL3` end to end.
@Suite(.timeLimit(.minutes(3)))
struct MirrorCLITests {
    /// Kills `child` with SIGKILL `microseconds` after `ready` holds (polled every 0.5 ms, 10 s at most);
    /// false when it ended before.
    static func kill(_ child: ChildProcess, once ready: @escaping @Sendable () -> Bool, thenAfter microseconds: useconds_t) async throws -> Bool {
        try await offloaded { () -> Bool in
            var polls = 0
            while child.isRunning && polls < 20_000 && !ready() {
                usleep(500)
                polls += 1
            }
            usleep(microseconds)
            guard child.isRunning else { return false }
            Glibc.kill(child.pid, SIGKILL)
            _ = child.waitForExit(timeout: 10)
            return true
        }
    }

    @Test func mirrorWithSeveralURLsIsAUsageErrorNamingTheOption() throws {
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let run = try CLITests.runBlocking(
            executable, ["get", "http://127.0.0.1:9/a", "http://127.0.0.1:9/b", "--mirror", "http://127.0.0.1:9/c"],
            in: dir, timeout: 30)
        #expect(run.exitCode == 64 || run.exitCode == 2, "\(run.output)")
        #expect(run.output.contains("--mirror takes a single URL"), "\(run.output)")
        #expect(dir.contents.isEmpty)
    }

    /// Three nginx servers with the same file (the third without ETags): `get` killed with SIGKILL
    /// mid-transfer and rerun with the same sources re-fetches at most one request per connection (4 MiB)
    /// — counted from the three access logs — and ends with the right bytes; its summary names what each
    /// source gave, without the password in a mirror's URL.
    @Test func killedAndRerunWithThreeMirrorsRefetchesAtMostOneRequestPerConnection() async throws {
        let size = 24 << 20
        let seed: UInt64 = 0x4B
        let connections = 3
        let root = try ScratchDirectory()
        try Data(TestPattern.bytes(offset: 0, count: size, seed: seed)).write(to: URL(fileURLWithPath: root.file("k.bin")))
        try FileManager.default.setAttributes([.modificationDate: MirrorTests.modified], ofItemAtPath: root.file("k.bin"))
        let servers = try (0..<3).map { index in
            try NginxServer(
                configuration: NginxConfiguration(
                    documentRoot: root.path, limitRate: 2 << 20, extraServerDirectives: index == 2 ? "etag off;" : ""))
        }
        defer { for server in servers { server.stop() } }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let mirror = servers[2].httpURL("/limited/k.bin").replacingOccurrences(of: "http://", with: "http://user:hunter2@")
        let arguments = [
            "get", servers[0].httpURL("/limited/k.bin"), "--mirror", servers[1].httpURL("/limited/k.bin"), "--mirror", mirror,
            "-o", dir.file("k.bin"), "--connections", "\(connections)", "--progress", "none",
        ]
        let log = dir.path + "/../mirror-kill-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess(executable, arguments, outputPath: log)
        // A few journal records (32 bytes each) from the segments, then some 400 ms more.
        let killed = try await Self.kill(child, once: { (dir.size("k.bin.dkjournal") ?? 0) >= 32 * 8 }, thenAfter: 400_000)
        #expect(killed, "the first run was killed mid-transfer")
        #expect(FileManager.default.fileExists(atPath: dir.file("k.bin.dkpart")))
        let rerun = try await CLITests.runOffPool(executable, arguments, in: dir, timeout: 90)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("k.bin"), size: Int64(size), seed: seed))
        #expect(dir.contents == ["k.bin"])
        // The summary: a line per source, none dropped, no password.
        let lines = rerun.output.split(separator: "\n").filter { $0.contains("source ") }
        #expect(lines.count == 3, "\(rerun.output)")
        #expect(!rerun.output.contains("hunter2"))
        #expect(!rerun.output.contains("dropped"), "\(rerun.output)")

        var body: Int64 = 0
        var perServer: [Int64] = []
        for server in servers {
            var entries: [NginxAccessLogEntry] = []
            for _ in 0..<200 {
                entries = try server.accessLog().filter { $0.uri == "/limited/k.bin" }
                if entries.allSatisfy({ $0.status == 206 }) && !entries.isEmpty { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            let served = entries.filter { $0.range != "bytes=0-0" }.reduce(Int64(0)) { $0 + $1.bodyBytesSent }
            perServer.append(served)
            body += served
        }
        #expect(perServer.allSatisfy { $0 > 0 }, "each source served a part: \(perServer)")
        let twice = body - Int64(size)
        let bound = Int64(connections) * SegmentRequest.size
        #expect(twice >= 0)
        #expect(twice <= bound, "fetched twice: \(twice) bytes after one kill (bound \(bound)); per server \(perServer)")
    }
}

/// The most one segment request asks for (`SegmentWorker.requestSize`).
enum SegmentRequest {
    static let size: Int64 = 4 << 20
}

/// The sample size of the agreement rule (docs/MIRRORS.md), as the tests see it.
enum SourceSchedulerSample {
    static let size: Int64 = 64 << 10
}
