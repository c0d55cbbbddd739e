import DownloadKit
import Foundation
import HTTPClient
import TestOrigin
import Testing

/// Issue #13: one destination, one writer — a second writer refuses with `.destinationInUse`, touches
/// nothing, and the first finishes with the right bytes.
@Suite struct OneWriterTests {
    @Test func aSecondDownloadInTheSameProcessRefusesAndTouchesNothing() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 4 << 20
        // Every response of the first download stalls after 1 MiB: it is still writing when the second
        // arrives, however loaded the machine.
        origin.serve("/one", .resource(Resource(size: size, seed: 111, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 100)])))
        let dir = try ScratchDirectory()
        let request = DownloadRequest(url: origin.url("/one"), destination: .file(dir.file("one")))
        let first = Download(request, configuration: testConfiguration())
        first.start()
        for _ in 0..<1000 where first.progress.bytesReceived == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(first.progress.bytesReceived > 0)
        let partBefore = try #require(dir.size("one.dkpart"))

        // The second writer's URL carries a marker so the origin's log tells its requests apart.
        let (second, _) = await runDownload(
            DownloadRequest(url: origin.url("/one?second"), destination: .file(dir.file("one"))))
        guard case .failure(let error) = second else {
            Issue.record("a second writer must be refused, got \(second)")
            return
        }
        #expect(error.code == .destinationInUse)
        #expect(error.detail.contains("in use by another download (pid \(getpid()))"))
        #expect((dir.size("one.dkpart") ?? 0) >= partBefore)
        #expect(!origin.requests("/one").contains { $0.target.contains("second") }, "the second writer sent no request")

        // The first writer pauses (releasing the lock); a new Download continues its bytes.
        let data = try #require(await first.pause())
        origin.serve("/one", .resource(Resource(size: size, seed: 111)))
        let (resumed, _) = await runDownload(DownloadRequest(url: origin.url("/one"), destination: .file(dir.file("one")), resumeData: data))
        let done = try resumed.get()
        #expect(done.resumedFrom > 0)
        #expect(fileMatchesPattern(dir.file("one"), size: size, seed: 111))
        #expect(dir.contents == ["one"])
    }

    @Test func theLockGoesWithTheWriterAndTheNextOneProceeds() async throws {
        let origin = try FaultOrigin()
        origin.serve("/next", .resource(Resource(size: 1 << 20, seed: 112)))
        let dir = try ScratchDirectory()
        let request = DownloadRequest(url: origin.url("/next"), destination: .file(dir.file("next")))
        let (first, _) = await runDownload(request)
        _ = try first.get()
        try FileManager.default.removeItem(atPath: dir.file("next"))
        let (second, _) = await runDownload(request)
        _ = try second.get()
        #expect(fileMatchesPattern(dir.file("next"), size: 1 << 20, seed: 112))
    }
}
