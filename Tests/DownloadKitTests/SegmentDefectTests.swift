import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// Regression tests for the segment parts of issue #13 (defects 1, 4 and 8), against the fault origin.
@Suite(.timeLimit(.minutes(2)))
struct SegmentDefectTests {

    func configuration(connections: Int = 2, minimumSegment: Int64 = 256 << 10, retries: Int = 3) -> DownloadConfiguration {
        var configuration = testConfiguration(retries: retries)
        configuration.connections = connections
        configuration.minimumSegmentSize = minimumSegment
        return configuration
    }

    /// What a scripted range origin does with one request.
    enum Answer {
        case serve
        case status(Int)
        case empty206
    }

    /// A range-capable origin for a pattern body whose answers the test decides per request (the probe,
    /// `bytes=0-0`, is always served).
    static func rangeScript(
        size: Int64, seed: UInt64, etag: @escaping @Sendable (RecordedRequest) -> String = { _ in "" },
        answer: @escaping @Sendable (RecordedRequest, Int64, Int64) -> Answer
    ) -> Route {
        .script { request, connection in
            connection.keepsAlive = true
            var first: Int64 = 0
            var last = size - 1
            if let range = request.header("Range"), range.hasPrefix("bytes=") {
                let parts = range.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
                first = Int64(parts[0]) ?? 0
                last = parts.count > 1 ? Int64(parts[1]) ?? size - 1 : size - 1
            }
            let tag = etag(request)
            let validators =
                (tag.isEmpty ? "ETag: \(Resource.derivedETag(seed: seed, size: size))" : "ETag: \(tag)")
                + "\r\nLast-Modified: \(Resource.defaultLastModified)\r\nAccept-Ranges: bytes\r\n"
            let decision: Answer = first == 0 && last == 0 ? .serve : answer(request, first, last)
            switch decision {
            case .serve:
                try connection.write(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(first)-\(last)/\(size)\r\n"
                        + "Content-Length: \(last - first + 1)\r\n\(validators)\r\n")
                try connection.writePattern(offset: first, count: last - first + 1, seed: seed)
            case .empty206:
                try connection.write(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(first)-\(last)/\(size)\r\n"
                        + "Content-Length: 0\r\n\(validators)\r\n")
            case .status(let status):
                try connection.write("HTTP/1.1 \(status) Nope\r\nContent-Length: 4\r\n\r\nnope")
            }
        }
    }

    // MARK: Defect 1: weak ETags

    @Test func weakETagWithSeveralConnectionsCompletesWithoutARestartLoop() async throws {
        let size: Int64 = 4 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/weak", .resource(Resource(size: size, seed: 81, etag: "W/\"v1\"")))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(
            DownloadRequest(url: origin.url("/weak"), destination: .file(dir.file("w"))), configuration: configuration())
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("w"), size: size, seed: 81))
        #expect(reasons(events).contains(.segmented(connections: 2)))
        #expect(!reasons(events).contains { if case .restarted = $0 { true } else { false } })
        // Segments used Last-Modified as If-Range: a weak ETag is never sent there.
        for request in origin.requests("/weak").dropFirst() {
            #expect(request.header("If-Range") == Resource.defaultLastModified)
        }
    }

    @Test func aWeakETagWithoutLastModifiedStaysOnOneConnection() async throws {
        let size: Int64 = 4 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/weakonly", .resource(Resource(size: size, seed: 82, etag: "W/\"v1\"", lastModified: nil)))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(
            DownloadRequest(url: origin.url("/weakonly"), destination: .file(dir.file("w"))), configuration: configuration())
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("w"), size: size, seed: 82))
        #expect(reasons(events).contains { if case .singleConnection(let why) = $0 { why.contains("weak ETag") } else { false } })
    }

    @Test func aValidatorThatChangesOnEveryRequestEndsInAnErrorNotALoop() async throws {
        let size: Int64 = 2 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve(
            "/flip",
            Self.rangeScript(size: size, seed: 83, etag: { "\"v\($0.sequenceNumber)\"" }, answer: { _, _, _ in .serve }))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(
            DownloadRequest(url: origin.url("/flip"), destination: .file(dir.file("f"))), configuration: configuration())
        let error = try #require(result.error)
        #expect(error.detail.contains("changed"), "\(error.detail)")
        let restarts = reasons(events).filter { if case .restarted = $0 { true } else { false } }.count
        #expect(restarts >= 1 && restarts <= 6, "bounded restarts: \(restarts)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("f")))
    }

    // MARK: Defect 4: no-progress loops

    @Test func anEmpty206ForASegmentIsRetriedABoundedNumberOfTimesThenFails() async throws {
        let size: Int64 = 2 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/empty", Self.rangeScript(size: size, seed: 84, answer: { _, _, _ in .empty206 }))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/empty"), destination: .file(dir.file("e"))),
            configuration: configuration(retries: 2))
        let error = try #require(result.error)
        // The 206's Content-Length (0) contradicts its Content-Range: refused before a byte is written,
        // by the same rule as on one connection (RangeResponsePolicy).
        #expect(error.code == .contentRangeMismatch, "\(error)")
        #expect(origin.requests("/empty").count < 60, "bounded: \(origin.requests("/empty").count) requests")
        #expect(!FileManager.default.fileExists(atPath: dir.file("e")))
    }

    @Test func segmentWorkersHonourTheLowSpeedLimit() async throws {
        let size: Int64 = 512 << 10
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        // 32 KiB/s per response: each 256 KiB segment would take 8 s; the limit says 1 MiB/s over 0.3 s.
        origin.serve("/slow", .resource(Resource(size: size, seed: 85, bytesPerSecond: 32 << 10)))
        let dir = try ScratchDirectory()
        var slow = configuration(minimumSegment: 64 << 10, retries: 1)
        slow.lowSpeedLimit = 1 << 20
        slow.lowSpeedTime = .milliseconds(300)
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/slow"), destination: .file(dir.file("s"))), configuration: slow)
        #expect(result.error?.code == .tooSlow, "\(String(describing: result.error))")
    }

    // MARK: Defect 8: URL provider, and partial data kept

    @Test func segmentRequestsThatGet403AskTheURLProviderAndContinue() async throws {
        let size: Int64 = 4 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/old", Self.rangeScript(size: size, seed: 86, answer: { _, _, _ in .status(403) }))
        origin.serve("/new", .resource(Resource(size: size, seed: 86)))
        let asked = LockedValue(0)
        let fresh = origin.url("/new")
        var configuration = configuration()
        configuration.urlProvider = { _ in
            asked.withLock { $0 += 1 }
            return fresh
        }
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(
            DownloadRequest(url: origin.url("/old"), destination: .file(dir.file("u"))), configuration: configuration)
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("u"), size: size, seed: 86))
        #expect(asked.withLock { $0 } == 1)
        #expect(reasons(events).contains(.urlRefreshed(to: fresh)))
        #expect(done.finalURL == fresh)
    }

    @Test func aFailureWhenSegmentZeroHasNoBytesKeepsTheOtherSegmentsData() async throws {
        let size: Int64 = 2 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let thiefArrived = LockedValue(false)
        // Segment 0 ([0, 1 MiB)) is answered only after the other worker finished segment 1 and came to
        // steal half of segment 0 — then both get a 403. Segment 1's bytes are on disk by then.
        origin.serve(
            "/keep",
            Self.rangeScript(size: size, seed: 87) { _, first, _ in
                if first >= size / 2 { return .serve }
                if first > 0 {
                    thiefArrived.withLock { $0 = true }
                    return .status(403)
                }
                for _ in 0..<2000 where !thiefArrived.withLock({ $0 }) { usleep(5000) }
                return .status(403)
            })
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/keep"), destination: .file(dir.file("k"))), configuration: configuration())
        #expect(result.error?.httpStatus == 403)
        #expect(thiefArrived.withLock { $0 })
        #expect(FileManager.default.fileExists(atPath: dir.file("k.dkpart")), "\(dir.contents)")
        let info = try ResumeInfo.read(from: dir.file("k.dkresume"))
        let written = info.segments.reduce(0) { $0 + $1.written }
        #expect(written >= size / 2, "segment 1's bytes are kept: \(info.segments)")
    }
}
