import Foundation
import Testing
import TestOrigin

@_spi(DownloadKitInternal) @testable import DownloadKit

/// The segment coordinator sleeps until its workers or the caller give it something to do: a stalled
/// transfer does not wake it on a timer, and a stop ends its sleep at once.
@Suite(.timeLimit(.minutes(1)))
struct SegmentCoordinatorWakeTests {
    /// A coordinator for `path` on `origin` with two workers, and its counter of wake-ups.
    func coordinator(_ origin: FaultOrigin, _ path: String, size: Int64, dir: ScratchDirectory, control: DownloadControl) throws
        -> SegmentCoordinator
    {
        var configuration = testConfiguration()
        configuration.connections = 2
        configuration.minimumSegmentSize = 256 << 10
        let tempPath = dir.file("part")
        return SegmentCoordinator(
            total: size, file: try FileHandleFD.openForUpdate(tempPath), tempPath: tempPath,
            client: try DKHTTPClient(configuration: configuration.client), configuration: configuration, control: control,
            url: try HTTPURL(origin.url(path)), headers: DKHTTPHeaders(), ifRange: nil, entityTag: nil, rateLimiters: [],
            bufferSize: 64 << 10)
    }

    @Test func aStalledTransferLeavesTheCoordinatorAsleep() throws {
        let size: Int64 = 2 << 20
        let origin = try FaultOrigin()
        // Each worker's one range request stalls for 1.5 s after its first 256 KiB.
        origin.serve("/stall", .resource(Resource(size: size, seed: 71, faults: [.stallAfter(bytes: 256 << 10, seconds: 1.5, times: 10)])))
        let dir = try ScratchDirectory()
        let coordinator = try coordinator(origin, "/stall", size: size, dir: dir, control: DownloadControl())
        var wakeUps = 0
        let hooks = SegmentCoordinator.Hooks(
            started: { _ in }, checkpoint: { _ in }, publish: { _, _, _, _ in }, woke: { wakeUps += 1 })
        let start = monotonicSeconds()
        let report = try coordinator.run(saved: [], prefix: 0, hooks: hooks)
        let elapsed = monotonicSeconds() - start
        #expect(report.outcome == .complete)
        #expect(fileMatchesPattern(dir.file("part"), size: size, seed: 71))
        #expect(elapsed >= 1.4, "the stall lasted \(elapsed) s")
        // A 50 ms poll wakes some 30 times in the stall alone. Woken by events: the bytes before and after
        // it (progress every 20 ms while they flow — more of those when they flow slowly: 17 under
        // ThreadSanitizer, where the bound was 12), one checkpoint deadline inside it, each worker's end.
        #expect(wakeUps <= 24, "\(wakeUps) wake-ups in \(elapsed) s")
    }

    @Test func aStopEndsTheCoordinatorsSleep() throws {
        let size: Int64 = 2 << 20
        let origin = try FaultOrigin()
        origin.serve("/stop", .resource(Resource(size: size, seed: 72, faults: [.stallAfter(bytes: 256 << 10, seconds: 60, times: 10)])))
        let dir = try ScratchDirectory()
        let control = DownloadControl()
        let coordinator = try coordinator(origin, "/stop", size: size, dir: dir, control: control)
        let stopper = Thread {
            Thread.sleep(forTimeInterval: 0.5)
            control.requestStop(.pause)
        }
        stopper.start()
        let start = monotonicSeconds()
        let hooks = SegmentCoordinator.Hooks(started: { _ in }, checkpoint: { _ in }, publish: { _, _, _, _ in })
        #expect(throws: SegmentCoordinator.Failure.self) { try coordinator.run(saved: [], prefix: 0, hooks: hooks) }
        let elapsed = monotonicSeconds() - start
        #expect(elapsed < 5, "stopped after \(elapsed) s")
    }
}
