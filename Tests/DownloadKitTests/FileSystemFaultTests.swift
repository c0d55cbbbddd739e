import DownloadKit
import Foundation
import Glibc
import HTTPClient
import Testing
import TestOrigin

/// The engine when the file system misbehaves or the files beside the destination were tampered with
/// between runs (issue #8). Rule: a typed error with every durable byte kept, or the correct file;
/// never a wrong file under the destination name.
@Suite(.timeLimit(.minutes(3)))
struct FileSystemFaultTests {
    let size: Int64 = 2 << 20

    /// Leaves a partial download of `path` at `destination`: the first 1 MiB, cut by the server.
    func leavePartial(origin: FaultOrigin, path: String, seed: UInt64, destination: String) async throws {
        origin.serve(path, .resource(Resource(size: size, seed: seed, faults: [.closeAfter(bytes: 1 << 20, times: 1)])))
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url(path), destination: .file(destination)),
            configuration: testConfiguration(retries: 0))
        guard case .failure(let error) = result else {
            Issue.record("the cut download should fail")
            return
        }
        #expect(error.code == .truncated)
        #expect(FileManager.default.fileExists(atPath: destination + ".dkpart"))
        #expect(FileManager.default.fileExists(atPath: destination + ".dkresume"))
        origin.serve(path, .resource(Resource(size: size, seed: seed)))
    }

    /// Expected: the destination's parent is a regular file, so nothing can be created beside it
    /// (ENOTDIR, also for root, unlike permission bits): `fileSystem`, and nothing is created.
    @Test func destinationBelowARegularFileIsAFileSystemError() async throws {
        let origin = try FaultOrigin()
        origin.serve("/f", .resource(Resource(size: 4096, seed: 1)))
        let dir = try ScratchDirectory()
        try Data("not a directory".utf8).write(to: URL(fileURLWithPath: dir.file("plain")))
        let destination = dir.file("plain") + "/sub/f.bin"
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/f"), destination: .file(destination)))
        guard case .failure(let error) = result else {
            Issue.record("expected a file-system error")
            return
        }
        #expect(error.code == .fileSystem, "\(error.code): \(error.detail)")
        #expect(dir.contents == ["plain"])
        #expect(origin.requests("/f").isEmpty, "requested although nothing could be written")
    }

    /// Expected: the disk fills up mid-download of a resource of unknown length (chunked, so the
    /// up-front space check cannot catch it): `diskFull`; the temp file's bytes are the resource's
    /// prefix and the resume info claims no more than it holds; after space is freed, a rerun resumes
    /// and produces the exact file. Needs root and tmpfs (fails otherwise: CI runs as root).
    @Test func diskFullMidDownloadKeepsDurableBytesAndResumesAfterSpaceIsFreed() async throws {
        let scratch = try ScratchDirectory()
        let mountPoint = scratch.file("small")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let mount = try ProcessRunner.run("/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mountPoint])
        // CI runs as root (Scripts/test.sh); a missing precondition is a failure, not a silent pass.
        // The same ENOSPC without root: IOFailureTests (faultfs shim) fails every file operation in turn.
        try #require(mount.succeeded, "cannot mount a 4 MiB tmpfs (needs root, as in CI): \(mount.output)")
        defer { _ = try? ProcessRunner.run("/bin/umount", ["-l", mountPoint]) }

        let total: Int64 = 8 << 20
        let origin = try FaultOrigin()
        origin.serve("/big", .resource(Resource(size: total, seed: 21, chunked: true)))
        let destination = mountPoint + "/big.bin"
        let (first, _) = await runDownload(
            DownloadRequest(url: origin.url("/big"), destination: .file(destination)),
            configuration: testConfiguration(retries: 2))
        guard case .failure(let error) = first else {
            Issue.record("8 MiB fitted on a 4 MiB tmpfs")
            return
        }
        #expect(error.code == .diskFull, "\(error.code): \(error.detail)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        let partial = try #require(FileManager.default.contents(atPath: destination + ".dkpart"))
        #expect(partial.count > 0 && Int64(partial.count) < total)
        #expect(partial.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: 21) } == nil)
        if let info = try? ResumeInfo.read(from: destination + ".dkresume") {
            #expect(info.bytesReceived <= Int64(partial.count), "the resume info claims bytes that are not there")
        }

        let grow = try ProcessRunner.run("/bin/mount", ["-o", "remount,size=32m", mountPoint])
        try #require(grow.succeeded, "remount: \(grow.output)")
        let (second, _) = await runDownload(
            DownloadRequest(url: origin.url("/big"), destination: .file(destination)),
            configuration: testConfiguration(retries: 2))
        let done = try second.get()
        #expect(done.bytes == total)
        #expect(done.resumedFrom > 0, "the kept bytes were not used")
        #expect(fileMatchesPattern(destination, size: total, seed: 21))
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: mountPoint)) ?? []) == ["big.bin"])
    }

    /// Expected: the resume info says 1 MiB but the temp file was truncated to 100 KiB between runs:
    /// the rerun continues from what is really there (or restarts) and the file is exact.
    @Test func truncatedTempFileIsNeverTrustedBeyondItsLength() async throws {
        let origin = try FaultOrigin()
        let dir = try ScratchDirectory()
        let destination = dir.file("t.bin")
        try await leavePartial(origin: origin, path: "/t", seed: 22, destination: destination)
        #expect(truncate(destination + ".dkpart", 100 << 10) == 0)
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/t"), destination: .file(destination)))
        let done = try result.get()
        #expect(done.resumedFrom <= 100 << 10)
        #expect(fileMatchesPattern(destination, size: size, seed: 22))
        #expect(dir.contents == ["t.bin"])
    }

    /// Expected: the temp file was deleted between runs while the resume info remains: a safe restart
    /// from zero and the exact file.
    @Test func deletedTempFileRestartsSafely() async throws {
        let origin = try FaultOrigin()
        let dir = try ScratchDirectory()
        let destination = dir.file("d.bin")
        try await leavePartial(origin: origin, path: "/d", seed: 23, destination: destination)
        try FileManager.default.removeItem(atPath: destination + ".dkpart")
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/d"), destination: .file(destination)))
        let done = try result.get()
        #expect(done.resumedFrom == 0)
        #expect(fileMatchesPattern(destination, size: size, seed: 23))
        #expect(dir.contents == ["d.bin"])
    }

    /// Expected: a corrupt resume info (random bytes, or a truncated plist) is not trusted: the rerun
    /// restarts or continues from the temp file's real bytes, and the file is exact.
    @Test(arguments: ["random", "truncated", "empty"])
    func corruptResumeInfoNeverYieldsAWrongFile(corruption: String) async throws {
        let origin = try FaultOrigin()
        let dir = try ScratchDirectory()
        let destination = dir.file("p.bin")
        try await leavePartial(origin: origin, path: "/p", seed: 24, destination: destination)
        let infoPath = destination + ".dkresume"
        let original = try Data(contentsOf: URL(fileURLWithPath: infoPath))
        let corrupted: Data
        switch corruption {
        case "random": corrupted = Data((0..<original.count).map { _ in UInt8.random(in: 0...255) })
        case "truncated": corrupted = original.prefix(original.count / 2)
        default: corrupted = Data()
        }
        try corrupted.write(to: URL(fileURLWithPath: infoPath))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/p"), destination: .file(destination)))
        let done = try result.get()
        #expect(fileMatchesPattern(destination, size: size, seed: 24))
        #expect(done.bytes == size)
        #expect(dir.contents == ["p.bin"])
    }

    /// Expected: the partial data and resume info belong to another URL with other content; a download
    /// of this URL to the same destination must not splice the two: the validator recorded for the old
    /// content fails If-Range, the server sends the whole new body, and the file is the new content.
    @Test func resumeInfoFromAnotherURLIsNotSpliced() async throws {
        let origin = try FaultOrigin()
        let dir = try ScratchDirectory()
        let destination = dir.file("u.bin")
        try await leavePartial(origin: origin, path: "/old", seed: 25, destination: destination)
        origin.serve("/new", .resource(Resource(size: size, seed: 26)))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/new"), destination: .file(destination)))
        _ = try result.get()
        #expect(fileMatchesPattern(destination, size: size, seed: 26))
        #expect(dir.contents == ["u.bin"])
    }

    /// Expected: resume info rewritten to claim a different total and a foreign validator (as if
    /// another download's plist were copied in): the rerun must not trust the old bytes for the new
    /// validator; the result is the exact file.
    @Test func resumeInfoWithForeignValidatorRestarts() async throws {
        let origin = try FaultOrigin()
        let dir = try ScratchDirectory()
        let destination = dir.file("x.bin")
        try await leavePartial(origin: origin, path: "/x", seed: 27, destination: destination)
        var info = try ResumeInfo.read(from: destination + ".dkresume")
        info.entityTag = "\"someone-else\""
        info.totalLength = size * 2
        try info.write(to: destination + ".dkresume")
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/x"), destination: .file(destination)))
        _ = try result.get()
        #expect(fileMatchesPattern(destination, size: size, seed: 27))
        #expect(dir.contents == ["x.bin"])
    }
}
