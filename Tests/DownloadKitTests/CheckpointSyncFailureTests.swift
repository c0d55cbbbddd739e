import Foundation
import Testing
import TestOrigin

@_spi(DownloadKitInternal) @testable import DownloadKit

/// Defect 9 of issue #13: a background checkpoint whose `fdatasync` fails must not leave the engine
/// believing the bytes are durable — no resume data claims more than the last successful sync.
@Suite(.timeLimit(.minutes(2)))
struct CheckpointSyncFailureTests {
    @Test func aFailedBackgroundSyncNeverLetsResumeDataClaimUnsyncedBytes() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 16 << 20
        origin.serve("/sync.bin", .resource(Resource(size: size, seed: 81, bytesPerSecond: 4 << 20)))
        let dir = try ScratchDirectory()
        let name = "sync-\(UUID().uuidString).bin"
        let partial = name + ".dkpart"
        // The first sync (the head-time checkpoint) succeeds; every later one fails with EIO.
        let faults = FileIOFaults()
        faults.failDataSync(forPathEndingWith: partial, after: 1)
        var configuration = testConfiguration(retries: 0, checkpointInterval: .milliseconds(50))
        configuration.fileIO = FileIOHooks(faults: faults)
        let download = Download(
            DownloadRequest(url: origin.url("/sync.bin"), destination: .file(dir.file(name))), configuration: configuration)
        download.start()
        for await _ in download.events {}
        let outcome: Result<DownloadResult, DownloadError>
        do { outcome = .success(try await download.result()) } catch { outcome = .failure(error) }
        guard case .failure(let error) = outcome else {
            Issue.record("the download succeeded although every data sync after the first failed")
            return
        }
        #expect(error.code == .fileSystem || error.code == .transport, "\(error)")
        #expect(error.detail.contains("fdatasync") || (error.underlying ?? "").contains("fdatasync"), "\(error)")
        let synced = faults.lastSyncedSize(forPathEndingWith: partial)
        #expect(synced >= 0)
        let resumeData = try #require(await download.pause())
        let claimed = try ResumeInfo.decode(resumeData).bytesReceived
        #expect(claimed <= synced, "resume data claims \(claimed) bytes, only \(synced) were synced")
        if let record = FileManager.default.contents(atPath: dir.file(name + ".dkresume")) {
            #expect(try ResumeInfo.decode(record).bytesReceived <= synced)
        }
    }
}
