import Foundation
import Glibc
import Testing
import TestOrigin

@_spi(DownloadKitInternal) @testable import DownloadKit

/// The file-system seam (issue #46): faults and write fences are values in one download's configuration
/// (``DownloadConfiguration/fileIO``), not process-wide registries, so two downloads in one process with
/// different hooks never see each other's.
@Suite(.timeLimit(.minutes(2)))
struct FileIOHooksTests {
    /// Two downloads at once: the first one's faults fail every `fdatasync` of *any* partial (the suffix
    /// `.dkpart` matches both); the second has faults of its own with no rule. The first fails on its first
    /// sync, the second completes. With one process-wide fault table the second would fail too.
    @Test func twoDownloadsWithDifferentFaultsDoNotSeeEachOthers() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 4 << 20
        origin.serve("/a.bin", .resource(Resource(size: size, seed: 61, bytesPerSecond: 8 << 20)))
        origin.serve("/b.bin", .resource(Resource(size: size, seed: 62, bytesPerSecond: 8 << 20)))
        let dir = try ScratchDirectory()
        let failing = FileIOFaults()
        failing.failDataSync(forPathEndingWith: ".dkpart", after: 0)
        let quiet = FileIOFaults()

        var first = testConfiguration(retries: 0, checkpointInterval: .milliseconds(50))
        first.fileIO = FileIOHooks(faults: failing)
        var second = testConfiguration(retries: 0, checkpointInterval: .milliseconds(50))
        second.fileIO = FileIOHooks(faults: quiet)
        async let a = runDownload(DownloadRequest(url: origin.url("/a.bin"), destination: .file(dir.file("a.bin"))), configuration: first)
        async let b = runDownload(DownloadRequest(url: origin.url("/b.bin"), destination: .file(dir.file("b.bin"))), configuration: second)
        let (outcomeA, outcomeB) = await (a.0, b.0)

        guard case .failure(let error) = outcomeA else {
            Issue.record("the download whose every data sync fails succeeded")
            return
        }
        #expect(error.detail.contains("fdatasync") || (error.underlying ?? "").contains("fdatasync"), "\(error)")
        let result = try outcomeB.get()
        #expect(result.bytes == size)
        #expect(FileManager.default.fileExists(atPath: dir.file("b.bin")))
        // The second download's syncs went through its own (rule-less) faults, not the first one's table.
        #expect(failing.lastSyncedSize(forPathEndingWith: ".dkpart") == -1)
    }

    /// A revoked fence in one download's hooks refuses its writes (`EPERM`, nothing placed), while a
    /// download beside it in the same process, without a fence, completes: the fence is the download's
    /// own value, not a table every write looks up.
    @Test func aRevokedFenceStopsOnlyTheDownloadItIsGivenTo() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 1 << 20
        origin.serve("/fenced.bin", .resource(Resource(size: size, seed: 63)))
        origin.serve("/free.bin", .resource(Resource(size: size, seed: 64)))
        let dir = try ScratchDirectory()
        let fence = WriteFence(until: WriteFence.now + 3600)
        fence.revoke()

        var fenced = testConfiguration(retries: 0)
        fenced.fileIO = FileIOHooks(fence: fence)
        async let a = runDownload(
            DownloadRequest(url: origin.url("/fenced.bin"), destination: .file(dir.file("fenced.bin"))), configuration: fenced)
        async let b = runDownload(DownloadRequest(url: origin.url("/free.bin"), destination: .file(dir.file("free.bin"))))
        let (outcomeA, outcomeB) = await (a.0, b.0)

        guard case .failure(let error) = outcomeA else {
            Issue.record("a download under a revoked fence succeeded")
            return
        }
        #expect(error.code == .fileSystem, "\(error)")
        #expect("\(error.detail) \(error.underlying ?? "")".contains("fenced"), "\(error)")
        #expect(fence.refusedWrites > 0)
        #expect(!FileManager.default.fileExists(atPath: dir.file("fenced.bin")))
        #expect(try outcomeB.get().bytes == size)
    }
}
