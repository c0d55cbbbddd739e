import DownloadKit
import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// The single-connection engine against the fault-injecting origin: every resume path, redirects,
/// expiring URLs, integrity and disk-space rules (issue #3).
@Suite(.timeLimit(.minutes(2)))
struct EngineTests {
    let size: Int64 = 3 << 20

    @Test func freshDownloadIsByteIdenticalAndLeavesNothingBehind() async throws {
        let origin = try FaultOrigin()
        origin.serve("/f.bin", .resource(Resource(size: size, seed: 7)))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/f.bin"), destination: .file(dir.file("f.bin"))))
        let done = try result.get()
        #expect(done.bytes == size)
        #expect(done.resumedFrom == 0)
        #expect(done.isResumable)
        #expect(fileMatchesPattern(dir.file("f.bin"), size: size, seed: 7))
        #expect(dir.contents == ["f.bin"])
        #expect(reasons(events).contains(.started))
        #expect(origin.requests("/f.bin").first?.header("Range") == nil)
    }

    @Test func resetMidBodyIsRetriedFromTheReceivedOffsetWithIfRange() async throws {
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 3, faults: [.resetAfter(bytes: 1 << 20, times: 1)])
        origin.serve("/r", .resource(resource))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .file(dir.file("r"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("r"), size: size, seed: 3))
        let requests = origin.requests("/r")
        #expect(requests.count == 2)
        #expect(requests.last?.header("Range") == "bytes=1048576-")
        #expect(requests.last?.header("If-Range") == resource.etag)
        #expect(reasons(events).contains { if case .retrying = $0 { return true } else { return false } })
    }

    @Test func serverIgnoringTheRangeRestartsFromZeroInTheSameResponse() async throws {
        let origin = try FaultOrigin()
        origin.serve("/i", .resource(Resource(size: size, seed: 4, faults: [.closeAfter(bytes: 1 << 20, times: 1), .ignoreRanges])))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/i"), destination: .file(dir.file("i"))))
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("i"), size: size, seed: 4))
        #expect(done.resumedFrom == 0)
        #expect(origin.requests("/i").count == 2)
        #expect(reasons(events).contains(.restarted(.rangeIgnored)))
    }

    @Test func changedValidatorRestartsCleanlyWithTheNewContent() async throws {
        let origin = try FaultOrigin()
        origin.serve("/v", .resource(Resource(size: size, seed: 5, faults: [
            .closeAfter(bytes: 1 << 20, times: 1),
            .changeValidatorAfter(requests: 1, newSeed: 6, newETag: "\"v2\""),
        ])))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/v"), destination: .file(dir.file("v"))))
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("v"), size: size, seed: 6))
        #expect(reasons(events).contains(.restarted(.validatorChanged)))
        #expect(origin.requests("/v").last?.header("If-Range") == Resource.derivedETag(seed: 5, size: size))
    }

    @Test func fourSixteenWithEveryByteAlreadyPresentCompletesWithoutTransfer() async throws {
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 8)
        origin.serve("/c", .resource(resource))
        let dir = try ScratchDirectory()
        let destination = dir.file("c")
        try Data(TestPattern.bytes(offset: 0, count: Int(size), seed: 8)).write(to: URL(fileURLWithPath: destination + ".dkpart"))
        var info = ResumeInfo(originalURL: origin.url("/c"), tempFilePath: destination + ".dkpart", bytesReceived: size)
        info.entityTag = resource.etag
        info.totalLength = size
        try info.write(to: destination + ".dkresume")

        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/c"), destination: .file(destination)))
        let done = try result.get()
        #expect(done.bytesTransferred == 0)
        #expect(done.resumedFrom == size)
        #expect(origin.requests("/c").map { $0.header("Range") } == ["bytes=\(size)-"])
        #expect(fileMatchesPattern(destination, size: size, seed: 8))
        #expect(dir.contents == ["c"])
    }

    @Test func wrongContentRangeStartIsNeverWrittenAndThePartialIsKept() async throws {
        let origin = try FaultOrigin()
        origin.serve("/w", .resource(Resource(size: size, seed: 9, faults: [
            .closeAfter(bytes: 1 << 20, times: 1), .wrongContentRangeStart(delta: 100),
        ])))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/w"), destination: .file(dir.file("w"))), configuration: testConfiguration(retries: 1))
        guard case .failure(let error) = result else { Issue.record("expected a failure"); return }
        #expect(error.code == .contentRangeMismatch)
        #expect(dir.size("w.dkpart") == 1 << 20)
        #expect(!dir.contents.contains("w"))
        let info = try ResumeInfo.read(from: dir.file("w.dkresume"))
        #expect(info.bytesReceived == 1 << 20)
        let prefix = try #require(FileManager.default.contents(atPath: dir.file("w.dkpart")))
        #expect(prefix.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: 9) } == nil)
    }

    @Test func replacementURLContinuesThePartialFile() async throws {
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 10)
        var cut = resource
        cut.faults = [.closeAfter(bytes: 1 << 20, times: 1)]
        origin.serve("/signed-a", .resource(cut))
        origin.serve("/signed-b", .resource(resource))
        let dir = try ScratchDirectory()
        let destination = dir.file("s.bin")
        let (first, _) = await runDownload(
            DownloadRequest(url: origin.url("/signed-a"), destination: .file(destination)),
            configuration: testConfiguration(retries: 0))
        #expect(throws: DownloadError.self) { try first.get() }
        #expect(dir.size("s.bin.dkpart") == 1 << 20)

        let (second, events) = await runDownload(
            DownloadRequest(url: origin.url("/signed-a"), destination: .file(destination), replacementURL: origin.url("/signed-b")))
        let done = try second.get()
        #expect(done.resumedFrom == 1 << 20)
        #expect(origin.requests("/signed-b").map { $0.header("Range") } == ["bytes=1048576-"])
        #expect(fileMatchesPattern(destination, size: size, seed: 10))
        #expect(reasons(events).contains(.resumed(offset: 1 << 20)))
    }

    @Test func rerunWithADifferentURLForTheSameFileContinuesThePartial() async throws {
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 11)
        var cut = resource
        cut.faults = [.closeAfter(bytes: 1 << 20, times: 1)]
        origin.serve("/old", .resource(cut))
        origin.serve("/new", .resource(resource))
        let dir = try ScratchDirectory()
        let destination = dir.file("x.bin")
        _ = await runDownload(DownloadRequest(url: origin.url("/old"), destination: .file(destination)), configuration: testConfiguration(retries: 0))
        let (second, _) = await runDownload(DownloadRequest(url: origin.url("/new"), destination: .file(destination)))
        _ = try second.get()
        #expect(origin.requests("/new").map { $0.header("Range") } == ["bytes=1048576-"])
        #expect(fileMatchesPattern(destination, size: size, seed: 11))
    }

    @Test func urlProviderIsAskedOn403AndTheDownloadContinues() async throws {
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 12)
        var cut = resource
        cut.faults = [.closeAfter(bytes: 1 << 20, times: 1)]
        origin.serve("/expiring", .resource(cut))
        let fresh = origin.url("/fresh")
        origin.serve("/fresh", .resource(resource))
        let dir = try ScratchDirectory()
        let destination = dir.file("e.bin")
        _ = await runDownload(DownloadRequest(url: origin.url("/expiring"), destination: .file(destination)), configuration: testConfiguration(retries: 0))
        origin.serve("/expiring", .response(status: 403, headers: [("Content-Type", "text/plain")], body: Array("expired".utf8)))
        let asked = AskedCounter()
        let configuration = testConfiguration(urlProvider: { context in
            await asked.record(context)
            return fresh
        })
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/expiring"), destination: .file(destination)), configuration: configuration)
        _ = try result.get()
        let contexts = await asked.contexts
        #expect(contexts.map(\.status) == [403])
        #expect(contexts.first?.bytesReceived == 1 << 20)
        #expect(origin.requests("/fresh").map { $0.header("Range") } == ["bytes=1048576-"])
        #expect(fileMatchesPattern(destination, size: size, seed: 12))
        #expect(reasons(events).contains(.urlRefreshed(to: fresh)))
    }

    @Test func redirectsKeepIdentityAndCredentialsNeverCrossOrigins() async throws {
        let a = try FaultOrigin()
        let b = try FaultOrigin()
        b.serve("/file", .resource(Resource(size: 64 << 10, seed: 13)))
        a.serve("/start", .redirect(status: 302, location: "/same"))
        a.serve("/same", .redirect(status: 307, location: b.url("/file")))
        let dir = try ScratchDirectory()
        let request = DownloadRequest(
            url: a.url("/start"), destination: .file(dir.file("r.bin")),
            headers: ["Authorization": "Bearer secret", "Cookie": "session=1", "X-Trace": "t"])
        let (result, _) = await runDownload(request)
        let done = try result.get()
        #expect(done.finalURL == b.url("/file"))
        #expect(a.requests("/same").first?.header("Authorization") == "Bearer secret")
        let atB = try #require(b.requests("/file").first)
        #expect(atB.header("Authorization") == nil)
        #expect(atB.header("Cookie") == nil)
        #expect(atB.header("X-Trace") == "t")
        #expect(fileMatchesPattern(dir.file("r.bin"), size: 64 << 10, seed: 13))
    }

    @Test func redirectLoopsAndTooManyRedirectsFailWithTheirOwnErrors() async throws {
        let origin = try FaultOrigin()
        origin.serve("/a", .redirect(status: 302, location: "/b"))
        origin.serve("/b", .redirect(status: 301, location: "/a"))
        for i in 0..<4 { origin.serve("/chain\(i)", .redirect(status: 302, location: "/chain\(i + 1)")) }
        origin.serve("/chain4", .resource(Resource(size: 10, seed: 1)))
        origin.serve("/ftp", .redirect(status: 302, location: "ftp://127.0.0.1/file"))
        let dir = try ScratchDirectory()
        let (loop, _) = await runDownload(DownloadRequest(url: origin.url("/a"), destination: .file(dir.file("l"))))
        #expect(loop.error?.code == .redirectLoop)
        let (chain, _) = await runDownload(
            DownloadRequest(url: origin.url("/chain0"), destination: .file(dir.file("c"))), configuration: testConfiguration(maxRedirects: 3))
        #expect(chain.error?.code == .tooManyRedirects)
        let (allowed, _) = await runDownload(
            DownloadRequest(url: origin.url("/chain0"), destination: .file(dir.file("c"))), configuration: testConfiguration(maxRedirects: 4))
        #expect(allowed.error == nil)
        let (ftp, _) = await runDownload(DownloadRequest(url: origin.url("/ftp"), destination: .file(dir.file("f"))))
        #expect(ftp.error?.code == .insecureRedirect)
        #expect(dir.contents == ["c"])
    }

    @Test func checksumMismatchNeverYieldsAFinalFile() async throws {
        let origin = try FaultOrigin()
        origin.serve("/k", .resource(Resource(size: size, seed: 14)))
        let dir = try ScratchDirectory()
        let wrong = Checksum(algorithm: .sha256, expectedHex: String(repeating: "0", count: 64))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/k"), destination: .file(dir.file("k")), checksum: wrong))
        #expect(result.error?.code == .checksumMismatch)
        #expect(result.error?.detail.contains("checksum mismatch") == true)
        #expect(dir.contents.isEmpty)
    }

    @Test func checksumIsComputedOverTheResumedPrefixToo() async throws {
        let origin = try FaultOrigin()
        origin.serve("/p", .resource(Resource(size: size, seed: 15, faults: [.resetAfter(bytes: 1 << 20, times: 1)])))
        let bytes = TestPattern.bytes(offset: 0, count: Int(size), seed: 15)
        let expected = DKDigest.hex(DKDigest.hash(.sha256, bytes))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(DownloadRequest(
            url: origin.url("/p"), destination: .file(dir.file("p")), checksum: Checksum(algorithm: .sha256, expectedHex: expected)))
        #expect(try result.get().checksumHex == expected)
    }

    @Test func contentMD5MismatchFailsTheDownload() async throws {
        let origin = try FaultOrigin()
        origin.serve("/m", .resource(Resource(size: 4096, seed: 16, contentMD5: Base64.encode([UInt8](repeating: 1, count: 16)))))
        let good = Base64.encode(DKDigest.hash(.md5, TestPattern.bytes(offset: 0, count: 4096, seed: 16)))
        origin.serve("/ok", .resource(Resource(size: 4096, seed: 16, contentMD5: good)))
        let dir = try ScratchDirectory()
        let (bad, _) = await runDownload(DownloadRequest(url: origin.url("/m"), destination: .file(dir.file("m"))))
        #expect(bad.error?.code == .contentMD5Mismatch)
        let (ok, _) = await runDownload(DownloadRequest(url: origin.url("/ok"), destination: .file(dir.file("ok"))))
        #expect(ok.error == nil)
        #expect(dir.contents == ["ok"])
    }

    @Test func insufficientSpaceIsRefusedBeforeWritingAndNamesBothSizes() async throws {
        let origin = try FaultOrigin()
        origin.serve("/huge", .resource(Resource(size: 1 << 52, seed: 17)))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/huge"), destination: .file(dir.file("h"))))
        let error = try #require(result.error)
        #expect(error.code == .insufficientSpace)
        #expect(error.detail.contains("\(1 << 52) bytes needed"))
        #expect(error.detail.contains("available"))
        #expect(!dir.contents.contains("h"))
    }

    @Test func errorStatusBodiesAreNeverWrittenAndLeaveNothing() async throws {
        let origin = try FaultOrigin()
        origin.serve("/missing", .response(status: 404, headers: [("Content-Type", "text/html")], body: Array("<h1>not here</h1>".utf8)))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/missing"), destination: .file(dir.file("n"))))
        let error = try #require(result.error)
        #expect(error.code == .httpStatus)
        #expect(error.httpStatus == 404)
        #expect(!error.isTransient)
        #expect(dir.contents.isEmpty)
    }

    @Test func transientStatusesAreRetriedHonouringRetryAfter() async throws {
        let origin = try FaultOrigin()
        origin.serve("/busy", .resource(Resource(size: 8192, seed: 18, faults: [
            .statusForRequests(status: 503, first: 2, headers: [("Retry-After", "0")]),
        ])))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/busy"), destination: .file(dir.file("b"))))
        _ = try result.get()
        #expect(origin.requests("/busy").count == 3)
        #expect(reasons(events).filter { if case .retrying = $0 { return true } else { return false } }.count == 2)
    }

    @Test func pauseReturnsResumeDataThatContinuesWithoutRefetching() async throws {
        let origin = try FaultOrigin()
        // The response stalls after 1 MiB, so the pause lands mid-body however late the test sees
        // its events; served without the stall for the resumed run.
        let big: Int64 = 8 << 20
        origin.serve("/slow", .resource(Resource(size: big, seed: 19, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 10)])))
        let dir = try ScratchDirectory()
        let request = DownloadRequest(url: origin.url("/slow"), destination: .file(dir.file("slow")))
        let download = Download(request, configuration: testConfiguration())
        download.start()
        var resumeData: Data?
        for await event in download.events {
            if case .progress(let progress) = event, progress.bytesReceived >= 512 << 10, resumeData == nil {
                resumeData = await download.pause()
            }
        }
        let data = try #require(resumeData)
        #expect(download.state == .paused)
        let info = try ResumeInfo.decode(data)
        #expect(info.bytesReceived > 0)
        #expect(info.bytesReceived == dir.size("slow.dkpart"))
        #expect(!dir.contents.contains("slow"))

        origin.serve("/slow", .resource(Resource(size: big, seed: 19)))
        var resumed = request
        resumed.resumeData = data
        let (result, _) = await runDownload(resumed)
        let done = try result.get()
        #expect(done.resumedFrom == info.bytesReceived)
        #expect(done.bytesTransferred == big - info.bytesReceived)
        #expect(fileMatchesPattern(dir.file("slow"), size: big, seed: 19))
    }

    @Test func cancelRemovesPartialDataAndResumeInfo() async throws {
        let origin = try FaultOrigin()
        origin.serve("/slow", .resource(Resource(size: 8 << 20, seed: 20, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 10)])))
        let dir = try ScratchDirectory()
        let download = Download(DownloadRequest(url: origin.url("/slow"), destination: .file(dir.file("x"))), configuration: testConfiguration())
        download.start()
        for await event in download.events {
            if case .progress(let progress) = event, progress.bytesReceived > 0 {
                await download.cancel()
            }
        }
        #expect(download.state == .cancelled)
        #expect(dir.contents.isEmpty)
    }

    @Test func appleResumeDataContinuesFromItsTempFile() async throws {
        let origin = try FaultOrigin()
        origin.serve("/apple.bin", .resource(Resource(size: size, seed: 21)))
        let dir = try ScratchDirectory()
        let have = 1_000_000
        let appleTemp = dir.file("CFNetworkDownload_abc123.tmp")
        try Data(TestPattern.bytes(offset: 0, count: have, seed: 21)).write(to: URL(fileURLWithPath: appleTemp))
        let plist: [String: Any] = [
            "NSURLSessionDownloadURL": origin.url("/apple.bin"),
            "NSURLSessionResumeBytesReceived": have,
            "NSURLSessionResumeInfoLocalPath": appleTemp,
            "NSURLSessionResumeInfoVersion": 1,
            "NSURLSessionResumeEntityTag": Resource.derivedETag(seed: 21, size: size),
        ]
        let data = try PropertyListSerialization.data(fromPropertyList: plist, format: .xml, options: 0)
        let (result, _) = await runDownload(DownloadRequest(
            url: origin.url("/apple.bin"), destination: .file(dir.file("apple.bin")), resumeData: data))
        let done = try result.get()
        #expect(done.resumedFrom == Int64(have))
        #expect(origin.requests("/apple.bin").map { $0.header("Range") } == ["bytes=\(have)-"])
        #expect(origin.requests("/apple.bin").map { $0.header("If-Range") } == [Resource.derivedETag(seed: 21, size: size)])
        #expect(fileMatchesPattern(dir.file("apple.bin"), size: size, seed: 21))
    }

    @Test func directoryDestinationsUseASanitisedContentDispositionName() async throws {
        let origin = try FaultOrigin()
        origin.serve("/dl?id=1", .resource(Resource(size: 1000, seed: 22, contentDisposition: "attachment; filename=\"../../etc/passwd\"")))
        origin.serve("/report.pdf", .resource(Resource(size: 1000, seed: 23, contentDisposition: "attachment; filename*=UTF-8''%e2%82%ac%20rates.txt")))
        let dir = try ScratchDirectory()
        let (hostile, _) = await runDownload(DownloadRequest(url: origin.url("/dl?id=1"), destination: .directory(dir.path, naming: .fromResponse)))
        let hostilePath = try hostile.get().path
        #expect(hostilePath == dir.file("passwd"))
        let (unicode, _) = await runDownload(DownloadRequest(url: origin.url("/report.pdf"), destination: .directory(dir.path, naming: .fromResponse)))
        #expect(try unicode.get().path == dir.file("€ rates.txt"))
        #expect(dir.contents == ["passwd", "€ rates.txt"])
    }

    @Test func serverWithoutRangesOrValidatorsIsReportedNotResumable() async throws {
        let origin = try FaultOrigin()
        origin.serve("/plain", .resource(Resource(size: 5000, seed: 24, etag: nil, lastModified: nil, acceptRanges: false, honorsRanges: false)))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/plain"), destination: .file(dir.file("p"))))
        #expect(try result.get().isResumable == false)
        #expect(reasons(events).contains(.notResumable))
    }
}

actor AskedCounter {
    var contexts: [URLRefreshContext] = []
    func record(_ context: URLRefreshContext) { contexts.append(context) }
}

extension Result where Failure == DownloadError {
    var error: DownloadError? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
