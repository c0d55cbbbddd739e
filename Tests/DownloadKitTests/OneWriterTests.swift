import DownloadKit
import Foundation
import Glibc
import Testing
import TestOrigin

/// One destination, one writer (issue #13: behaviour, defects 2 and 5): the partial is locked from
/// prepare to the final rename, and paths from resume records never reach files outside the
/// working directory.
@Suite(.timeLimit(.minutes(2)))
struct OneWriterTests {
    /// Starts a download that stalls after 1 MiB and returns once bytes are on disk.
    func startStalledDownload(_ origin: FaultOrigin, _ dir: ScratchDirectory, name: String) async -> Download {
        origin.serve("/" + name, .resource(Resource(size: 8 << 20, seed: 41, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 10)])))
        let download = Download(
            DownloadRequest(url: origin.url("/" + name), destination: .file(dir.file(name))), configuration: testConfiguration())
        download.start()
        for await event in download.events {
            if case .progress(let progress) = event, progress.bytesReceived > 0 { break }
        }
        return download
    }

    @Test func twoDownloadsInOneProcessOnOneDestinationTheSecondIsRefused() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        let first = await startStalledDownload(origin, dir, name: "one.bin")
        let before = dir.size("one.bin.dkpart")

        let (second, _) = await runDownload(DownloadRequest(url: origin.url("/one.bin"), destination: .file(dir.file("one.bin"))))
        guard case .failure(let error) = second else {
            Issue.record("the second writer was not refused")
            return
        }
        #expect(error.code == .destinationInUse)
        #expect(error.detail.contains("in use by another download"), "\(error.detail)")
        #expect(error.detail.contains(dir.file("one.bin")))
        // The refused writer left the first one's partial as it was (no truncation, no removal).
        #expect(dir.size("one.bin.dkpart") ?? 0 >= before ?? 1)
        #expect(dir.contents.contains("one.bin.dkpart"))

        // Once the holder stops (its descriptor closes), the destination is free again.
        _ = await first.pause()
        origin.serve("/one.bin", .resource(Resource(size: 8 << 20, seed: 41)))
        let (third, _) = await runDownload(DownloadRequest(url: origin.url("/one.bin"), destination: .file(dir.file("one.bin"))))
        #expect(try third.get().bytes == 8 << 20)
        #expect(fileMatchesPattern(dir.file("one.bin"), size: 8 << 20, seed: 41))
    }

    @Test func aSecondWriterCannotTruncateTheFirstsFinishedFile() async throws {
        // The race behind defect 5: a writer that opened the partial before the holder renamed it into
        // place must not get the lock on the (now final) inode and truncate it.
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        let size: Int64 = 1 << 20
        origin.serve("/race.bin", .resource(Resource(size: size, seed: 42)))
        let request = DownloadRequest(url: origin.url("/race.bin"), destination: .file(dir.file("race.bin")))
        for _ in 0..<4 {
            try? FileManager.default.removeItem(atPath: dir.file("race.bin"))
            async let a = runDownload(request)
            async let b = runDownload(request)
            let results = await [a.0, b.0]
            for result in results {
                if case .failure(let error) = result { #expect(error.code == .destinationInUse, "\(error)") }
            }
            #expect(results.contains { (try? $0.get()) != nil })
            #expect(fileMatchesPattern(dir.file("race.bin"), size: size, seed: 42))
        }
        #expect(dir.contents == ["race.bin"])
    }

    @Test func partialsAndRecordsArePrivateAndTheFinishedFileIsNot() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        let download = await startStalledDownload(origin, dir, name: "p.bin")
        _ = await download.pause()
        #expect(mode(dir.file("p.bin.dkpart")) == 0o600)
        #expect(mode(dir.file("p.bin.dkresume")) == 0o600)
        origin.serve("/p.bin", .resource(Resource(size: 8 << 20, seed: 41)))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/p.bin"), destination: .file(dir.file("p.bin"))))
        _ = try result.get()
        #expect(mode(dir.file("p.bin")) == 0o644)
    }

    @Test func aPlantedResumeRecordNeverMovesAFileFromOutsideOrThroughASymlink() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        let outside = try ScratchDirectory()
        let secret = outside.file("secret.txt")
        try Data("do not touch".utf8).write(to: URL(fileURLWithPath: secret))
        // A symlink in the working directory pointing at the secret.
        let link = dir.file("CFNetworkDownload_link.tmp")
        #expect(symlink(secret, link) == 0)
        origin.serve("/r.bin", .resource(Resource(size: 1 << 20, seed: 43)))

        for planted in [secret, link, dir.path + "/../" + URL(fileURLWithPath: outside.path).lastPathComponent + "/secret.txt"] {
            let info = ResumeInfo(
                originalURL: origin.url("/r.bin"), currentURL: origin.url("/r.bin"), tempFilePath: planted, bytesReceived: 5)
            try info.write(to: dir.file("r.bin.dkresume"))
            let (result, _) = await runDownload(DownloadRequest(url: origin.url("/r.bin"), destination: .file(dir.file("r.bin"))))
            _ = try result.get()
            #expect(fileMatchesPattern(dir.file("r.bin"), size: 1 << 20, seed: 43))
            #expect(FileManager.default.contents(atPath: secret) == Data("do not touch".utf8), "planted \(planted)")
            try FileManager.default.removeItem(atPath: dir.file("r.bin"))
        }
        var st = stat()
        #expect(lstat(link, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK)
    }

    @Test func directoryDestinationsNeverOverwriteAndNeverTakeAWorkingFileName() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        try Data("mine".utf8).write(to: URL(fileURLWithPath: dir.file("report.pdf")))
        origin.serve("/r", .resource(Resource(size: 300_000, seed: 44, contentDisposition: "attachment; filename=\"report.pdf\"")))
        for expected in ["report (1).pdf", "report (2).pdf"] {
            let (result, _) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .directory(dir.path, naming: .fromResponse)))
            #expect(try result.get().path == dir.file(expected))
            #expect(fileMatchesPattern(dir.file(expected), size: 300_000, seed: 44))
        }
        #expect(FileManager.default.contents(atPath: dir.file("report.pdf")) == Data("mine".utf8))

        // A server naming its file after another download's working files gets a harmless name.
        for (proposed, safe) in [("other.bin.dkpart", "other.bin_dkpart"), ("other.bin.DKRESUME", "other.bin_DKRESUME"), ("j.dkjournal", "j_dkjournal")] {
            origin.serve("/w", .resource(Resource(size: 1000, seed: 45, contentDisposition: "attachment; filename=\"\(proposed)\"")))
            let (result, _) = await runDownload(DownloadRequest(url: origin.url("/w"), destination: .directory(dir.path, naming: .fromResponse)))
            #expect(try result.get().path == dir.file(safe))
        }
        #expect(dir.contents.allSatisfy { !$0.hasSuffix(".dkpart") && !$0.lowercased().hasSuffix(".dkresume") && !$0.hasSuffix(".dkjournal") })
    }

    func mode(_ path: String) -> mode_t? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return st.st_mode & 0o777
    }
}
