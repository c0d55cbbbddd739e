import Foundation
import Glibc
import HTTPClient
import Testing
import TestOrigin

@testable import DownloadKit

/// An existing destination through ``Download`` (``ExistingFilePolicy``), the machine's answers performed
/// against a real origin: `--no-clobber` keeps the file with no request and no working file; `--if-modified`
/// asks with the validators recorded on the file, and a `304` keeps it with nothing left beside it.
/// The machine's side is MachineExistingDestinationTests.
@Suite(.timeLimit(.minutes(1)))
struct ExistingDestinationTests {
    static let etag = "\"v1\""
    static let date = "Mon, 01 Jan 2024 00:00:00 GMT"

    @Test func noClobberKeepsTheFileWithoutARequestOrAWorkingFile() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/f", .resource(Resource(size: 4096, seed: 461)))
        let dir = try ScratchDirectory()
        try Data("ours".utf8).write(to: URL(fileURLWithPath: dir.file("f.bin")))
        var request = DownloadRequest(url: origin.url("/f"), destination: .file(dir.file("f.bin")))
        request.existingFile = .keep
        let (result, events) = await runDownload(request)
        let kept = try result.get()
        #expect(kept.keptExistingFile && kept.bytes == 4 && kept.bytesTransferred == 0)
        #expect(reasons(events) == [.keptExistingFile])
        #expect(origin.requests("/f").isEmpty)
        #expect(dir.contents == ["f.bin"])
    }

    /// The request is checked before its destination is looked at (the machine that decides is made from
    /// it): an invalid one fails with the error naming its cause even when `--no-clobber` would keep the file.
    @Test func anInvalidRequestFailsEvenWhenTheFileWouldBeKept() async throws {
        let dir = try ScratchDirectory()
        try Data("ours".utf8).write(to: URL(fileURLWithPath: dir.file("f.bin")))
        var request = DownloadRequest(url: "http://origin.test/f", destination: .file(dir.file("f.bin")))
        request.mirrors = ["ftp://mirror.test/f"]
        request.existingFile = .keep
        let (result, _) = await runDownload(request)
        guard case .failure(let error) = result else {
            Issue.record("an invalid request kept the file: \(result)")
            return
        }
        #expect(error.code == .invalidURL && error.detail.contains("mirror URL 1"), "\(error)")
        #expect(dir.contents == ["f.bin"])
    }

    @Test func ifModifiedAsksWithTheRecordedValidatorsAndA304KeepsTheFile() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/k", .response(status: 304, headers: [], body: []))
        let dir = try ScratchDirectory()
        let path = dir.file("k.bin")
        try Data("ours".utf8).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        FinishedFileValidators.record(entityTag: Self.etag, lastModified: Self.date, url: origin.url("/k"), fd: fd)
        close(fd)
        var request = DownloadRequest(url: origin.url("/k"), destination: .file(path))
        request.existingFile = .keepIfNotModified
        let (result, events) = await runDownload(request)
        let kept = try result.get()
        #expect(kept.keptExistingFile && kept.bytes == 4)
        #expect(reasons(events).last == .keptExistingFile)
        let asked = origin.requests("/k")
        #expect(asked.count == 1)
        #expect(asked.first?.header("If-None-Match") == Self.etag)
        #expect(asked.first?.header("If-Modified-Since") == Self.date)
        #expect(dir.contents == ["k.bin"])
    }
}
