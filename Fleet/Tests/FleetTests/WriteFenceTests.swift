@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import Testing
import TestOrigin

/// ``WriteFence``, passed to a download in its configuration (``FileIOHooks``): a revoked or expired fence stops a running download's writes at the
/// next one (no byte, no checkpoint, no rename after it), and a download under a new fence continues
/// from the bytes the first one left.
@Suite(.timeLimit(.minutes(3)))
struct WriteFenceTests {
    @Test func aRevokedFenceStopsTheDownloadAndTheNextHolderContinuesFromItsBytes() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 2_000_000
        // Every response sends up to byte 400,000 (paced, so checkpoints happen), then holds until the test
        // has revoked the fence: the state the test looks at is frozen however late it runs on a busy
        // machine, and the first body write after the revocation is the first one refused.
        let revoked = LockedBox(false)
        defer { revoked.mutate { $0 = true } }
        origin.serve(
            "/fenced.bin",
            .script { request, connection in
                let start = Fleet.rangeStart(request)
                var head = start == 0 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(start)-\(size - 1)/\(size)\r\n"
                head += "Content-Length: \(size - start)\r\nAccept-Ranges: bytes\r\nETag: \"fence-1\"\r\nConnection: close\r\n\r\n"
                try connection.write(head)
                var offset = start
                while offset < 400_000 {
                    let piece = min(50_000, 400_000 - offset)
                    try connection.writePattern(offset: offset, count: piece, seed: 91)
                    offset += piece
                    connection.sleep(seconds: 0.1)
                }
                for _ in 0..<6000 where !revoked.value { connection.sleep(seconds: 0.05) }
                try connection.writePattern(offset: offset, count: size - offset, seed: 91)
            })
        let scratch = try ScratchDirectory()
        let destination = DownloadDestination.file(scratch.file("fenced.bin"))
        let url = origin.url("/fenced.bin")
        var configuration = DownloadConfiguration(checkpointInterval: .milliseconds(200))
        configuration.sharedRateLimiters = [TokenBucket(bytesPerSecond: 1 << 50)]

        let first = WriteFence(until: WriteFence.now + 3600)
        configuration.fileIO.fence = first
        let download = Download(DownloadRequest(url: url, destination: destination), configuration: configuration)
        let seen = LockedBox<[String]>([])
        let events = download.events
        let watcher = Task {
            for await event in events {
                if case .progress = event { continue }
                seen.mutate { $0.append("\(event)") }
            }
        }
        download.start()
        let partial = scratch.file("fenced.bin.dkpart")
        let resumeInfo = scratch.file("fenced.bin.dkresume")
        let durable = await eventually(seconds: 60) { ((try? ResumeInfo.read(from: resumeInfo))?.bytesReceived ?? 0) > 200_000 }
        #expect(durable, "events: \(seen.value), requests: \(origin.requests().map { "\($0.method) \($0.target) \($0.header("Range") ?? "-")" })")
        #expect(await eventually(seconds: 60) { Fleet.size(partial) >= 400_000 })
        watcher.cancel()
        first.revoke()
        revoked.mutate { $0 = true }
        let sizeAtRevoke = Fleet.size(partial)
        let durableAtRevoke = try ResumeInfo.read(from: resumeInfo).bytesReceived
        let outcome: DownloadError?
        do throws(DownloadError) {
            _ = try await download.result()
            outcome = nil
        } catch {
            outcome = error
        }
        let error = try #require(outcome)
        #expect(error.code == .fileSystem)
        #expect(error.detail.contains("fenced"))
        #expect(first.refusedWrites > 0)
        // At most the one write already past its check when the fence was revoked reached the file; the
        // resume info was not advanced and nothing was renamed into place.
        #expect(Fleet.size(partial) - sizeAtRevoke <= 1 << 20)
        #expect(try ResumeInfo.read(from: resumeInfo).bytesReceived == durableAtRevoke)
        #expect(!FileManager.default.fileExists(atPath: scratch.file("fenced.bin")))
        let leftOnDisk = Fleet.size(partial)

        let second = WriteFence(until: WriteFence.now + 3600)
        configuration.fileIO.fence = second
        let again = Download(DownloadRequest(url: url, destination: destination), configuration: configuration)
        again.start()
        let result = try await again.result()
        // The engine continues from the partial (same boot: its length; at least the durable bytes).
        #expect(result.resumedFrom >= durableAtRevoke)
        #expect(result.resumedFrom <= leftOnDisk)
        #expect(second.refusedWrites == 0)
        #expect(fileMatchesPattern(scratch.file("fenced.bin"), size: size, seed: 91))
    }

    /// A fence whose `confirm` says no (the database no longer names this worker) refuses checkpoints and
    /// the final rename even before its deadline: no progress is recorded and no file is placed.
    @Test func aFenceThatIsNotConfirmedRefusesCheckpointsAndTheFinalRename() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/unconfirmed.bin", .resource(Resource(size: 300_000, seed: 93)))
        let scratch = try ScratchDirectory()
        let destination = DownloadDestination.file(scratch.file("unconfirmed.bin"))
        let url = origin.url("/unconfirmed.bin")
        var configuration = DownloadConfiguration()
        configuration.sharedRateLimiters = [TokenBucket(bytesPerSecond: 1 << 50)]
        let asked = LockedBox<[WriteFence.Operation]>([])
        let fence = WriteFence(until: WriteFence.now + 3600) { operation in
            asked.mutate { $0.append(operation) }
            return false
        }
        configuration.fileIO.fence = fence
        let download = Download(DownloadRequest(url: url, destination: destination), configuration: configuration)
        download.start()
        let outcome: DownloadError?
        do throws(DownloadError) {
            _ = try await download.result()
            outcome = nil
        } catch {
            outcome = error
        }
        let error = try #require(outcome)
        #expect(error.detail.contains("fenced"))
        #expect(fence.refusedWrites > 0)
        #expect(!asked.value.isEmpty)
        #expect(!asked.value.contains(.write))
        #expect(!FileManager.default.fileExists(atPath: scratch.file("unconfirmed.bin")))
        #expect(((try? ResumeInfo.read(from: scratch.file("unconfirmed.bin.dkresume")))?.bytesReceived ?? 0) == 0)
    }

    @Test func anExpiredFenceRefusesAndExtendingItAllowsAgain() {
        let fence = WriteFence(until: WriteFence.now - 1)
        #expect(!fence.allowsWrites)
        fence.extend(until: WriteFence.now + 60)
        #expect(fence.allowsWrites)
        fence.extend(until: WriteFence.now - 10)  // never backwards
        #expect(fence.allowsWrites)
        fence.revoke()
        fence.extend(until: WriteFence.now + 120)
        #expect(!fence.allowsWrites)
    }
}
