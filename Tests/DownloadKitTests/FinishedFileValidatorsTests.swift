@testable import DownloadKit
import CDownloadKitSystem
import Foundation
import Glibc
import Testing
import TestOrigin

/// The finished file's validators and URL in one extended attribute (`user.downloadkit.validators`,
/// issue #18), and the three attributes earlier versions wrote, still read.
@Suite struct FinishedFileValidatorsTests {
    func file(in dir: ScratchDirectory, _ name: String = "f") throws -> String {
        let path = dir.file(name)
        try Data("x".utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    func set(_ name: String, _ value: String, on path: String) throws {
        let fd = open(path, O_RDWR)
        try #require(fd >= 0)
        defer { close(fd) }
        let bytes = Array(value.utf8)
        try #require(bytes.withUnsafeBytes { dk_fsetxattr(fd, name, $0.baseAddress, $0.count) } == 0)
    }

    /// Which of the new attribute and the three old ones the file has.
    func attributeNames(_ path: String) -> [String] {
        [
            FinishedFileValidators.attribute, FinishedFileValidators.legacyEntityTagAttribute,
            FinishedFileValidators.legacyLastModifiedAttribute, FinishedFileValidators.legacyURLAttribute,
        ].filter { dk_lgetxattr(path, $0, nil, 0) >= 0 }
    }

    @Test func oneAttributeRoundTripsTheValidatorsAndTheURL() throws {
        let dir = try ScratchDirectory()
        let path = try file(in: dir)
        let fd = open(path, O_RDWR)
        try #require(fd >= 0)
        FinishedFileValidators.record(
            entityTag: "\"6b0a89d4-10000\"", lastModified: "Sat, 28 Nov 2026 07:59:16 GMT", url: "http://h/a.bin", fd: fd)
        close(fd)
        #expect(attributeNames(path) == [FinishedFileValidators.attribute])
        #expect(FinishedFileValidators.read(at: path) == ("\"6b0a89d4-10000\"", "Sat, 28 Nov 2026 07:59:16 GMT"))
        #expect(FinishedFileValidators.recordedURL(at: path) == "http://h/a.bin")
    }

    @Test(arguments: [
        (FinishedFileValidators.Values(entityTag: nil, lastModified: "Sat, 28 Nov 2026 07:59:16 GMT", url: "http://h/a"), "1\n\nSat, 28 Nov 2026 07:59:16 GMT\nhttp://h/a"),
        (FinishedFileValidators.Values(entityTag: "W/\"a b\"", lastModified: nil, url: "http://h/a"), "1\nW/\"a b\"\n\nhttp://h/a"),
        // A value with a line break would read as two fields: it is left out.
        (FinishedFileValidators.Values(entityTag: "\"a\"\nX-Evil: 1", lastModified: nil, url: "http://h/a"), "1\n\n\nhttp://h/a"),
    ])
    func absentFieldsAreEmptyLines(values: FinishedFileValidators.Values, text: String) throws {
        #expect(FinishedFileValidators.encode(values) == text)
        var expected = values
        if expected.entityTag?.contains("\n") == true { expected.entityTag = nil }
        #expect(FinishedFileValidators.decode(text) == expected)
    }

    @Test func filesFinishedByEarlierVersionsAreStillRead() throws {
        let dir = try ScratchDirectory()
        let path = try file(in: dir)
        try set(FinishedFileValidators.legacyEntityTagAttribute, "\"old\"", on: path)
        try set(FinishedFileValidators.legacyLastModifiedAttribute, "Mon, 02 Nov 2026 10:00:00 GMT", on: path)
        try set(FinishedFileValidators.legacyURLAttribute, "http://h/old.bin", on: path)
        #expect(FinishedFileValidators.read(at: path) == ("\"old\"", "Mon, 02 Nov 2026 10:00:00 GMT"))
        #expect(FinishedFileValidators.recordedURL(at: path) == "http://h/old.bin")
        // Once the new attribute is there, it is the one that counts.
        try set(FinishedFileValidators.attribute, "1\n\"new\"\n\nhttp://h/new.bin", on: path)
        #expect(FinishedFileValidators.read(at: path) == ("\"new\"", nil))
        #expect(FinishedFileValidators.recordedURL(at: path) == "http://h/new.bin")
    }

    /// A planted or damaged attribute gives no validators: nothing of it reaches a request header, and the
    /// old attributes beside it are not consulted either.
    @Test(arguments: [
        "2\n\"a\"\n\nhttp://h/a",  // another version
        "1\n\"a\"\nhttp://h/a",  // a field missing
        "1\n\"a\"\r\n\nhttp://h/a",  // a carriage return
        "1\n\"a\"\n\nhttp://h/a\n",  // a field too many
    ])
    func aMalformedAttributeGivesNoValidators(text: String) throws {
        let dir = try ScratchDirectory()
        let path = try file(in: dir)
        try set(FinishedFileValidators.attribute, text, on: path)
        try set(FinishedFileValidators.legacyEntityTagAttribute, "\"old\"", on: path)
        #expect(FinishedFileValidators.read(at: path) == (nil, nil))
        #expect(FinishedFileValidators.recordedURL(at: path) == nil)
    }

    @Test func anOldAttributeWithALineBreakIsRefused() throws {
        let dir = try ScratchDirectory()
        let path = try file(in: dir)
        try set(FinishedFileValidators.legacyEntityTagAttribute, "\"a\"\nX-Evil: 1", on: path)
        #expect(FinishedFileValidators.read(at: path) == (nil, nil))
    }

    @Test func aFinishedDownloadCarriesOneAttributeWithTheResponsesValidators() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 100_000
        origin.serve("/v.bin", .resource(Resource(size: size, seed: 17)))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/v.bin"), destination: .file(dir.file("v.bin"))))
        let done = try result.get()
        #expect(attributeNames(done.path) == [FinishedFileValidators.attribute])
        #expect(FinishedFileValidators.read(at: done.path).entityTag == Resource.derivedETag(seed: 17, size: size))
        #expect(FinishedFileValidators.recordedURL(at: done.path) == origin.url("/v.bin"))
    }

    /// The caller's `lstat` saw a regular file, but by the time the validators are read another user may
    /// have put a FIFO there: reading finds none at once instead of waiting for a writer.
    @Test func aFIFOInPlaceOfTheFileIsNotWaitedOn() throws {
        let dir = try ScratchDirectory()
        let path = dir.file("fifo")
        try #require(mkfifo(path, 0o600) == 0)
        let read = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = FinishedFileValidators.values(at: path)
            read.signal()
        }
        let waited = read.wait(timeout: .now() + 5) == .timedOut
        if waited {
            // Unblock the reader's open so the thread ends: a writer arrives.
            let writer = open(path, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
            read.wait()
        }
        #expect(!waited, "reading the validators waited on a FIFO")
    }
}
