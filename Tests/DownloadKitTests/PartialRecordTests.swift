import CDownloadKitSystem
import Foundation
import Glibc
import Testing
import TestOrigin

@testable import DownloadKit

/// A download's first record lives on its partial (the `user.downloadkit.resume` extended attribute) until
/// a checkpoint writes the `.dkresume` file (issue #18: small files never create one). A run that dies
/// before its first checkpoint leaves only the partial; these tests take that partial, attributes and all,
/// as the next run would find it.
@Suite(.timeLimit(.minutes(2)))
struct PartialRecordTests {
    static let mib: Int64 = 1 << 20

    /// Starts a download that stalls after 1 MiB, with no checkpoint and no idle timeout before the test
    /// ends (the origin's shutdown ends the stall), and returns it once the partial holds that MiB: the
    /// state a `kill -9` at that moment leaves.
    func stalledBeforeTheFirstCheckpoint(_ origin: FaultOrigin, _ dir: ScratchDirectory, seed: UInt64) async throws -> Download {
        origin.serve("/r", .resource(Resource(size: 4 * Self.mib, seed: seed, faults: [.stallAfter(bytes: Self.mib, seconds: 600, times: 1)])))
        // Nothing the download does on a clock may end the stall: this task's polls can wait behind other
        // tests for tens of seconds under a sanitizer (stop 28's CI saw an idle timeout retry, finish the
        // file and rename the partial away before the first poll ran).
        var configuration = testConfiguration(checkpointInterval: .seconds(600))
        configuration.client.idleTimeout = .seconds(600)
        let download = Download(DownloadRequest(url: origin.url("/r"), destination: .file(dir.file("f"))), configuration: configuration)
        download.start()
        // No deadline but the suite's time limit. A download that ends instead fails the test with its outcome.
        while dir.size("f.dkpart") != Self.mib {
            if [.completed, .failed, .cancelled, .paused].contains(download.state) {
                Issue.record("the download ended before its first MiB: \(String(describing: try? await download.result()))")
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(dir.size("f.dkpart") == Self.mib)
        return download
    }

    /// Copies the partial's bytes and its record attribute (raw) into `target`: what a new run would find.
    func copyPartial(from source: ScratchDirectory, to target: ScratchDirectory, record: (inout [UInt8]) -> Void = { _ in }) throws {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source.file("f.dkpart")))
        try bytes.write(to: URL(fileURLWithPath: target.file("f.dkpart")))
        let size = dk_lgetxattr(source.file("f.dkpart"), ResumeInfo.partialAttribute, nil, 0)
        try #require(size > 0, "the running download stored no record on its partial")
        var value = [UInt8](repeating: 0, count: size)
        _ = value.withUnsafeMutableBytes { dk_lgetxattr(source.file("f.dkpart"), ResumeInfo.partialAttribute, $0.baseAddress, $0.count) }
        record(&value)
        let fd = open(target.file("f.dkpart"), O_RDWR)
        defer { close(fd) }
        #expect(value.withUnsafeBytes { dk_fsetxattr(fd, ResumeInfo.partialAttribute, $0.baseAddress, $0.count) } == 0)
    }

    @Test func aRunThatDiesBeforeItsFirstCheckpointResumesFromThePartialsOwnRecord() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let live = try ScratchDirectory()
        let download = try await stalledBeforeTheFirstCheckpoint(origin, live, seed: 61)
        #expect(!FileManager.default.fileExists(atPath: live.file("f.dkresume")), "no record file before the first checkpoint")
        let record = try #require(ResumeInfo.stored(onPartial: live.file("f.dkpart")))
        #expect(record.entityTag == Resource.derivedETag(seed: 61, size: 4 * Self.mib))
        #expect(record.bootID == FileSystem.bootID)
        let next = try ScratchDirectory()
        try copyPartial(from: live, to: next)
        await download.cancel()

        origin.serve("/r", .resource(Resource(size: 4 * Self.mib, seed: 61)))
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .file(next.file("f"))))
        let finished = try result.get()
        #expect(finished.resumedFrom == Self.mib, "\(reasons(events))")
        #expect(origin.requests("/r").last?.header("Range") == "bytes=\(Self.mib)-")
        #expect(fileMatchesPattern(next.file("f"), size: 4 * Self.mib, seed: 61))
        // The finished file carries the validators, not the record.
        #expect(ResumeInfo.stored(onPartial: next.file("f")) == nil)
        #expect(next.contents == ["f"])
    }

    /// Bytes the page cache held survive a crash, not a reboot: a record from another boot claims no
    /// unsynced byte, so the partial (never synced) is not resumed.
    @Test func aPartialsRecordFromAnotherBootResumesNothing() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let live = try ScratchDirectory()
        let download = try await stalledBeforeTheFirstCheckpoint(origin, live, seed: 62)
        var record = try #require(ResumeInfo.stored(onPartial: live.file("f.dkpart")))
        record.bootID = "00000000-0000-0000-0000-000000000000"
        let next = try ScratchDirectory()
        try copyPartial(from: live, to: next) { value in value = Array(try! record.encoded()) }
        await download.cancel()

        origin.serve("/r", .resource(Resource(size: 4 * Self.mib, seed: 62)))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .file(next.file("f"))))
        #expect(try result.get().resumedFrom == 0)
        #expect(origin.requests("/r").last?.header("Range") == nil)
        #expect(fileMatchesPattern(next.file("f"), size: 4 * Self.mib, seed: 62))
    }

    /// A record attribute that is not a record (planted, or cut short) is bad input: the run starts over
    /// with a correct file and no crash.
    @Test func aCorruptRecordOnThePartialStartsOver() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let live = try ScratchDirectory()
        let download = try await stalledBeforeTheFirstCheckpoint(origin, live, seed: 63)
        let next = try ScratchDirectory()
        try copyPartial(from: live, to: next) { value in value = Array(value.prefix(value.count / 2)) }
        await download.cancel()

        origin.serve("/r", .resource(Resource(size: 4 * Self.mib, seed: 63)))
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .file(next.file("f"))))
        #expect(try result.get().resumedFrom == 0)
        #expect(reasons(events).contains(.restarted(.unusablePartialData)), "\(reasons(events))")
        #expect(fileMatchesPattern(next.file("f"), size: 4 * Self.mib, seed: 63))
    }
}
