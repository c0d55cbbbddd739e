import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// Regression tests for the single-connection parts of issue #13 (defects 1, 3, 4 and 10), against the
/// fault origin. Each failed on the engine before its fix (the failure named in its comment).
@Suite(.timeLimit(.minutes(2)))
struct SingleConnectionDefectTests {
    static let mib: Int64 = 1 << 20

    /// Leaves a partial of the first MiB and its resume info in `dir` (a reset after 1 MiB, no retries).
    func leavePartial(_ origin: FaultOrigin, _ path: String, _ resource: Resource, in dir: ScratchDirectory) async throws {
        var interrupted = resource
        interrupted.faults = [.resetAfter(bytes: Self.mib, times: 1)]
        origin.serve(path, .resource(interrupted))
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url(path), destination: .file(dir.file("f"))),
            configuration: testConfiguration(retries: 0))
        #expect(throws: DownloadError.self) { try result.get() }
        #expect(dir.size("f.dkpart") == Self.mib)
        #expect(FileManager.default.fileExists(atPath: dir.file("f.dkresume")))
    }

    /// Defect 1: a weak ETag never compares strongly, so every resume restarted from 0 although
    /// If-Range carried Last-Modified and the server answered 206 (before: `.restarted(.validatorChanged)`
    /// and a third request for the whole file).
    @Test func aWeakETagResumesValidatedByLastModified() async throws {
        let origin = try FaultOrigin()
        let size = 4 * Self.mib
        origin.serve("/weak", .resource(Resource(size: size, seed: 91, etag: "W/\"v1\"", faults: [.resetAfter(bytes: Self.mib, times: 1)])))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(
            DownloadRequest(url: origin.url("/weak"), destination: .file(dir.file("f"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("f"), size: size, seed: 91))
        #expect(!reasons(events).contains { if case .restarted = $0 { true } else { false } }, "\(reasons(events))")
        let requests = origin.requests("/weak")
        #expect(requests.count == 2)
        #expect(requests.last?.header("Range") == "bytes=\(Self.mib)-")
        #expect(requests.last?.header("If-Range") == Resource.defaultLastModified)
    }

    /// Defect 3: a partial with no resume info was trusted by its length and resumed with a bare
    /// `Range` — another version's bytes spliced into the file (before: a wrong file reported complete).
    @Test func aPartialWithoutResumeInfoIsNotSplicedIntoANewVersion() async throws {
        let origin = try FaultOrigin()
        let size = 4 * Self.mib
        let dir = try ScratchDirectory()
        // The first MiB of an older version (another seed), with no record to prove anything.
        try Data(TestPattern.bytes(offset: 0, count: Int(Self.mib), seed: 1)).write(to: URL(fileURLWithPath: dir.file("f.dkpart")))
        origin.serve("/v2", .resource(Resource(size: size, seed: 92)))
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/v2"), destination: .file(dir.file("f"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("f"), size: size, seed: 92))
        #expect(origin.requests("/v2").first?.header("Range") == nil)
        #expect(reasons(events).contains(.restarted(.unusablePartialData)), "\(reasons(events))")
    }

    /// Defect 3, the record variant: resume info from a server that sent no validator cannot prove the
    /// partial either (before: `Range` without `If-Range`, a wrong file).
    @Test func aRecordWithoutAValidatorDoesNotResume() async throws {
        let origin = try FaultOrigin()
        let size = 4 * Self.mib
        let dir = try ScratchDirectory()
        try await leavePartial(origin, "/nv", Resource(size: size, seed: 93, etag: nil, lastModified: nil), in: dir)
        // The resource changes meanwhile; the server still names no validator.
        origin.serve("/nv", .resource(Resource(size: size, seed: 94, etag: nil, lastModified: nil)))
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/nv"), destination: .file(dir.file("f"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("f"), size: size, seed: 94))
        #expect(origin.requests("/nv").last?.header("Range") == nil)
        #expect(reasons(events).contains(.restarted(.unusablePartialData)), "\(reasons(events))")
    }

    /// Defect 4: a 206 with an empty body was asked for again at once, forever (before: the test hit its
    /// time limit). Now each empty answer is a transient failure with backoff, bounded by `retries`.
    @Test func anEmpty206EndsInATypedErrorAndKeepsThePartial() async throws {
        let origin = try FaultOrigin()
        let size = 4 * Self.mib
        let dir = try ScratchDirectory()
        try await leavePartial(origin, "/e", Resource(size: size, seed: 95), in: dir)
        origin.serve("/e", .script { request, connection in
            connection.keepsAlive = true
            try connection.write(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(Self.mib)-\(size - 1)/\(size)\r\n"
                    + "Content-Length: 0\r\nETag: \(Resource.derivedETag(seed: 95, size: size))\r\n"
                    + "Last-Modified: \(Resource.defaultLastModified)\r\n\r\n")
        })
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/e"), destination: .file(dir.file("f"))), configuration: testConfiguration(retries: 2))
        let error = try #require(throws: DownloadError.self) { try result.get() }
        #expect(error.code == .contentRangeMismatch, "\(error)")
        // The interrupted first run made one request; then one attempt and two retries.
        #expect(origin.requests("/e").count == 1 + 3)
        #expect(dir.size("f.dkpart") == Self.mib)
    }

    /// Defect 10: a 206 whose body is longer than its Content-Range wrote the extra bytes into the file
    /// as if they were the next ones (before: a wrong file reported complete).
    @Test func a206BodyLongerThanItsContentRangeIsRefused() async throws {
        let origin = try FaultOrigin()
        let size = 4 * Self.mib
        let dir = try ScratchDirectory()
        try await leavePartial(origin, "/l", Resource(size: size, seed: 96), in: dir)
        let answered = LockedValue(0)
        origin.serve("/l", .script { request, connection in
            connection.keepsAlive = true
            let first = answered.withLock { count in count += 1; return count } == 1
            let tag = Resource.derivedETag(seed: 96, size: size)
            if first {
                // Claims 1,000 bytes, sends 2,000: the last 1,000 are not the file's.
                try connection.write(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(Self.mib)-\(Self.mib + 999)/\(size)\r\n"
                        + "Content-Length: 2000\r\nETag: \(tag)\r\n\r\n")
                try connection.writePattern(offset: Self.mib, count: 1000, seed: 96)
                try connection.write([UInt8](repeating: 0xFF, count: 1000))
            } else {
                let start = Int64(request.header("Range")!.dropFirst(6).dropLast())!
                try connection.write(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(start)-\(size - 1)/\(size)\r\n"
                        + "Content-Length: \(size - start)\r\nETag: \(tag)\r\n\r\n")
                try connection.writePattern(offset: start, count: size - start, seed: 96)
            }
        })
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/l"), destination: .file(dir.file("f"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("f"), size: size, seed: 96))
    }

    /// Defect 10: a 416 whose `*/length` does not match the partial discarded a valid partial (before:
    /// `.restarted(.partialLongerThanResource)` and the whole file fetched again). A 416 for a range the
    /// length says is satisfiable is the server's mistake: retried, the partial kept.
    @Test func a416ThatContradictsItsOwnLengthKeepsThePartial() async throws {
        let origin = try FaultOrigin()
        let size = 4 * Self.mib
        let dir = try ScratchDirectory()
        try await leavePartial(origin, "/r", Resource(size: size, seed: 97), in: dir)
        var resource = Resource(size: size, seed: 97)
        resource.faults = [.statusForRequests(status: 416, first: 1, headers: [("Content-Range", "bytes */\(size)")])]
        origin.serve("/r", .resource(resource))
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .file(dir.file("f"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("f"), size: size, seed: 97))
        #expect(!reasons(events).contains { if case .restarted = $0 { true } else { false } }, "\(reasons(events))")
        #expect(origin.requests("/r").dropFirst().allSatisfy { $0.header("Range") == "bytes=\(Self.mib)-" })
    }

    /// Defect 10: validators with a tab (legal inside a field value) made every download from that
    /// server fail.
    @Test func validatorsWithATabDoNotBreakDownloads() async throws {
        let origin = try FaultOrigin()
        let size = 2 * Self.mib
        let dir = try ScratchDirectory()
        let resource = Resource(
            size: size, seed: 98, etag: "\"a\tb\"", lastModified: "Mon, 01 Jan 2024\t00:00:00 GMT",
            faults: [.resetAfter(bytes: Self.mib, times: 1)])
        origin.serve("/tab", .resource(resource))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/tab"), destination: .file(dir.file("f"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("f"), size: size, seed: 98))
    }

    /// Defect 1, on one connection: a server whose ETag changes on every request and whose connection
    /// drops mid-body. Each resume meets a new version and restarts; before the bound only the retry
    /// count (here 50) ended it, one full restart per retry. Now restarts are counted across the run
    /// (`RestartPolicy`, shared with segments): a typed error after five, whatever `retries` says.
    @Test func aValidatorThatChangesOnEveryRequestEndsInAnErrorOnOneConnection() async throws {
        let size = 2 * Self.mib
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve(
            "/flip",
            .script { request, connection in
                try connection.write(
                    "HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\nETag: \"v\(request.sequenceNumber)\"\r\n"
                        + "Last-Modified: \(Resource.defaultLastModified)\r\nAccept-Ranges: bytes\r\n\r\n")
                try connection.writePattern(offset: 0, count: size / 4, seed: 99)
                connection.reset()
            })
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(
            DownloadRequest(url: origin.url("/flip"), destination: .file(dir.file("f"))), configuration: testConfiguration(retries: 50))
        let error = try #require(result.error)
        #expect(error.code == .serverIgnoredRange, "\(error)")
        let restarts = reasons(events).filter { if case .restarted = $0 { true } else { false } }.count
        #expect(restarts == 5, "\(reasons(events))")
        #expect(origin.requests("/flip").count == 7)
        #expect(!FileManager.default.fileExists(atPath: dir.file("f")))
    }
}
